"""The `torchpace run` verb: run a script with the knobs of ``torchpace.toml`` applied.

The configuration is checked here (it exists and is valid, the script exists and
compiles); then the script runs *in this process*, through the capture child's RUN mode
(capture/child.run_only), which applies the knobs and runs it as ``python train.py args``
would. Nothing of torchpace stands between the script and the terminal: its output, its
exit code and the signals sent to it are its own, and its pid is the one started.

Start-up is the script's: no second interpreter is started (an exec would pay Python's
start-up twice), and nothing here imports torch. The environment check (the
``[environment]`` fingerprint: reading it imports torch and, on a GPU machine, CUDA) runs
only where there are knobs to apply, just before applying them: the knobs import torch
there anyway, and the script would import it a moment later (benchmarks/run_startup.py).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from torchpace.capture.target import add_target_arguments, check_target, target_from_args
from torchpace.exit_codes import EXIT_USAGE
from torchpace.printable import printable

USAGE = (
    "torchpace run [--config FILE] [--force] script.py [script args...]\n"
    "       torchpace run [--config FILE] [--force] -m module [module args...]"
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        usage=USAGE,
        help="run a script with the configuration torchpace tune wrote (torchpace.toml)",
        description="Run your training script, unmodified, with the settings `torchpace tune` "
        "measured and wrote to torchpace.toml applied. The configuration is refused when it "
        "was measured on another device, torch minor version or number of usable cores "
        "(--force applies it anyway). Options go before the script; everything after the "
        "script (or -m module) is passed to it untouched.",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the configuration to apply (default: torchpace.toml in the current folder)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="apply the configuration even if it was measured in another environment",
    )
    add_target_arguments(p)
    p.set_defaults(func=run)


def say(message: str) -> None:
    print(f"torchpace run: {printable(message, lines=True)}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from torchpace.knobs.config import (
        DEFAULT_PATH,
        ConfigError,
        check_environment,
        idle_without_cuda,
        load_config,
    )

    if args.module is not None and not args.module:
        say("-m needs a module name, e.g. torchpace run -m mypkg.train")
        return EXIT_USAGE
    if not args.module and not args.script:
        say(f"nothing to run: usage: {USAGE.splitlines()[0]} (see --help)")
        return EXIT_USAGE
    target, is_module, script_args = target_from_args(args.module, args.script)

    path = args.config if args.config is not None else Path(DEFAULT_PATH)
    try:
        config = load_config(path)
    except ConfigError as e:
        say(str(e))
        return EXIT_USAGE
    job = _needs_launch(path, config.knobs, target, is_module, script_args)
    if job:
        say(job)
        return EXIT_USAGE
    problem = check_target(target, is_module, who="torchpace run")
    if problem:
        say(problem.message)
        return problem.exit_code
    if config.knobs:  # nothing applied, nothing that another environment could make slower
        try:
            differences = check_environment(config, force=args.force, force_hint="--force")
        except ConfigError as e:
            say(str(e))
            return EXIT_USAGE
        for difference in differences:
            say(f"applied anyway (--force): {difference}")
        idle = idle_without_cuda(config.knobs)
        if idle:
            say(idle)
    say(_applying(config.knobs, path))
    return _run_here(target, is_module, script_args, config.knobs)


def _needs_launch(
    path: Path, knobs: dict, target: str, is_module: bool, script_args: list[str]
) -> str | None:
    """Why a configuration of several processes per node cannot run here, and the command
    that runs it; None when it is one process's. `run` runs one process: running the job's
    settings in it would silently measure another job (another global batch)."""
    import shlex

    from torchpace.knobs.nproc_per_node import from_config

    nproc = from_config(knobs)
    if nproc is None or nproc <= 1:
        return None
    launch = ["torchpace", "launch", "--nproc-per-node", str(nproc), "--config", str(path)]
    command = shlex.join([*launch, *(["-m"] if is_module else []), target, *script_args])
    return (
        f"{path} sets nproc-per-node = {nproc}: it is the configuration of a job of {nproc} "
        f"processes per node, and `torchpace run` runs one process; start the job with "
        f"`{command}`"
    )


def _applying(knobs: dict, path: Path) -> str:
    from torchpace.knobs.config import format_value

    if not knobs:
        return f"{path} sets no knobs; running the script as it is"
    settings = ", ".join(f"{name}={format_value(value)}" for name, value in knobs.items())
    return f"applying {settings} from {path}"


def _run_here(target: str, is_module: bool, script_args: list[str], knobs: dict) -> int:
    """The script in this process, as the capture child's RUN mode runs it: its exit code
    is returned (a sys.exit in the script propagates, as under python)."""
    from torchpace.capture.child import run_only
    from torchpace.capture.spec import CaptureSpec, Mode

    spec = CaptureSpec(
        target=target,
        args=script_args,
        out_dir=Path(os.devnull),  # nothing is written: RUN measures nothing
        is_module=is_module,
        mode=Mode.RUN,
        knobs=dict(knobs),
    )
    try:
        return run_only(spec)
    except KeyboardInterrupt as e:
        _die_as_python_does(e)
        raise


def _die_as_python_does(e: KeyboardInterrupt) -> None:
    """A Ctrl-C the script did not handle: python prints the traceback and ends the process
    by SIGINT (its parent sees the signal, as with ``python train.py``), not the CLI's
    "interrupted" line and exit code 130."""
    import signal

    from torchpace.capture.child import _user_traceback

    print(_user_traceback(e), file=sys.stderr, end="")
    sys.stdout.flush()
    sys.stderr.flush()
    if hasattr(signal, "SIGINT") and hasattr(os, "kill"):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
