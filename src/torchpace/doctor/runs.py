"""The two ways the doctor runs: analyse an existing trace, or profile a script (through
``torchpace.capture``) and analyse what it captured. Both end in the same report."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from torchpace import run_files
from torchpace.capture.outcome import run_outcome
from torchpace.capture.profiler_log import summarize
from torchpace.capture.target import TargetProblem, start_run
from torchpace.doctor.analyze import Diagnosis, diagnose, with_speed_of_light
from torchpace.doctor.finding import fail_on_matcher
from torchpace.doctor.options import DoctorOptions
from torchpace.doctor.remeasure import REMEASURED_DIR, needs_remeasure, remeasured
from torchpace.doctor.result import build_report, env_summary
from torchpace.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from torchpace.facts.run import FACTS_NAME, RunFacts
from torchpace.output_paths import write_output
from torchpace.printable import printable
from torchpace.report.doctor_json import write_report
from torchpace.report.doctor_terminal import render
from torchpace.report.model import CrossRank, DoctorReport, Env, FilesReport, ProfilerLog
from torchpace.report.progress import ProgressDisplay
from torchpace.trace import TraceError, load_trace

REPORT_NAME = run_files.DOCTOR_REPORT


def say(message: str) -> None:
    print(f"torchpace doctor: {printable(message, lines=True)}", file=sys.stderr)


def analyse_trace(options: DoctorOptions) -> int:
    if Path(options.trace).is_dir():
        return analyse_rank_traces(options)
    try:
        model = load_trace(options.trace)
    except TraceError as e:
        say(str(e))
        return EXIT_USAGE
    out_dir = _trace_run_folder(options)
    if out_dir is False:
        return EXIT_USAGE
    facts_path = Path(options.trace).parent / FACTS_NAME
    facts = _load_facts(facts_path) if facts_path.is_file() else None
    diagnosis = with_speed_of_light(diagnose(model, facts))
    return _report(diagnosis, options, command=None, out_dir=out_dir or None)


def _trace_run_folder(options: DoctorOptions) -> Path | bool | None:
    """``--trace ... --out DIR``: the run folder the report goes to, as a live run's does
    (doctor_report.json, report.html; the trace stays where it is, named in the report);
    None without --out; False when DIR cannot be used (said)."""
    if options.out is None:
        return None
    from torchpace.capture.run_folder import RunFolderError, new_run_folder

    try:
        return new_run_folder(options.out, who="the doctor")
    except RunFolderError as e:
        say(str(e))
        return False


def analyse_rank_traces(options: DoctorOptions) -> int:
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
    from torchpace.doctor.skew import collective_skew, rank_collectives
    from torchpace.report.ranks_terminal import render_cross_rank
    from torchpace.trace.steps import derive_steps

    files = rank_trace_files(Path(options.trace))
    if not files:
        say(f"{options.trace} holds no trace (.json/.json.gz); give a folder of per-rank traces")
        return EXIT_USAGE
    # one trace in memory at a time: each rank's is reduced to its figures and collectives,
    # then dropped, but the lowest rank's, which gets the full diagnosis
    first, figures, collectives = None, [], []
    for index, path in enumerate(files):
        try:
            model = load_trace(path)
        except TraceError as e:
            say(f"{path} skipped: {e}")
            continue
        if first is None:
            first = model
        number = rank_number(path, index)
        figures.append(rank_figures(model, number))
        collectives.append(rank_collectives(model.with_steps(derive_steps(model)), number))
        del model
    if first is None:
        say(f"no trace in {options.trace} could be read")
        return EXIT_USAGE
    out_dir = _trace_run_folder(options)
    if out_dir is False:
        return EXIT_USAGE
    view = cross_rank(figures, collective_skew(collectives))
    facts_path = first.path.parent / FACTS_NAME if first.path else None
    facts = _load_facts(facts_path) if facts_path and facts_path.is_file() else None
    wait = rank_wait_of(view, figures[0].rank)
    diagnosis = with_speed_of_light(diagnose(first, facts, wait))
    job = cross_rank_findings(view)
    # the job's TP506 names the most communication-bound rank: it replaces the lowest rank's
    job_codes = {f.code for f in job}
    diagnosis.findings = rank([*(f for f in diagnosis.findings if f.code not in job_codes), *job])
    code = _report(diagnosis, options, None, out_dir or None, cross_rank=view)
    render_cross_rank(view)
    return code


def profile_script(options: DoctorOptions) -> int:
    start = start_run(
        options.target, options.is_module, list(options.script_args), options.out, "the doctor"
    )
    if isinstance(start, TargetProblem):
        say(start.message)
        return start.exit_code
    out_dir = start.out_dir
    try:
        from torchpace.doctor.examine import examine
    except ImportError as e:  # a partial install: say so instead of a traceback
        say(f"the capture module is missing from this install ({e}); reinstall torchpace")
        return EXIT_FAILURE

    spec = start.capture_spec(
        warmup=options.warmup,
        steps=options.steps,
        measure_s=options.measure_s,
        step_on=options.step_on,
        continue_after=options.continue_after,
        timeout_s=options.timeout_s,
        with_stack=options.with_stack,
        # the doctor runs the script as the user would: its writes stay, and are listed
        file_guard="report",
    )
    from torchpace.capture.signals import interrupted_status, terminate_as_interrupt

    # SIGTERM as Ctrl-C: the child's process group stopped, the partial report written
    with terminate_as_interrupt() as received:
        code = _profile(examine, spec, options, start, out_dir)
    return interrupted_status(received, code) if code == EXIT_INTERRUPTED else code


def _profile(examine, spec, options: DoctorOptions, start, out_dir: Path) -> int:
    from torchpace.capture.files_report import files_lines

    progress = ProgressDisplay("doctor", quiet=options.quiet)
    try:
        seen = _examine(examine, spec, progress)
        touched = seen.captured.files
        if needs_remeasure(seen.diagnosis):
            # another process slowed the window: measure once more, in a folder of its own
            # (the first run's files stay where they are), and report the later run
            first = seen.diagnosis
            say(f"the profiled window was disturbed ({first.window_check.reasons[0]}); "
                f"running the script once more into {out_dir / REMEASURED_DIR}")  # fmt: skip
            again = dataclasses.replace(spec, out_dir=out_dir / REMEASURED_DIR)
            again.out_dir.mkdir()
            seen = _examine(examine, again, progress)
            _, second = remeasured(first, seen.captured, seen.diagnosis)
            seen = dataclasses.replace(seen, diagnosis=second)
            touched.merge(seen.captured.files)  # both runs wrote the user's folder
    except KeyboardInterrupt:
        progress.stop()
        say(f"interrupted (Ctrl-C or SIGTERM); whatever was captured is in {out_dir}")
        return EXIT_INTERRUPTED
    seen = dataclasses.replace(seen, diagnosis=with_speed_of_light(seen.diagnosis))
    progress.stop()
    profiler_log = summarize(out_dir)
    logged = None
    if profiler_log is not None:
        logged = ProfilerLog(str(profiler_log.path), profiler_log.lines, tuple(profiler_log.errors))
    code = _report(
        seen.diagnosis, options, spec.command, out_dir, profiler_log=logged, env=env_summary(),
        files=FilesReport.from_dict(touched.to_dict()),
    )  # fmt: skip
    if touched.any or touched.note:  # a script that writes nothing: nothing to say
        for line in files_lines(touched):
            say(line)
    if profiler_log is not None and profiler_log.errors:
        n = len(profiler_log.errors)
        say(
            f"the profiler logged {n} error line{'s' if n > 1 else ''} in the window, kept "
            f"with its other lines in {profiler_log.path}; the first: {profiler_log.errors[0]}"
        )
    if seen.captured.interrupted:  # it completed first: the report stands, the exit says so
        code = EXIT_INTERRUPTED
    outcome = run_outcome("doctor", seen.facts, seen.captured.returncode, start.target, code)
    if outcome.message:
        print(outcome.message, file=sys.stderr)
    return outcome.exit_code


def _examine(examine, spec, progress: ProgressDisplay):
    """One capture of the script and its diagnosis (doctor/examine.examine)."""
    seen = examine(
        spec,
        on_progress=progress.capture,
        on_captured=lambda: progress.show("analysing the trace", "analyse"),
    )
    if seen.trace_problem:
        say(
            f"the captured trace could not be read ({seen.trace_problem}); reporting the run "
            "facts only"
        )
    return seen


def _write_html(report: DoctorReport, out_dir: Path | None, html_path: Path | None) -> None:
    """report.html in the run folder, and at --html PATH (report/html.write_pages)."""
    from torchpace.report.html import REPORT_NAME as HTML_NAME
    from torchpace.report.html import doctor_html, write_pages

    paths = [("the run folder's", out_dir / HTML_NAME if out_dir else None), ("--html", html_path)]
    write_pages(lambda: doctor_html(report), paths, say)


def _load_facts(path: Path) -> RunFacts | None:
    try:
        return RunFacts.load(path)
    except (OSError, ValueError, TypeError, KeyError) as e:
        say(f"{path} could not be read as run facts ({e}); analysing the trace alone")
        return None


def _report(
    d: Diagnosis,
    options: DoctorOptions,
    command,
    out_dir: Path | None = None,
    cross_rank: CrossRank | None = None,
    profiler_log: ProfilerLog | None = None,
    env: Env | None = None,
    files: FilesReport | None = None,
) -> int:
    """``env``: this environment's versions, only for a script that ran in it (not a trace);
    ``files``: what the script wrote (capture/files_report.py), for a script that ran."""
    report = build_report(
        d, command, env, cross_rank=cross_rank, profiler_log=profiler_log, files=files
    )
    if d.profile.steps or d.findings:
        render(report)
    if out_dir is not None:
        write_output(
            "the run folder's", out_dir / REPORT_NAME, lambda p: write_report(report, p), say
        )
    if options.json is not None:
        write_output("--json", options.json, lambda p: write_report(report, p), say)
    _write_html(report, out_dir, options.html)
    matcher = fail_on_matcher(options.fail_on) if options.fail_on else None
    if matcher and any(matcher(f) for f in d.findings):
        return EXIT_FAILURE
    return EXIT_OK
