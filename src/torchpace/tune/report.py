"""tune's output for people (the ladder in the terminal) and machines (tune_report.json)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from torchpace import __version__
from torchpace.atomic import write_text_atomic
from torchpace.tune.noise import MAX_PAIRS, MIN_GAIN_PCT
from torchpace.tune.search import KnobStatus, TuneResult

REPORT_NAME = "tune_report.json"
# The version of the report's layout (docs/schemas/tune_report.schema.json): raised when a
# key is renamed, removed or changes meaning; a new key keeps it.
SCHEMA_VERSION = 1


def to_dict(result: TuneResult, command: list[str], environment: dict, settings) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "verb": "tune",
        "torchpace": __version__,
        "command": command,
        "environment": environment,
        "settings": {
            "warmup": settings.warmup,
            "steps": settings.steps,
            "seed": settings.seed,
            "timeout_s": settings.timeout_s,
        },
        "noise_pct": result.noise.pct if result.noise else None,
        "noise_threshold_pct": result.noise.threshold_pct if result.noise else None,
        "ladder": [dataclasses.asdict(r) for r in result.ladder],
        "best": result.best,
        "final_speedup": result.final_speedup,
        "final_gains_pct": result.final_gains_pct,
        "knobs": [dataclasses.asdict(k) for k in result.knobs],
        "trials": [
            {**t.to_dict(), "verdict": result.verdicts.get(i, "")}
            for i, t in enumerate(result.trials)
        ],
        "stopped": result.stopped,
        "wall_s": result.wall_s,
    }


def write_report(report: dict, path: Path) -> None:
    write_text_atomic(path, json.dumps(report, indent=2, default=str))


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def render(result: TuneResult, console: Console | None = None) -> None:
    console = console or Console(stderr=False)
    ladder = Table(title="torchpace tune: each kept change, cumulatively", title_justify="left")
    for name, justify in [
        ("configuration", "left"),
        ("ms/step", "right"),
        ("samples/s", "right"),
        ("speedup", "right"),
        ("peak memory", "right"),
        ("numerics", "left"),
    ]:
        ladder.add_column(name, justify=justify)
    for rung in result.ladder:
        ladder.add_row(
            rung.label,
            f"{rung.median_ms:.1f}",
            "-" if rung.samples_per_s is None else f"{rung.samples_per_s:,.1f}",
            f"{rung.speedup:.2f}x",
            _mib(rung.peak_bytes),
            "changed" if rung.changes_numerics else "same",
        )
    console.print(ladder)
    if result.noise:
        console.print(
            f"noise: back-to-back baseline runs differ by {result.noise.pct:.1f}%. Each change "
            "ran in pairs with the reference run next to it: kept when two pairs each gained "
            f"over {result.noise.threshold_pct:.1f}%, or when the 90% lower bound of its mean "
            f"gain over up to {MAX_PAIRS} pairs was above {MIN_GAIN_PCT:.0f}%"
        )
    if result.final_speedup is not None and result.best:
        console.print(
            f"final check (alternated with the baseline, {len(result.final_gains_pct)} pairs): "
            f"[bold]{result.final_speedup:.2f}x[/]"
        )
    knobs = Table(title="every knob", title_justify="left")
    for name in ("knob", "status", "value", "alone", "why"):
        knobs.add_column(name, overflow="fold")
    order = [KnobStatus.KEPT, KnobStatus.REJECTED, KnobStatus.NOT_APPLICABLE, KnobStatus.NOT_TRIED]
    for k in sorted(result.knobs, key=lambda k: order.index(k.status)):
        style = {"kept": "green", "rejected": "red"}.get(k.status, "dim")
        name = k.knob + (" *" if k.changes_numerics else "")
        knobs.add_row(
            name,
            f"[{style}]{k.status}[/]",
            "" if k.value is None else str(k.value),
            "" if k.gain_pct is None else f"{k.gain_pct:+.1f}%",
            k.reason,
        )
    console.print(knobs)
    console.print("* can change what the program computes (the loss check compared it)")
    if result.stopped == "budget":
        console.print("[yellow]stopped: the budget ran out (--budget); the rest was not tried")
    elif result.stopped == "interrupted":
        console.print("[yellow]stopped by Ctrl-C; the best configuration confirmed so far is kept")
