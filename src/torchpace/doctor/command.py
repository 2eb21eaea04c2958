"""The `torchpace doctor` verb: profile an unmodified script (or read an existing trace) and
report where each step's time and memory go and what to fix first."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchpace.capture.target import add_target_arguments, target_from_args
from torchpace.doctor.finding import fail_on_matcher
from torchpace.doctor.options import DoctorOptions
from torchpace.exit_codes import EXIT_USAGE

USAGE = (
    "torchpace doctor [options] script.py [script args...]\n"
    "       torchpace doctor [options] -m module [module args...]\n"
    "       torchpace doctor [options] --trace FILE"
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor",
        usage=USAGE,
        help="profile a training script (unmodified) and say what makes it slow",
        description="Run a few steps of your own training script under the profiler and "
        "report where each step's time and memory go, the problems ranked by what they cost "
        "per step, the source line and the fix. Options go before the script; everything "
        "after the script (or -m module) is passed to it untouched.",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        metavar="W",
        help="steps to skip before profiling (default 3)",
    )
    p.add_argument("--steps", type=int, default=5, metavar="K", help="steps to profile (default 5)")
    p.add_argument(
        "--measure",
        type=float,
        default=5.0,
        metavar="S",
        help="seconds of unprofiled steps timed after the profiled ones for the samples/s "
        "figure (default 5; at least 10 steps, at most 200; 0: 10 steps)",
    )
    p.add_argument(
        "--step-on",
        choices=["optimizer", "dataloader", "manual"],
        default="optimizer",
        help="what ends a step: an optimizer step (default), a DataLoader batch "
        "(loops without an optimizer), or torchpace.step() calls",
    )
    p.add_argument(
        "--continue",
        dest="continue_after",
        action="store_true",
        help="let the script run on after the profiled steps",
    )
    p.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="give up if the profiled steps have not come after S seconds",
    )
    p.add_argument(
        "--stacks", action="store_true", help="record Python stacks in the trace (bigger, slower)"
    )
    p.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="analyse an existing torch.profiler trace (.json/.json.gz) instead; a folder "
        "of traces, one per rank (names with rank<N>), adds the cross-rank view",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the report as JSON")
    p.add_argument(
        "--html",
        type=Path,
        metavar="PATH",
        help="also write the HTML report here (the run folder always gets report.html)",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress display on stderr while the script runs (the report is unchanged)",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="folder for the trace and facts (default: a new "
        "torchpace-runs/<timestamp>/); must be new or empty",
    )
    p.add_argument(
        "--fail-on",
        metavar="CODE|SEVERITY",
        help="exit 1 when a finding with this code (TP101) or at least this "
        "severity (high, medium, low) appears",
    )
    p.add_argument(
        "--nproc-per-node",
        metavar="N",
        help="run N processes through torchrun, every rank under the capture, and report "
        "the job across ranks: the same as `torchpace launch --doctor --nproc-per-node N` "
        "(other torchrun flags: use launch)",
    )
    add_target_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torchpace.doctor import runs

    problem = check_usage(args)
    if problem:
        print(f"torchpace doctor: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.trace is not None:
        return runs.analyse_trace(options(args))
    if args.nproc_per_node is not None:
        # launch's job (launch --doctor): cli.py routes it there before this is called, as
        # the doctor does not import launch (launch imports the doctor for the report)
        raise RuntimeError("doctor --nproc-per-node is run through torchpace.launch")
    return runs.profile_script(options(args))


def options(args: argparse.Namespace) -> DoctorOptions:
    """The parsed command line as the doctor's typed options (checked by check_usage)."""
    target, is_module, script_args = None, False, ()
    if args.script or args.module:
        target, is_module, script_args = target_from_args(args.module, args.script)
    return DoctorOptions(
        target=target,
        is_module=is_module,
        script_args=tuple(script_args),
        trace=args.trace,
        warmup=args.warmup,
        steps=args.steps,
        measure_s=args.measure,
        step_on=args.step_on,
        continue_after=args.continue_after,
        timeout_s=args.timeout,
        with_stack=args.stacks,
        out=args.out,
        json=args.json,
        html=args.html,
        fail_on=args.fail_on,
        quiet=args.quiet,
    )


# Options the many-process doctor does not take, with what to do instead.
_NOT_WITH_NPROC = {
    "trace": "--trace reads traces that exist; --nproc-per-node runs the script",
    "continue_after": "--continue",
    "stacks": "--stacks",
    "json": "--json (the job's report is written to <run folder>/doctor_report.json)",
    "html": "--html (the job's page is written to <run folder>/report.html)",
    "fail_on": "--fail-on",
    "timeout": "--timeout",
}


def launch_argv(args: argparse.Namespace) -> list[str]:
    """`doctor --nproc-per-node N ...` as the `launch --doctor` command line it stands for."""
    argv = ["--nproc-per-node", str(args.nproc_per_node), "--doctor",
            "--doctor-warmup", str(args.warmup), "--doctor-steps", str(args.steps)]  # fmt: skip
    if args.out is not None:
        argv += ["--doctor-out", str(args.out)]
    if args.module:
        return [*argv, "-m", *args.module]
    return [*argv, *args.script]


def check_usage(args: argparse.Namespace) -> str | None:
    has_script = bool(args.script) or bool(args.module)
    if args.trace is not None and has_script:
        return "give either --trace FILE or a script to run, not both"
    if args.trace is None and not has_script:
        return f"nothing to profile: usage: {USAGE.splitlines()[0]} (see --help)"
    if args.module is not None and not args.module:
        return "-m needs a module name, e.g. torchpace doctor -m mypkg.train"
    if args.nproc_per_node is not None:
        try:
            if int(args.nproc_per_node) < 1:
                return f"--nproc-per-node must be at least 1 process (got {args.nproc_per_node})"
        except ValueError:
            pass  # torchrun's own words (auto, cpu, gpu) are its to check
        given = [what for name, what in _NOT_WITH_NPROC.items() if getattr(args, name, None)]
        if args.step_on != "optimizer":
            given.append("--step-on")
        if given:
            return (
                f"--nproc-per-node does not take {', '.join(given)}; run `torchpace launch "
                "--doctor` for torchrun's own flags, or drop these"
            )
    if args.measure < 0:
        return f"--measure must be >= 0 seconds (got {args.measure:g})"
    if args.warmup < 0 or args.steps < 1:
        return f"--warmup must be >= 0 and --steps >= 1 (got {args.warmup} and {args.steps})"
    from torchpace.output_paths import report_outputs_problem

    problem = report_outputs_problem(
        "doctor", "the doctor", args.json, args.html, _replaceable_html
    )
    if problem:
        return problem
    if args.fail_on is not None and fail_on_matcher(args.fail_on) is None:
        return (
            f"--fail-on {args.fail_on!r} is neither a finding code (e.g. TP101) nor a "
            "severity (high, medium, low)"
        )
    return None


def _replaceable_html(path: Path) -> bool:
    from torchpace.report.html import is_replaceable

    return is_replaceable(path)
