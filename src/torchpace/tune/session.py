"""One `torchpace tune` from start to end: check the target, make the run folder, take the
doctor's diagnosis (or reuse one), search, then write everything the user gets.

Run folder (torchpace-runs/<timestamp>/):
  doctor/              the doctor's capture: trace.json.gz, run_facts.json, doctor_report.json
  trials/NN/           one folder per trial (run_facts.json: every step, the losses)
  tune_report.json     every trial, every knob's verdict, the ladder
  torchpace.toml       the chosen configuration and the environment it was measured on
  changes.diff         the source edits that make the configuration permanent
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torchpace import run_files
from torchpace.capture.file_restore import FilesTouched
from torchpace.capture.signals import interrupt_name
from torchpace.exit_codes import EXIT_INTERRUPTED
from torchpace.facts.run import FACTS_NAME, RunFacts, Status
from torchpace.tune.options import DEFAULT_STEPS, DEFAULT_TIME_BUDGET_S, DEFAULT_TRIALS
from torchpace.tune.progress import say

if TYPE_CHECKING:
    from torchpace.capture.target import RunStart
    from torchpace.report.progress import ProgressDisplay
    from torchpace.tune.options import TuneOptions


def tune_script(options: TuneOptions, display: ProgressDisplay) -> int:
    """``display``: the verb's progress on stderr (tune/command.py makes it): a spinner on a
    terminal, plain lines in a log, nothing with --quiet (errors still go out through
    say())."""
    from torchpace.capture.target import TargetProblem, start_run

    started = time.perf_counter()  # --time-budget counts from here: the doctor's run included
    first_line = _end_line(options)  # derived before anything goes down
    start = start_run(
        options.target, options.is_module, list(options.script_args), options.out,
        "torchpace tune",
    )  # fmt: skip
    if isinstance(start, TargetProblem):
        say(start.message)
        return start.exit_code
    from torchpace.capture.signals import interrupted_status, terminate_as_interrupt

    display.line(first_line)
    # SIGTERM as Ctrl-C: the trial's process group stopped, the partial report written
    with terminate_as_interrupt() as received:
        try:
            code = _tune(options, start, display, started)
        finally:
            display.stop()
    return interrupted_status(received, code) if code == EXIT_INTERRUPTED else code


def _tune(options: TuneOptions, start: RunStart, display: ProgressDisplay, started: float) -> int:
    """The doctor's phase, then the search. The data goes one way: what the lower layers need
    is derived from the options first (plain values), and the progress lines go out in
    groups, between the calls down, never interleaved with them (docs/ARCHITECTURE.md)."""
    run_dir = start.out_dir
    touched = FilesTouched()
    doctor = _doctor_phase(options)
    budget = _budget(options)
    try:
        facts, codes, headroom, findings = _diagnosis(doctor, start, display, touched)
    except KeyboardInterrupt:
        display.stop()
        say(f"interrupted in the doctor's phase; nothing was tuned; its folder: {run_dir}")
        return EXIT_INTERRUPTED
    if facts is None:
        return 1
    estimate = _estimate_line(options, facts, started)
    from torchpace.tune.context import build_context
    from torchpace.tune.progress import TrialProgress
    from torchpace.tune.search import Tuner
    from torchpace.tune.trial import TrialSettings

    ctx = build_context(
        facts, codes, try_all=options.try_all, allow_batch_size=options.allow_batch_size,
        batch_headroom=headroom, nproc_per_node=options.nproc_per_node,
    )  # fmt: skip
    settings = TrialSettings(
        target=start.target,
        args=start.script_args,
        is_module=start.is_module,
        warmup=options.warmup,
        steps=options.steps or DEFAULT_STEPS,
        step_on=options.step_on,
        seed=options.seed,
        timeout_s=options.trial_timeout or _default_timeout(facts, options),
        run_root=str(run_dir),
        nproc_per_node=options.nproc_per_node,
    )
    only = list(options.knobs) if options.knobs else None
    tuner = Tuner(
        settings, ctx, run_dir, TrialProgress(display),
        budget, options.loss_tolerance, only,
        started=started, calibrate=options.steps is None, job_steps=options.job_steps,
        fidelity_limit=_fidelity_limit(options, settings), note=display.line,
    )  # fmt: skip
    for line in (*findings, estimate):  # the doctor's findings, then the estimate
        display.line(line)
    # every stop (a limit, Ctrl-C during a trial or between trials) ends in the tuner's one
    # stop path: run() returns the result whatever stopped it
    result = tuner.run(files_before=touched)  # the doctor's run wrote (and undid) these too
    if result.stopped == "fidelity":
        display.stop()
        say(tuner.fidelity_failure())
    elif result.best and settings.nproc_per_node == 1 and result.stopped != "interrupted":
        try:
            result.run_check = _run_check(result, settings, run_dir, display, tuner)
        except KeyboardInterrupt:  # the tune's result stands without it
            result.stopped, result.stopped_by = "interrupted", interrupt_name()
    result.speed_of_light = _speed_of_light(facts, result)
    from torchpace.tune.output import write_outputs

    display.stop()  # the report goes to stdout: no spinner left on the terminal above it
    return write_outputs(result, options, settings, run_dir, facts)


def _time_budget_s(options: TuneOptions) -> float:
    """The whole command's time: --time-budget, else the default end."""
    return options.time_budget or DEFAULT_TIME_BUDGET_S


