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
    folder. ``facts``: the doctor's capture of the script (where its loaders and model are)."""
    from torchpace.env.facts import collect
    from torchpace.knobs import fingerprint
    from torchpace.knobs.config import TuneConfig, write_config

    command = python_command(settings.target, settings.is_module, settings.args)
    out = report_console()
    render(result, out)
    report = to_dict(result, command, collect().to_dict(), settings)
    report["speed_of_light"] = _speed_of_light(result, out)
    write_report(report, run_dir / REPORT_NAME)
    if options.json is not None:
        write_report(report, options.json)
    _write_html(report, run_dir, options.html)
    if result.stopped == "fidelity":
        say(
            "stopped before any knob: the trials would not time what the script does "
            f"(above); every run is in {run_dir / 'fidelity'}"
        )
        return EXIT_FAILURE
    if result.stopped == "baseline-failed":
        failed = result.trials[0]  # the baseline is always the first trial
        error = (failed.error or "").strip()[-800:]
        say(
            f"the unmodified script failed in its baseline trial ({failed.outcome}): {error}\n"
            f"nothing to tune; the trial's folder is {failed.out_dir}"
        )
        return 1
    toml_path = run_dir / run_files.TUNE_CONFIG
    config = TuneConfig(
        knobs=dict(result.best),
        fingerprint=fingerprint.current(),
        measured=_measured(result),
        script=shlex.join(command[1:]),
    )
    write_config(toml_path, config, _comments(result))
    _diff(result, run_dir, options.write, out, settings, facts)
    run_line = apply_command(result.best, settings, toml_path, command)
    if result.best:
        out.print(f"\nconfiguration: {toml_path}\napply it with no code change:  {run_line}")
    else:
        out.print(
            f"\n{nothing_kept_text(result)}; {toml_path} holds the empty configuration "
            "(the script as it is)"
        )
    out.print(f"every trial: {run_dir / REPORT_NAME}")
    out.print(f"the script's output in each trial: {run_dir / 'trials' / '<NN>' / OUTPUT_NAME}")
    if result.stopped == "files":  # a write refused (capture/file_guard.py): not finished
        return EXIT_FAILURE
    return EXIT_INTERRUPTED if result.stopped == "interrupted" else EXIT_OK


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


def _write_html(report: dict, run_dir: Path, html_path: Path | None) -> None:
    """report.html in the run folder (and at --html PATH): the ladder as a chart."""
    from torchpace.report.html import REPORT_NAME as HTML_NAME
    from torchpace.report.html import tune_html, write_pages

    paths = [("the run folder's", run_dir / HTML_NAME), ("--html", html_path)]
    write_pages(lambda: tune_html(report), paths, say)


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
        lines.append(
            f"{result.figures['speedup']:.2f}x the script as written, paired with it "
            f"({final_pairs_text(result)})"
        )
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
