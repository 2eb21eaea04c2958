"""The two ways the doctor runs: analyse an existing trace, or profile a script (through
``torchpace.capture``) and analyse what it captured. Both end in the same report."""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import sys
from pathlib import Path

from torchpace.capture.facts import RunFacts
from torchpace.doctor.analyze import Diagnosis, diagnose
from torchpace.doctor.command import EXIT_USAGE, fail_on_matcher
from torchpace.report.doctor_json import diagnosis_to_dict, env_summary, write_json
from torchpace.report.doctor_terminal import render
from torchpace.trace import TraceError, load_trace

FACTS_NAME = "run_facts.json"
REPORT_NAME = "doctor_report.json"
DEFAULT_RUNS_DIR = Path("torchpace-runs")


def say(message: str) -> None:
    print(f"torchpace doctor: {message}", file=sys.stderr)


def analyse_trace(args: argparse.Namespace) -> int:
    try:
        model = load_trace(args.trace)
    except TraceError as e:
        say(str(e))
        return EXIT_USAGE
    facts_path = Path(args.trace).parent / FACTS_NAME
    facts = _load_facts(facts_path) if facts_path.is_file() else None
    return _report(diagnose(model, facts), args, command=None)


def profile_script(args: argparse.Namespace) -> int:
    target, is_module, script_args = _target(args)
    problem = _check_target(target, is_module)
    if problem:
        say(problem)
        return EXIT_USAGE if "syntax error" not in problem else 1
    out_dir, problem = _new_out_dir(args.out)
    if problem:
        say(problem)
        return EXIT_USAGE
    try:
        from torchpace.capture.runner import CaptureSpec, capture_script
    except ImportError as e:  # a partial install: say so instead of a traceback
        say(f"the capture module is missing from this install ({e}); reinstall torchpace")
        return 1

    spec = CaptureSpec(
        target=target,
        args=script_args,
        out_dir=out_dir,
        is_module=is_module,
        warmup=args.warmup,
        steps=args.steps,
        step_on=args.step_on,
        continue_after=args.continue_after,
        timeout_s=args.timeout,
        with_stack=args.stacks,
    )
    try:
        result = capture_script(spec)
    except KeyboardInterrupt:
        say(f"interrupted (Ctrl-C); whatever was captured is in {out_dir}")
        return 130
    facts = result.facts
    model = None
    if result.trace_path is not None and Path(result.trace_path).is_file():
        try:
            model = load_trace(result.trace_path)
        except TraceError as e:
            say(f"the captured trace could not be read ({e}); reporting the run facts only")
    diagnosis = diagnose(model, facts)
    command = ["python", *(["-m"] if is_module else []), target, *script_args]
    code = _report(diagnosis, args, command, out_dir)
    return _exit_code(facts, result.returncode, target, code)


def _target(args: argparse.Namespace) -> tuple[str, bool, list[str]]:
    if args.module:
        return args.module[0], True, list(args.module[1:])
    return args.script[0], False, list(args.script[1:])


def _check_target(target: str, is_module: bool) -> str | None:
    if is_module:
        sys.path.insert(0, os.getcwd())  # what `python -m` puts first
        try:
            found = importlib.util.find_spec(target) is not None
        except (ImportError, ValueError):
            found = False
        finally:
            sys.path.pop(0)
        if not found:
            return (
                f"module {target!r} cannot be found from {os.getcwd()}; check the name and "
                "that its package is importable (installed, or under the current folder)"
            )
        return None
    path = Path(target)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        return f"script {target} {where}; give the path of your training script"
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as e:
        return (
            f"{target} has a syntax error at line {e.lineno}: {e.msg}\n    {(e.text or '').strip()}"
            f"\nfix the script (`python {target}` shows the same) and run the doctor again"
        )
    return None


def _new_out_dir(requested: Path | None) -> tuple[Path, str | None]:
    """A new or empty folder for the artifacts; never one holding someone's files."""
    if requested is not None:
        if requested.exists() and (not requested.is_dir() or any(requested.iterdir())):
            return requested, (
                f"--out {requested} already exists and is not an empty folder; the doctor "
                "never writes over existing files: give a new folder"
            )
        requested.mkdir(parents=True, exist_ok=True)
        return requested, None
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        candidate = DEFAULT_RUNS_DIR / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            candidate.mkdir(parents=True)
            return candidate, None
        except FileExistsError:
            continue
    return DEFAULT_RUNS_DIR, f"could not create a new folder under {DEFAULT_RUNS_DIR}"


def _load_facts(path: Path) -> RunFacts | None:
    try:
        return RunFacts.load(path)
    except (OSError, ValueError, TypeError, KeyError) as e:
        say(f"{path} could not be read as run facts ({e}); analysing the trace alone")
        return None


def _report(d: Diagnosis, args, command, out_dir: Path | None = None) -> int:
    # versions of this environment only for a script that ran in it, not for a --trace
    report = diagnosis_to_dict(d, command, env_summary() if out_dir is not None else None)
    if d.profile.steps or d.findings:
        render(report)
    if out_dir is not None:
        write_json(report, out_dir / REPORT_NAME)
    if args.json is not None:
        write_json(report, args.json)
    matcher = fail_on_matcher(args.fail_on) if args.fail_on else None
    if matcher and any(matcher(f) for f in report["findings"]):
        return 1
    return 0


def _exit_code(facts: RunFacts, returncode: int, target: str, report_code: int) -> int:
    seen = len(facts.window)
    if facts.status == "complete" and seen:
        # The capture ended the script (rc 0), or --continue let it run on and it failed.
        return returncode or report_code
    if facts.status == "interrupted":
        say("interrupted (Ctrl-C)" + (f" after {seen} profiled steps" if seen else ""))
        return 130
    if facts.status == "script-raised":
        say(
            f"{target} raised an exception (its traceback is above) "
            f"{'after ' + str(seen) + ' profiled steps' if seen else 'before its first step'}; "
            "fix the script and run again"
        )
        return returncode or 1
    if facts.status == "timeout":
        say(f"timed out: {facts.error or 'no step came in time'}")
        return 1
    # "script-exited": sys.exit / os._exit / the end of the script before the window closed
    if not seen:
        say(
            f"{target} exited (code {returncode}) before any step was profiled: "
            f"{facts.error or 'no optimizer step was seen'}; see the TP901 finding"
        )
        return returncode or 1
    say(
        f"{target} exited (code {returncode}) after {seen} of {facts.steps_requested} "
        "profiled steps; the report covers those"
    )
    return returncode or report_code
