"""The `torchpace tune` verb: the doctor's diagnosis first, then trials in fresh processes,
the ladder of what was kept, torchpace.toml, the report and the source diff."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from torchpace import run_files
from torchpace.capture.target import add_target_arguments, target_from_args
from torchpace.exit_codes import EXIT_USAGE
from torchpace.tune.options import DEFAULT_STEPS, DEFAULT_TIME_BUDGET_S, DEFAULT_TRIALS

# A sanity bound when --time-budget alone limits the tune: the time decides long before it.
TRIALS_UNDER_A_TIME_BUDGET = 10_000

USAGE = (
    "torchpace tune [options] script.py [script args...]\n"
    "       torchpace tune [options] -m module [module args...]"
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "tune",
        usage=USAGE,
        help="try each applicable fix on your unmodified script, keep what is measurably faster",
        description="Profile your training script (as `torchpace doctor` does), then try each "
        "applicable knob in a fresh process, timed without the profiler against the "
        "baseline, with the loss checked; combine the winners and write the configuration "
        "(torchpace.toml, applied by `torchpace run`), the ladder of kept changes and the "
        "source diff. Options go before the script; everything after it is the script's.",
    )
    p.add_argument("--warmup", type=int, default=3, metavar="W", help="warm-up steps (3)")
    p.add_argument(
        "--steps",
        type=int,
        metavar="K",
        help="timed steps per trial (default: calibrated on the first baseline run, at least "
        f"{DEFAULT_STEPS}: as many as make a run's median stable to about 1%%, within 4 s)",
    )
    p.add_argument(
        "--budget", type=int, metavar="N",
        help=f"most trials ({DEFAULT_TRIALS}; with --time-budget alone, the time decides)",
    )  # fmt: skip
    p.add_argument(
        "--time-budget", type=positive_seconds, metavar="S",
        help=f"the whole command within S seconds (default: {DEFAULT_TIME_BUDGET_S:.0f})",
    )  # fmt: skip
    p.add_argument(
        "--job-steps", type=int, metavar="N",
        help="how many steps the real job runs: a knob whose one-time cost (compilation, "
        "autotuning) its per-step saving does not repay within N steps is refused "
        "(default: the script's own end when a trial sees it end; else not known, and each "
        "such knob's verdict says after how many steps it is repaid)",
    )  # fmt: skip
    p.add_argument(
        "--trial-timeout",
        type=positive_seconds,
        metavar="S",
        help="end a trial after S seconds (default: 10x the baseline's trial + 120 s)",
    )
    p.add_argument("--knobs", metavar="A,B", help="only these knobs (names: see docs/knobs.md)")
    p.add_argument(
        "--allow-batch-size",
        action="store_true",
        help="also try larger batch sizes (changes training: the learning rate may need scaling)",
    )
    p.add_argument(
        "--try-all",
        action="store_true",
        help="also try knobs this machine is known to run slowly (bf16 on a CPU without it)",
    )
    p.add_argument(
        "--loss-tolerance",
        type=float,
        default=0.10,
        metavar="F",
        help="reject a trial whose mean loss departs from the baseline's by more than this "
        "fraction (0.10)",
    )
    p.add_argument(
        "--fidelity-limit",
        type=float,
        default=10.0,
        metavar="PCT",
        help="stop when a trial times the script more than PCT%% away from its plain speed "
        "(10; 0: no fidelity check; docs/tune.md)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for every trial (0)")
    p.add_argument(
        "--step-on", choices=["optimizer", "dataloader", "manual"], default="optimizer",
        help="what ends a step (as for the doctor)",
    )  # fmt: skip
    p.add_argument(
        "--from-run", type=Path, metavar="DIR",
        help="reuse the doctor's capture in DIR (a torchpace-runs/<...> folder) instead of "
        "profiling again",
    )  # fmt: skip
    p.add_argument(
        "--out", type=Path, metavar="DIR",
        help="run folder (default: a new torchpace-runs/<timestamp>/); must be new or empty",
    )  # fmt: skip
    p.add_argument(
        "--write", action="store_true",
        help="apply the source diff to your files (shown always; written only with this)",
    )  # fmt: skip
    p.add_argument(
        "--quiet", action="store_true",
        help="no progress on stderr (the doctor's findings, each trial); the ladder, the "
        "configuration and the diff still go to stdout",
    )  # fmt: skip
    p.add_argument(
        "--nproc-per-node", type=int, default=1, metavar="N",
        help="tune a DDP job on N local ranks: the doctor's capture and every trial run the "
        "whole job through `torchpace launch`, timed by its slowest rank; adds DDP's knobs "
        "(bucket size, gradient views, static graph, buffer broadcast) (default 1)",
    )  # fmt: skip
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the report here")
    p.add_argument(
        "--html",
        type=Path,
        metavar="PATH",
        help="also write the HTML report here (the run folder always gets report.html)",
    )
    add_target_arguments(p)
    p.set_defaults(func=run)


def positive_seconds(text: str) -> float:
    """A number of seconds above 0 for --time-budget and --trial-timeout: argparse refuses
    anything else (exit 2, naming the flag) before the doctor's run starts. A negative
    budget used to run every trial into an instant timeout, and 0 was silently ignored."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 (got {text})")
    return value


