"""tune's output for people (the ladder in the terminal) and machines (tune_report.json)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from torchpace import run_files
from torchpace._version import __version__
from torchpace.atomic import write_text_atomic
from torchpace.capture.files_report import files_lines
from torchpace.printable import printable_fields
from torchpace.tune import noise
from torchpace.tune.result import KnobStatus, Rung, TuneResult
from torchpace.tune.run_check import RunCheck

REPORT_NAME = run_files.TUNE_REPORT
MIB = 2**20
# The version of the report's layout (docs/schemas/tune_report.schema.json): raised when a
# key is renamed, removed or changes meaning; a new key keeps it.
SCHEMA_VERSION = 1
# Off a terminal (a file, a pipe, a CI log) rich would wrap every table at 80 columns and
# break knob names across lines: the report is drawn this wide there instead.
WIDE = 200


def report_console() -> Console:
    """stdout's console: the terminal's width on a terminal, WIDE elsewhere."""
    console = Console()
    return console if console.is_terminal else Console(width=WIDE)


def to_dict(result: TuneResult, command: list[str], environment: dict, settings) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "verb": "tune",
        "torchpace": __version__,
        "command": command,
        "environment": environment,
        "settings": {
            "warmup": settings.warmup,
            "steps": result.steps or settings.steps,
            "seed": settings.seed,
            "timeout_s": settings.timeout_s,
        },
        "noise_pct": result.noise.pct if result.noise else None,
        "noise_threshold_pct": result.noise.threshold_pct if result.noise else None,
        "pair_sd_pct": result.pair_sd_pct,
        "detectable_pct": result.detectable_pct,
        "statistics": statistics_text(result),
        # every figure, once: the ladder's first and last rungs, the final check, the toml
        "figures": result.figures,
        "ladder": [dataclasses.asdict(r) for r in result.ladder],
        "best": result.best,
        "final_speedup": result.final_speedup,
        "final_gains_pct": result.final_gains_pct,
        "final_switched_runs": result.final_switched_runs,
        "knobs": [dataclasses.asdict(k) for k in result.knobs],
        "trials": [
            {**t.to_dict(), "verdict": result.verdicts.get(i, "")}
            for i, t in enumerate(result.trials)
        ],
        "stopped": result.stopped,
        "stopped_by": result.stopped_by,
        "wall_s": result.wall_s,
        # the batch-size finder's result beside the doctor's estimate (tune/batch_check.py)
        "batch_size_check": result.batch_check,
        # what the script did to files outside the run folder, every run's writes undone
        # (capture/file_guard.py, file_restore.py)
        "files": result.files.to_dict(),
        # a trial's ms/step against the plain script's (tune/fidelity.py)
        "fidelity": result.fidelity,
        # the kept configuration as `torchpace run` runs it (tune/run_check.py)
        "run_check": result.run_check,
    }


def write_report(report: dict, path: Path) -> None:
    write_text_atomic(path, json.dumps(report, indent=2, default=str))


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def final_pairs_text(result: TuneResult) -> str:
    """How the final check compared: processes in pairs, or one knob switched within each
    process (its gains are then block pairs)."""
    n = len(result.final_gains_pct)
    if result.final_switched_runs:
        return f"{n} block pairs, switched within {result.final_switched_runs} processes"
    return f"{n} pairs"


def statistics_text(result: TuneResult) -> str:
    """How the verdicts were reached and what they could see, in one paragraph (the terminal
    and the HTML show the same text)."""
    if result.noise is None:
        return ""
    clear = f"{result.noise.clear_by_runs_pct:.1f}%"
    if result.noise.clear_pct != result.noise.clear_by_runs_pct:
        clear += (
            f" ({result.noise.clear_pct:.1f}%, {noise.CLEAR_SDS:.0f} sd of the pairs, once "
            f"{noise.PAIRS_FOR_SPREAD} pairs had measured them)"
        )
    parts = [
        f"each change ran in pairs with its reference, in random order, "
        f"{result.steps or '?'} timed steps a run; kept when the 95% lower bound of its gain "
        f"(Hodges-Lehmann over up to {noise.MAX_PAIRS} pairs, signed-rank interval) was above "
        f"0 and the gain at least {noise.MIN_GAIN_PCT:.0f}%, or when two pairs each gained "
        f"over {clear}; "
        + (
            f"back-to-back baseline runs differed by {result.noise.pct:.1f}%"
            if result.noise.pct is not None
            else "the back-to-back noise not measured"
        )
    ]
    if result.pair_sd_pct is not None:
        parts.append(f"pairs by {result.pair_sd_pct:.1f}% (sd)")
    text = ", ".join(parts)
    if result.detectable_pct is not None:
        text += (
            f". The smallest change this tune could have seen: about {result.detectable_pct:.0f}%"
            " (found 4 times in 5 within the pairs allowed); a knob worth less was refused "
            "whatever it is worth"
        )
    disturbed = sum(1 for v in result.verdicts.values() if v.startswith("disturbed"))
    if disturbed:
        text += f". {disturbed} disturbed runs (and their pairs) were run again, not used"
    return text


def render(result: TuneResult, console: Console | None = None) -> None:
    console = console or report_console()
    # the script's names and errors (in the knobs' reasons, the files) shown, never obeyed
    result = printable_fields(result)
    console.print(ladder_table(result))
    if result.fidelity is not None and result.fidelity.get("ratio") is not None:
        f = result.fidelity
        if f.get("inconclusive"):  # out of bounds by the median, not beyond the noise
            state = f"[yellow]inconclusive[/]: outside the {f['limit_pct']:.0f}% limit by the "
            state += "median, not beyond this machine's noise; every verdict is less certain"
        else:
            state = f"{'within' if f['ok'] else '[bold red]OUTSIDE[/]'} the "
            state += f"{f['limit_pct']:.0f}% limit"
        console.print(
            f"fidelity: trials time this script at {f['ratio']:.3f}x its plain speed "
            f"({state}; docs/tune.md)"
        )
    if result.run_check is not None:
        console.print(escape(RunCheck.from_dict(result.run_check).line()))
    if result.noise and result.noise.pct is None:
        console.print(
            f"noise: not measured ({len(result.noise.medians_ms)} back-to-back baseline run "
            "succeeded; it takes two)"
        )
    text = statistics_text(result)
    if text:
        console.print(f"statistics: {text}", highlight=False)
    if result.final_speedup is not None and result.best:
        console.print(
            f"final check (paired with the baseline, {final_pairs_text(result)}): "
            f"[bold]{result.figures.get('speedup', result.final_speedup):.2f}x[/] "
            "(the ladder's last row)"
        )
    console.print(_knobs_table(result))
    console.print("* can change what the program computes (the loss check compared it)")
    for line in batch_check_lines(result.batch_check):
        console.print(line, highlight=False, markup=False)
    for line in files_lines(result.files):
        console.print(line, highlight=False, markup=False)
    if result.stopped in ("budget", "time-budget"):
        # the search held the final check's runs back from the limit: it still ran
        checked = "; what was kept had its final check" if result.final_gains_pct else ""
        console.print(
            f"[yellow]stopped: {escape(result.stopped_by)} ran out; the rest was not tried{checked}"
        )
    elif result.stopped == "interrupted":
        console.print(
            f"[yellow]stopped by {escape(result.stopped_by or 'Ctrl-C')}; the best configuration "
            "confirmed so far is kept"
        )
    for line in revised_verdict_lines(result):
        console.print(line, highlight=False, markup=False)


def _knobs_table(result: TuneResult) -> Table:
    """Every knob, kept first: its status, value, gain and why."""
    knobs = Table(title="every knob", title_justify="left")
    for name in ("knob", "status", "value", "gain"):
        knobs.add_column(name, no_wrap=True)  # a knob's name is never broken across lines
    knobs.add_column("why", overflow="fold")
    order = [KnobStatus.KEPT, KnobStatus.UNDECIDED, KnobStatus.REJECTED,
             KnobStatus.COULD_NOT_APPLY, KnobStatus.NOT_APPLICABLE,
             KnobStatus.NOT_TRIED]  # fmt: skip
    for k in sorted(result.knobs, key=lambda k: order.index(k.status)):
        style = {
            "kept": "green",
            "rejected": "red",
            "could-not-apply": "yellow",
            "undecided": "yellow",
        }.get(k.status, "dim")
        name = k.knob + (" *" if k.changes_numerics else "")
        knobs.add_row(
            name,
            f"[{style}]{k.status}[/]",
            "" if k.value is None else escape(str(k.value)),
            "" if k.gain_pct is None else f"{k.gain_pct:+.1f}%",
            escape(k.reason),  # an error's "[enforce fail at alloc_cpu.cpp:127]" is not markup
        )
    return knobs


def ladder_table(result: TuneResult) -> Table:
    """The ladder, its baseline row first: measured even when no rung was settled (a tune
    stopped during its first runs shows what the script ran at, not an empty table)."""
    ladder = Table(title="torchpace tune: each kept change, cumulatively", title_justify="left")
    for name, justify in [
        ("configuration", "left"),
        ("ms/step", "right"),
        ("samples/s", "right"),
        ("speedup", "right"),
        ("peak memory", "right"),
        ("numerics", "left"),
    ]:
        # the figures never wrap; a long configuration folds rather than breaking a name
        ladder.add_column(name, justify=justify, no_wrap=name != "configuration")
    rungs = result.ladder or [r for r in [baseline_rung(result)] if r is not None]
    for rung in rungs:
        ladder.add_row(
            escape(rung.label),
            f"{rung.median_ms:.1f}",
            "-" if rung.samples_per_s is None else f"{rung.samples_per_s:,.1f}",
            f"{rung.speedup:.2f}x",
            _mib(rung.peak_bytes),
            "changed" if rung.changes_numerics else "same",
        )
    return ladder


def baseline_rung(result: TuneResult) -> Rung | None:
    """The baseline's row from its successful runs, where the ladder has none."""
    runs = [t for t in result.trials if t.ok and not t.config and t.ms_per_step is not None]
    if not runs:
        return None
    rates = [t.samples_per_s for t in runs if t.samples_per_s]
    peaks = [t.peak_bytes for t in runs if t.peak_bytes]
    return Rung(
        label=f"baseline ({len(runs)} run{'s' if len(runs) != 1 else ''})",
        config={},
        median_ms=statistics.median(t.ms_per_step for t in runs),
        samples_per_s=statistics.median(rates) if rates else None,
        speedup=1.0,
        peak_bytes=max(peaks) if peaks else None,
        changes_numerics=False,
    )


