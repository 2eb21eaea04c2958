"""Everything a tune leaves: the ladder on screen, tune_report.json, torchpace.toml and the
source diff (shown always, written into the user's files only with --write)."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console

from torchpace import run_files
from torchpace.capture.spec import python_command
from torchpace.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK
from torchpace.knobs.nproc_per_node import from_config as processes_in
from torchpace.tune.options import TuneOptions
from torchpace.tune.progress import say
from torchpace.tune.report import (
    REPORT_NAME,
    final_pairs_text,
    nothing_kept_text,
    render,
    report_console,
    to_dict,
    write_report,
)
from torchpace.tune.result import TuneResult
from torchpace.tune.trial import OUTPUT_NAME


def write_outputs(result: TuneResult, options: TuneOptions, settings, run_dir: Path, facts) -> int:
    """The report on stdout (the progress display is on stderr) and every file of the run
    folder. ``facts``: the doctor's capture of the script (where its loaders and model are).
    One way down: tune's own outputs (the report, the diff), then torchpace.toml, then the
    HTML page, last."""
    from torchpace.env.facts import collect
    from torchpace.report.html import REPORT_NAME as HTML_NAME
    from torchpace.report.html import tune_html, write_pages

    command = python_command(settings.target, settings.is_module, settings.args)
    # report.html in the run folder (and at --html PATH): the ladder as a chart
    pages = [("the run folder's", run_dir / HTML_NAME), ("--html", options.html)]
    out = report_console()
    render(result, out)
    report = to_dict(result, command, collect().to_dict(), settings)
    report["speed_of_light"] = _speed_of_light(result, out)
    write_report(report, run_dir / REPORT_NAME)
    if options.json is not None:
        write_report(report, options.json)
    failed = _stopped_before_any_knob(result, run_dir)
    if failed is None:  # a configuration to give: torchpace.toml and the source diff
        _configuration(result, options.write, settings, run_dir, facts, command, out)
    write_pages(lambda: tune_html(report), pages, say)
    if failed is not None:
        say(failed)
        return EXIT_FAILURE if result.stopped == "fidelity" else 1
    if result.stopped == "files":  # a write refused (capture/file_guard.py): not finished
        return EXIT_FAILURE
    return EXIT_INTERRUPTED if result.stopped == "interrupted" else EXIT_OK


def _stopped_before_any_knob(result: TuneResult, run_dir: Path) -> str | None:
    """Why a tune that stopped before any knob gives no configuration, or None."""
    if result.stopped == "fidelity":
        return (
            "stopped before any knob was decided: the trials would not time what the script does "
            f"(above); every run is in {run_dir / 'fidelity'}"
        )
    if result.stopped == "baseline-failed":
        failed = result.trials[0]  # the baseline is always the first trial
        error = (failed.error or "").strip()[-800:]
        return (
            f"the unmodified script failed in its baseline trial ({failed.outcome}): {error}\n"
            f"nothing to tune; the trial's folder is {failed.out_dir}"
        )
    return None


def _configuration(
    result: TuneResult, write: bool, settings, run_dir: Path, facts, command, out: Console
) -> None:
    """The kept configuration: the source diff (shown, written with --write), torchpace.toml,
    and the command that applies it."""
    from torchpace.knobs import fingerprint
    from torchpace.knobs.config import TuneConfig, write_config

    toml_path = run_dir / run_files.TUNE_CONFIG
    config = TuneConfig(
        knobs=dict(result.best),
        fingerprint=fingerprint.current(),
        measured=_measured(result),
        script=shlex.join(command[1:]),
    )
    _diff(result, run_dir, write, out, settings, facts)
    run_line = apply_command(result.best, settings, toml_path, command)
    write_config(toml_path, config, _comments(result))
    if result.best:
        out.print(f"\nconfiguration: {toml_path}\napply it with no code change:  {run_line}")
    else:
        out.print(
            f"\n{nothing_kept_text(result)}; {toml_path} holds the empty configuration "
            "(the script as it is)"
        )
    out.print(f"every trial: {run_dir / REPORT_NAME}")
    out.print(f"the script's output in each trial: {run_dir / 'trials' / '<NN>' / OUTPUT_NAME}")


def apply_command(best: dict, settings, toml_path: Path, command: list[str]) -> str:
    """The command that runs the script with the kept configuration: `run` for one process;
    for a job of several, `launch` with the process count tune kept (the nproc-per-node
    knob), else the one it tuned, and every rank applies the rest."""
    if settings.nproc_per_node > 1:
        nproc = processes_in(best) or settings.nproc_per_node
        verb = ["launch", "--nproc-per-node", str(nproc)]
    else:
        verb = ["run"]
    return shlex.join(["torchpace", *verb, "--config", str(toml_path), *command[1:]])


def _speed_of_light(result: TuneResult, out: Console) -> dict | None:
    """Each rung as a fraction of the peak, on screen and in the report: measured during
    the tune (session.py), never here: writing the outputs measures nothing."""
    from torchpace.report.roofline import tune_lines

    for line in tune_lines(result.speed_of_light):
        out.print(line, highlight=False, markup=False)
    return result.speed_of_light


def _comments(result: TuneResult) -> list[str]:
    lines = [f"{len(result.trials)} trials in {result.wall_s:.0f} s"]
    if result.best and "speedup" in result.figures:
        # without the final check (a time budget that ended first) the figure is the rungs'
        # own gains chained, not a pairing of the whole configuration with the script
        how = (f"paired with it ({final_pairs_text(result)})" if result.final_gains_pct
               else "its rungs' gains chained; the final check did not run")  # fmt: skip
        lines.append(f"{result.figures['speedup']:.2f}x the script as written, {how}")
    numerics = [k for k in result.best if any(o.knob == k and o.changes_numerics
                                               for o in result.knobs)]  # fmt: skip
    if numerics:
        lines.append(f"can change numerics (loss checked within tolerance): {', '.join(numerics)}")
    if result.stopped:
        limit = result.stopped_by or result.stopped
        lines.append(f"tune stopped early ({limit}): the rest was not tried")
    return lines


def _measured(result: TuneResult) -> dict:
    """The toml's [measured]: the figures the ladder and the report show, not recomputed."""
    return dict(result.figures)


def _diff(result: TuneResult, run_dir: Path, write: bool, out: Console, settings, facts) -> None:
    from torchpace.atomic import write_text_atomic
    from torchpace.knobs import get
    from torchpace.tune.diff import DiffWriteError, source_diff, write_diff

    edits = {name: get(name).source_edits(value) for name, value in result.best.items()}
    script = None if settings.is_module else settings.target
    diff = source_diff(edits, Path.cwd(), default_file=script, facts=facts)
    text = diff.text
    write_text_atomic(run_dir / run_files.TUNE_DIFF, text)
    if text:
        out.print("\nthe same changes in your source (torchpace run applies them without it):")
        out.print(text, highlight=False, markup=False)
    for note in diff.notes:
        out.print(f"  note: {note}", highlight=False, markup=False)
    for problem in diff.problems:
        out.print(f"  not in the diff: {problem.knob}: {problem.reason}", highlight=False)
    if write and text:
        try:
            written = write_diff(diff)
        except DiffWriteError as e:
            say(f"the diff was not written: {e}")
            return
        out.print(f"written: {', '.join(str(p) for p in written)}")
    elif text:
        out.print(
            f"[dim]not written: rerun with --write to apply it ({run_dir / run_files.TUNE_DIFF})[/]"
        )