def run(args: argparse.Namespace) -> int:
    problem = _check_usage(args)
    if problem:
        print(f"torchpace tune: {problem}", file=sys.stderr)
        return EXIT_USAGE
    from torchpace.capture.file_guard import user_folders
    from torchpace.capture.guard_journal import FolderBusy, lock_folders, unlock
    from torchpace.report.progress import ProgressDisplay
    from torchpace.tune.session import tune_script

    tune = options(args)
    try:  # one tune per folder: its trials' files would be taken for the user's by the other
        locks = lock_folders(user_folders(tune.target, tune.is_module))
    except FolderBusy as busy:
        print(busy, file=sys.stderr)
        return EXIT_USAGE
    # progress on stderr, the doctor's display: a spinner on a terminal, plain lines in a log,
    # nothing with --quiet (errors still go out through say())
    display = ProgressDisplay("tune", quiet=tune.quiet)
    try:
        return tune_script(tune, display)
    finally:
        unlock(locks)


def trial_budget(budget: int | None, time_budget: float | None) -> int:
    """The most trials: --budget when given; else DEFAULT_TRIALS, unless --time-budget is
    the limit the user chose (gpt.py under --time-budget 300 was stopped by a default of 60
    trials it never asked for, with fused AdamW's pairs under way)."""
    if budget is not None:
        return budget
    return DEFAULT_TRIALS if time_budget is None else TRIALS_UNDER_A_TIME_BUDGET


def options(args: argparse.Namespace):
    """The parsed command line as tune's typed options (checked by _check_usage)."""
    from torchpace.tune.options import TuneOptions

    target, is_module, script_args = target_from_args(args.module, args.script)
    return TuneOptions(
        target=target,
        is_module=is_module,
        script_args=tuple(script_args),
        warmup=args.warmup,
        steps=args.steps,
        budget=trial_budget(args.budget, args.time_budget),
        time_budget=args.time_budget,
        job_steps=args.job_steps,
        trial_timeout=args.trial_timeout,
        knobs=tuple(k.strip() for k in args.knobs.split(",")) if args.knobs else None,
        allow_batch_size=args.allow_batch_size,
        try_all=args.try_all,
        loss_tolerance=args.loss_tolerance,
        seed=args.seed,
        step_on=args.step_on,
        from_run=args.from_run,
        out=args.out,
        write=args.write,
        quiet=args.quiet,
        json=args.json,
        html=args.html,
        fidelity_limit=args.fidelity_limit,
        nproc_per_node=args.nproc_per_node,
    )


def _check_usage(args: argparse.Namespace) -> str | None:
    if not args.script and not args.module:
        return f"nothing to tune: usage: {USAGE.splitlines()[0]} (see --help)"
    if args.module is not None and not args.module:
        return "-m needs a module name, e.g. torchpace tune -m mypkg.train"
    if args.warmup < 0 or (args.steps is not None and args.steps < 3):
        return f"--warmup must be >= 0 and --steps >= 3 (got {args.warmup} and {args.steps})"
    if args.nproc_per_node < 1:
        return f"--nproc-per-node must be 1 or more (got {args.nproc_per_node})"
    if args.job_steps is not None and args.job_steps < 1:
        return f"--job-steps is the job's length in steps, 1 or more (got {args.job_steps})"
    if args.nproc_per_node > 1 and args.module is not None:
        return "--nproc-per-node tunes a script; run a module's job through a script for now"
    if args.budget is not None and args.budget < 5:
        return f"--budget must allow the baseline and one knob: at least 5 (got {args.budget})"
    if not 0 < args.loss_tolerance < 10:
        return f"--loss-tolerance is a fraction such as 0.1 (got {args.loss_tolerance})"
    if args.knobs:
        from torchpace.knobs import NAMES, is_knob

        unknown = [k for k in args.knobs.split(",") if not is_knob(k.strip())]
        if unknown:
            return f"--knobs: no knob named {', '.join(unknown)}; the knobs are: {', '.join(NAMES)}"
    if args.from_run is not None and not (args.from_run / run_files.FACTS).is_file():
        return (
            f"--from-run {args.from_run} holds no run_facts.json; give a folder that "
            "`torchpace doctor` or `torchpace tune` wrote (torchpace-runs/<timestamp>/...)"
        )
    return _outputs_problem(args)


def _outputs_problem(args: argparse.Namespace) -> str | None:
    """--json and --html: new paths or tune's own earlier reports, never another file (the
    training script named by mistake), in folders that can be written."""
    from torchpace.output_paths import report_outputs_problem
    from torchpace.report.html import is_replaceable

    return report_outputs_problem("tune", "tune", args.json, args.html, is_replaceable)