# the knobs that ran and were not kept
MEASURED_NOT_KEPT = (KnobStatus.REJECTED, KnobStatus.UNDECIDED)


def nothing_kept_text(result: TuneResult) -> str:
    """Why a tune kept nothing, in one sentence: its knobs measured and refused, or never
    tried (and what the untried ones need), or none that applies."""
    measured = [k.knob for k in result.knobs if k.status in MEASURED_NOT_KEPT]
    stopped = result.stopped in ("budget", "time-budget") and result.stopped_by
    untried = [k.knob for k in result.knobs if k.status == KnobStatus.NOT_TRIED
               and stopped and stopped in k.reason]  # fmt: skip
    parts = []
    if measured:
        parts.append(f"measured and not kept: {', '.join(measured)}")
    if untried:
        parts.append(
            f"never tried, {stopped} ran out first: {', '.join(untried)}"
            + untried_budget_text(result, len(untried))
        )
    if not parts:
        return "no knob that applies to this script made it measurably faster here"
    if not measured:
        return "no knob was measured; " + "; ".join(parts)
    return "no knob made this script measurably faster here (" + "; ".join(parts) + ")"


def untried_budget_text(result: TuneResult, knobs: int) -> str:
    """What the untried knobs need: each decision takes at least noise.CLEAR_PAIRS pairs of
    runs (the knob's and its reference's), at this script's median run time."""
    walls = [t.wall_s for t in result.trials if t.ok and t.wall_s > 0]
    if not walls:
        return ""
    need = knobs * noise.CLEAR_PAIRS * 2 * statistics.median(walls)
    return (
        f" (they need at least {need:.0f} s more: {noise.CLEAR_PAIRS} pairs of "
        f"{statistics.median(walls):.0f} s runs each; --time-budget {result.wall_s + need:.0f})"
    )