def _budget(options: TuneOptions):
    from torchpace.tune.search import Budget

    default = options.time_budget is None
    trials = default and options.budget == DEFAULT_TRIALS  # (a --budget 60 says the same)
    return Budget(
        options.budget, _time_budget_s(options), default_seconds=default, default_trials=trials
    )


def _doctor_phase(options: TuneOptions) -> DoctorPhase:
    return DoctorPhase(
        from_run=options.from_run, warmup=options.warmup, step_on=options.step_on,
        seed=options.seed, timeout_s=_doctor_timeout(options), nproc=options.nproc_per_node,
    )  # fmt: skip


def _end_line(options: TuneOptions) -> str:
    """tune's first line: when it ends at the latest (its estimate, in trials, follows the
    doctor's run: `_estimate_line`)."""
    seconds = _time_budget_s(options)
    how = "--time-budget" if options.time_budget else "the default; --time-budget S to change it"
    return f"tune ends within {seconds / 60:.3g} min ({how}), at most {options.budget} trials"


def _estimate_line(options: TuneOptions, facts: RunFacts, started: float) -> str:
    """The estimate once the doctor has timed the script: a trial's seconds (its start-up,
    warm-up and timed steps at the doctor's step time) and how many fit in what is left."""
    steps = [s.wall_ms for s in facts.steps]
    per_step_s = (statistics.median(steps) if steps else 1000.0) / 1000
    timed = per_step_s * (options.steps or DEFAULT_STEPS)  # the fewest a calibration keeps
    trial_s = (facts.startup_s or 0.0) + per_step_s * options.warmup + timed
    left = _time_budget_s(options) - (time.perf_counter() - started)
    fit = min(options.budget, int(max(left, 0) / max(trial_s, 0.1)))
    return (
        f"estimate: ~{trial_s:.0f} s a trial (the doctor's run): about {fit} trials in the "
        f"{max(left, 0):.0f} s left; tune ends by {_time_budget_s(options):.0f} s"
    )


def _doctor_timeout(options: TuneOptions) -> float:
    """The doctor's phase ends too: within --trial-timeout and the time budget
    (--time-budget or the default end), the smaller."""
    given = [t for t in (options.trial_timeout, _time_budget_s(options)) if t]
    return min(given)


def _run_check(result, settings, run_dir: Path, display: ProgressDisplay, tuner) -> dict:
    """The kept configuration as `torchpace run` runs it, against the script as it is,
    alternated (tune/run_check.py): beside the trials' figure, never instead of it. One
    process only (a job's ranks go through `torchpace launch`); not when a limit stopped
    the search, nor when what --time-budget leaves would not hold its runs (a search that
    ended at 280 s of 300 would end the tune at 340)."""
    from torchpace.tune.run_check import PAIRS, RunCheck, check_under_run

    short = tuner.time_short_for(2 * PAIRS, result.best)
    if result.stopped or short:
        limit = result.stopped_by or result.stopped
        skipped = RunCheck(trials_speedup=result.final_speedup, skipped=short or f"{limit} ran out")
        display.line(f"  {skipped.line()}")
        return skipped.to_dict()

    display.line("[bold]as `run` runs it[/]: the script as it is vs the kept configuration")

    def told(side: str, ms: float | None) -> None:
        timing = "failed" if ms is None else f"{ms:8.2f} ms/step"
        what = "plain script (one step hook)" if side == "plain" else "with the kept knobs"
        display.line(f"  {what:<42} {timing}")

    check = check_under_run(
        settings, result.best, run_dir / "run_check", result.final_speedup, told
    )
    display.line(f"  {check.line()}")
    return check.to_dict()


def _speed_of_light(facts: RunFacts, result) -> dict | None:
    """Each rung as a fraction of the device's peak (tune/speed_of_light.py): the peak is
    measured here (or read from its cache), during the tune, so that writing the outputs
    measures nothing. A peak that cannot be measured leaves it out; it never fails the
    tune."""
    from torchpace.tune.speed_of_light import ladder_speed_of_light

    try:
        return ladder_speed_of_light(facts, result)
    except (RuntimeError, OSError, ImportError) as e:
        say(f"no speed of light for the ladder: the peak could not be measured ({e})")
    except KeyboardInterrupt:  # the tune's result stands without it
        result.stopped, result.stopped_by = result.stopped or "interrupted", interrupt_name()
    return None


def _fidelity_limit(options: TuneOptions, settings) -> float | None:
    """The fidelity check's limit (tune/fidelity.py; its pairs are the baseline's repeats);
    None with --fidelity-limit 0, and for a job of several processes (its trials go through
    `torchpace launch`; the plain reference is one process)."""
    if not options.fidelity_limit or settings.nproc_per_node > 1:
        return None
    return options.fidelity_limit


