"""The two ways the doctor runs: analyse an existing trace, or profile a script (through
``torchpace.capture``) and analyse what it captured. Both end in the same report."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from torchpace import run_files
from torchpace.capture.outcome import run_outcome
from torchpace.capture.profiler_log import LogSummary, summarize
from torchpace.capture.target import TargetProblem, start_run
from torchpace.doctor.analyze import Diagnosis, diagnose, with_speed_of_light
from torchpace.doctor.finding import fail_on_matcher
from torchpace.doctor.remeasure import REMEASURED_DIR, needs_remeasure, remeasured
from torchpace.doctor.result import diagnosis_to_dict, env_summary
from torchpace.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from torchpace.facts.run import FACTS_NAME, RunFacts
from torchpace.output_paths import write_output
from torchpace.report.doctor_json import write_json
from torchpace.report.doctor_terminal import render
from torchpace.report.progress import ProgressDisplay
from torchpace.trace import TraceError, load_trace

REPORT_NAME = run_files.DOCTOR_REPORT


def say(message: str) -> None:
    print(f"torchpace doctor: {message}", file=sys.stderr)


def analyse_trace(args: argparse.Namespace) -> int:
    if Path(args.trace).is_dir():
        return analyse_rank_traces(args)
    try:
        model = load_trace(args.trace)
    except TraceError as e:
        say(str(e))
        return EXIT_USAGE
    out_dir = _trace_run_folder(args)
    if out_dir is False:
        return EXIT_USAGE
    facts_path = Path(args.trace).parent / FACTS_NAME
    facts = _load_facts(facts_path) if facts_path.is_file() else None
    diagnosis = with_speed_of_light(diagnose(model, facts))
    return _report(diagnosis, args, command=None, out_dir=out_dir or None)


def _trace_run_folder(args: argparse.Namespace) -> Path | bool | None:
    """``--trace ... --out DIR``: the run folder the report goes to, as a live run's does
    (doctor_report.json, report.html; the trace stays where it is, named in the report);
    None without --out; False when DIR cannot be used (said)."""
    if getattr(args, "out", None) is None:
        return None
    from torchpace.capture.run_folder import RunFolderError, new_run_folder

    try:
        return new_run_folder(args.out, who="the doctor")
    except RunFolderError as e:
        say(str(e))
        return False


def analyse_rank_traces(args: argparse.Namespace) -> int:
    """``--trace DIR``: one trace per rank. The lowest rank gets the full report, then the
    cross-rank view (doctor/ranks.py) of all of them, also under "cross_rank" in --json."""
    from torchpace.doctor.finding import rank
    from torchpace.doctor.ranks import (
        cross_rank,
        cross_rank_findings,
        rank_figures,
        rank_number,
        rank_trace_files,
        rank_wait_of,
    )
    from torchpace.report.ranks_terminal import render_cross_rank

    files = rank_trace_files(Path(args.trace))
    if not files:
        say(f"{args.trace} holds no trace (.json/.json.gz); give a folder of per-rank traces")
        return EXIT_USAGE
    models, figures = [], []
    for index, path in enumerate(files):
        try:
            model = load_trace(path)
        except TraceError as e:
            say(f"{path} skipped: {e}")
            continue
        models.append(model)
        figures.append(rank_figures(model, rank_number(path, index)))
    if not models:
        say(f"no trace in {args.trace} could be read")
        return EXIT_USAGE
    out_dir = _trace_run_folder(args)
    if out_dir is False:
        return EXIT_USAGE
    view = cross_rank(figures)
    facts_path = models[0].path.parent / FACTS_NAME if models[0].path else None
    facts = _load_facts(facts_path) if facts_path and facts_path.is_file() else None
    wait = rank_wait_of(view, figures[0].rank)
    diagnosis = with_speed_of_light(diagnose(models[0], facts, wait))
    job = cross_rank_findings(view)
    # the job's TP506 names the most communication-bound rank: it replaces the lowest rank's
    job_codes = {f.code for f in job}
    diagnosis.findings = rank([*(f for f in diagnosis.findings if f.code not in job_codes), *job])
    cross = view.to_dict()
    code = _report(diagnosis, args, None, out_dir or None, extra={"cross_rank": cross})
    render_cross_rank(cross)
    return code


def profile_script(args: argparse.Namespace) -> int:
    start = start_run(args, who="the doctor")
    if isinstance(start, TargetProblem):
        say(start.message)
        return start.exit_code
    out_dir = start.out_dir
    try:
        from torchpace.capture.runner import CaptureSpec
    except ImportError as e:  # a partial install: say so instead of a traceback
        say(f"the capture module is missing from this install ({e}); reinstall torchpace")
        return EXIT_FAILURE

    spec = CaptureSpec(
        target=start.target,
        args=start.script_args,
        out_dir=out_dir,
        is_module=start.is_module,
        warmup=args.warmup,
        steps=args.steps,
        measure_s=args.measure,
        step_on=args.step_on,
        continue_after=args.continue_after,
        timeout_s=args.timeout,
        with_stack=args.stacks,
        # the doctor runs the script as the user would: its writes stay, and are listed
        file_guard="report",
    )
    from torchpace.capture.signals import interrupted_status, terminate_as_interrupt

    # SIGTERM as Ctrl-C: the child's process group stopped, the partial report written
    with terminate_as_interrupt() as received:
        code = _profile(spec, args, start, out_dir)
    return interrupted_status(received, code) if code == EXIT_INTERRUPTED else code


def _profile(spec, args: argparse.Namespace, start, out_dir: Path) -> int:
    from torchpace.capture.files_report import files_lines
    from torchpace.capture.runner import capture_script

    progress = ProgressDisplay("doctor", quiet=args.quiet)
    try:
        result, diagnosis = _capture_and_diagnose(spec, progress, capture_script)
        touched = result.files
        if needs_remeasure(diagnosis):
            # another process slowed the window: measure once more, in a folder of its own
            # (the first run's files stay where they are), and report the later run
            say(f"the profiled window was disturbed ({diagnosis.window_check.reasons[0]}); "
                f"running the script once more into {out_dir / REMEASURED_DIR}")  # fmt: skip
            again = dataclasses.replace(spec, out_dir=out_dir / REMEASURED_DIR)
            again.out_dir.mkdir()
            result, diagnosis = remeasured(
                diagnosis, *_capture_and_diagnose(again, progress, capture_script)
            )
            touched.merge(result.files)  # both runs wrote the user's folder
    except KeyboardInterrupt:
        progress.stop()
        say(f"interrupted (Ctrl-C or SIGTERM); whatever was captured is in {out_dir}")
        return EXIT_INTERRUPTED
    facts = result.facts
    diagnosis = with_speed_of_light(diagnosis)
    progress.stop()
    command = spec.command
    profiler_log = summarize(out_dir)
    files = {"files": touched.to_dict()}
    code = _report(diagnosis, args, command, out_dir, extra=files, profiler_log=profiler_log,
                   env=env_summary())  # fmt: skip
    if touched.any or touched.note:  # a script that writes nothing: nothing to say
        for line in files_lines(touched):
            say(line)
    if profiler_log is not None and profiler_log.errors:
        n = len(profiler_log.errors)
        say(
            f"the profiler logged {n} error line{'s' if n > 1 else ''} in the window, kept "
            f"with its other lines in {profiler_log.path}; the first: {profiler_log.errors[0]}"
        )
    if result.interrupted:  # it completed first: the report stands, the exit says so
        code = EXIT_INTERRUPTED
    outcome = run_outcome("doctor", facts, result.returncode, start.target, code)
    if outcome.message:
        print(outcome.message, file=sys.stderr)
    return outcome.exit_code


def _capture_and_diagnose(spec, progress: ProgressDisplay, capture_script):
    """One capture of the script and its diagnosis."""
    result = capture_script(spec, on_progress=progress.capture)
    progress.show("analysing the trace", "analyse")
    model = None
    if result.trace_path is not None and Path(result.trace_path).is_file():
        try:
            model = load_trace(result.trace_path)
        except TraceError as e:
            say(f"the captured trace could not be read ({e}); reporting the run facts only")
    return result, diagnose(model, result.facts)


def _write_html(report: dict, out_dir: Path | None, html_path: Path | None) -> None:
    """report.html in the run folder, and at --html PATH; without plotly, one line that says
    how to get it (the other outputs are written as usual)."""
    from torchpace.report.html import REPORT_NAME, HtmlUnavailable, doctor_html, write_html

    paths = [(flag, p) for flag, p in (("the run folder's", out_dir / REPORT_NAME if out_dir
             else None), ("--html", html_path)) if p]  # fmt: skip
    if not paths:
        return
    try:
        text = doctor_html(report)
    except HtmlUnavailable as e:
        say(f"no {REPORT_NAME}: {e}")
        return
    for flag, path in paths:
        write_output(flag, path, lambda p: write_html(text, p), say)


def _load_facts(path: Path) -> RunFacts | None:
    try:
        return RunFacts.load(path)
    except (OSError, ValueError, TypeError, KeyError) as e:
        say(f"{path} could not be read as run facts ({e}); analysing the trace alone")
        return None


def _report(
    d: Diagnosis,
    args,
    command,
    out_dir: Path | None = None,
    extra=None,
    profiler_log: LogSummary | None = None,
    env: dict | None = None,
) -> int:
    """``env``: this environment's versions, only for a script that ran in it (not a trace)."""
    report = diagnosis_to_dict(d, command, env)
    report.update(extra or {})
    report["profiler_log"] = profiler_log.to_dict() if profiler_log is not None else None
    if d.profile.steps or d.findings:
        render(report)
    if out_dir is not None:
        write_output(
            "the run folder's", out_dir / REPORT_NAME, lambda p: write_json(report, p), say
        )
    if args.json is not None:
        write_output("--json", args.json, lambda p: write_json(report, p), say)
    _write_html(report, out_dir, args.html)
    matcher = fail_on_matcher(args.fail_on) if args.fail_on else None
    if matcher and any(matcher(f) for f in d.findings):
        return EXIT_FAILURE
    return EXIT_OK