# the verdict a noise run gets when a later look finds it disturbed (tune/search.py): shown
# on screen as a noise reference first, when it ran
REVISED_SUFFIX = "; run again"


def revised_verdict_lines(result: TuneResult) -> list[str]:
    """Runs shown on screen with one verdict and judged again once later runs were in (a
    baseline repeat found disturbed beside the others): the last word, as the JSON says it."""
    out = []
    for index, verdict in sorted(result.verdicts.items()):
        if (
            verdict.startswith("disturbed")
            and verdict.endswith(REVISED_SUFFIX)
            and (not verdict.endswith("pair" + REVISED_SUFFIX))
        ):
            label = result.trials[index].label if index < len(result.trials) else "?"
            out.append(f"trial {index + 1} ({label}), shown above as a noise reference, was "
                       f"then found {verdict}")  # fmt: skip
    return out


def batch_check_lines(check: dict | None) -> list[str]:
    """The batch-size finder's result beside the doctor's estimate, for the terminal."""
    if not check:
        return []
    failed = check["first_out_of_memory"]
    found = f"the finder ran batch {check['largest_ran']}" + (
        f" and ran out of memory at {failed}" if failed else " without running out of memory"
    )
    if check["estimate_at_limit"] is None:
        return [f"batch size: {found}; {check['verdict']}"]
    under = f" under {check['capacity_text']}" if check.get("capacity_text") else ""
    lines = [
        f"batch size: the doctor estimated about {check['estimate_at_limit']} would fit{under} "
        f"({check['estimate']} with 10% kept free; from batch {check['batch_size']}); "
        f"{found}: {check['verdict']}"
    ]
    measured = check.get("measured_per_sample_bytes")
    if measured and check.get("per_sample_bytes"):
        lines.append(
            f"  memory per sample: the doctor {check['per_sample_bytes'] / MIB:.3f} MiB; the "
            f"trials' peak memory {measured / MIB:.3f} MiB (slope over the sizes that ran)"
        )
    return lines