def _default_timeout(facts: RunFacts, options: TuneOptions) -> float:
    """10x what the doctor's run took per step over a trial's steps, plus start-up (the
    calibrated steps at most MAX_TIMED_S of them)."""
    from torchpace.tune.baseline import MAX_TIMED_S

    steps = [s.wall_ms for s in facts.steps]
    per_step_s = (max(steps) if steps else 1000.0) / 1000
    startup = facts.startup_s or 10.0
    timed = per_step_s * options.steps if options.steps else MAX_TIMED_S + per_step_s * 10
    return round(10 * (startup + per_step_s * options.warmup + timed) + 120, 1)


@dataclass(frozen=True)
class DoctorPhase:
    """What the doctor's phase takes from the options (derived once in `_tune`)."""

    from_run: Path | None
    warmup: int
    step_on: str
    seed: int
    timeout_s: float
    nproc: int


def _diagnosis(
    doctor: DoctorPhase, start: RunStart, display: ProgressDisplay, touched: FilesTouched
):
    """The doctor's capture of the unmodified script (or the one in --from-run), the codes of
    its findings (they decide which knobs apply and which go first) and its batch headroom
    estimate (the batch-size finder checks it), read from the doctor's report. One way down:
    the run facts and the trace first (captured, or read from --from-run), then their
    diagnosis (doctor/examine.diagnose_capture), then the report built and written."""
    from torchpace.doctor.examine import diagnose_capture
    from torchpace.doctor.result import build_report, env_summary
    from torchpace.report.doctor_json import write_report

    # plain values first, then the phase's lines as one group, then the calls down
    doctor_dir = None if doctor.from_run is not None else start.out_dir / "doctor"
    lines = _phase_lines(doctor, doctor_dir)
    spec = None if doctor_dir is None else start.capture_spec(
        out_dir=doctor_dir, warmup=doctor.warmup, steps=5, step_on=doctor.step_on,
        seed=doctor.seed,
        measure_s=0.0,  # tune times its own baseline: the floor of steps is enough here
        timeout_s=doctor.timeout_s,
        # every trial starts from the folder the doctor's run started from
        file_guard="restore", guard_root=str(start.out_dir),
    )  # fmt: skip
    for line in lines:
        display.line(line)
    if doctor.from_run is None:
        from torchpace.capture.job import capture_job

        doctor_dir.mkdir()
        # the script's own output goes to the run folder, never between tune's lines
        output = doctor_dir / run_files.SCRIPT_OUTPUT
        captured = capture_job(spec, doctor.nproc, on_progress=display.capture, output=output)
        facts, trace_path, files = captured.facts, captured.trace_path, captured.files
        if facts.status == Status.INTERRUPTED:
            raise KeyboardInterrupt
        if not facts.window:
            say(
                f"the doctor could not measure a step of {start.target} ({facts.status}: "
                f"{facts.error or 'no step'}); fix that first (`torchpace doctor` says more)"
            )
            return None, [], None, []
        command, env = spec.command, env_summary()
    else:
        facts = RunFacts.load(doctor.from_run / FACTS_NAME)
        trace_path = doctor.from_run / run_files.TRACE
        command, env, files = facts.command, None, None
    diagnosis, problem = diagnose_capture(facts, trace_path)
    if problem:
        say(f"the doctor's trace could not be read ({problem}); planning from the run facts")
    report = build_report(diagnosis, command, env)
    if doctor_dir is not None:
        write_report(report, doctor_dir / run_files.DOCTOR_REPORT)
    codes = [f.code for f in report.findings]  # in the doctor's rank order: the first first
    if files is not None:  # the doctor's run wrote (and undid) these: the search reports them
        touched.merge(files)
    return facts, codes, report.memory.batch_headroom, _finding_lines(report.findings)


def _phase_lines(doctor: DoctorPhase, doctor_dir: Path | None) -> list[str]:
    """The doctor's phase, as the progress display says it before it starts."""
    if doctor_dir is None:
        return [f"[dim]reusing the doctor's capture in {doctor.from_run}[/]"]
    script_output = doctor_dir / run_files.SCRIPT_OUTPUT
    lines = [
        "[bold]1/2[/] the doctor: profiling a few steps of the unmodified script",
        f"[dim]the script's output: {script_output} (and trials/NN/ for each trial)[/]",
    ]
    if doctor.nproc > 1:
        lines.append(f"  the whole job on {doctor.nproc} local ranks (torchpace launch)")
    return lines


def _finding_lines(findings) -> list[str]:
    """The doctor's first five findings, for the progress display (shown with the estimate)."""
    lines = []
    for f in findings[:5]:
        saving = "" if f.saving_ms is None else f", ~{f.saving_ms:.1f} ms/step"
        knob = f" -> knob {f.knob}" if f.knob else ""
        lines.append(f"  {f.code} {f.title} ({f.severity}{saving}){knob}")
    if not findings:
        lines.append("  no significant bottleneck found by the doctor; trying the knobs anyway")
    return lines
