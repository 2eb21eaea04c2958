"""The `torchpace run` verb: run a script with the knobs of ``torchpace.toml`` applied.

The configuration is checked here (it exists and is valid, it was measured in this
environment, the script exists and compiles); then this process is *replaced* by the
capture child in its RUN mode, which applies the knobs and runs the script as
``python train.py args`` would. Nothing of torchpace stays between the script and the
terminal: its output, its exit code and the signals sent to it are its own.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from torchpace.capture.target import add_target_arguments, check_target, target_from_args
from torchpace.exit_codes import EXIT_USAGE

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
    print(f"torchpace run: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from torchpace.knobs.config import DEFAULT_PATH, ConfigError, check_environment, load_config

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
        differences = check_environment(config, force=args.force, force_hint="--force")
    except ConfigError as e:
        say(str(e))
        return EXIT_USAGE
    problem = check_target(target, is_module, who="torchpace run")
    if problem:
        say(problem.message)
        return problem.exit_code
    for difference in differences:
        say(f"applied anyway (--force): {difference}")
    say(_applying(config.knobs, path))
    return _exec_child(target, is_module, script_args, config.knobs)


def _applying(knobs: dict, path: Path) -> str:
    from torchpace.knobs.config import format_value

    if not knobs:
        return f"{path} sets no knobs; running the script as it is"
    settings = ", ".join(f"{name}={format_value(value)}" for name, value in knobs.items())
    return f"applying {settings} from {path}"


def _exec_child(target: str, is_module: bool, script_args: list[str], knobs: dict) -> int:
    import shutil
    import tempfile

    from torchpace.capture.runner import SPEC_NAME, child_command, child_env
    from torchpace.capture.spec import CaptureSpec, Mode

    folder = Path(tempfile.mkdtemp(prefix="torchpace-run-"))
    spec_path = folder / SPEC_NAME
    spec = CaptureSpec(
        target=target,
        args=script_args,
        out_dir=folder,
        is_module=is_module,
        mode=Mode.RUN,
        knobs=dict(knobs),
    )
    spec.save(spec_path)  # the child deletes it, and the folder, once read
    command = child_command(spec_path)
    # Only what the child needs to import torchpace; the capture's profiler settings
    # (Kineto's log level, CUPTI teardown) are not a plain run's business.
    env = {**os.environ, "PYTHONPATH": child_env()["PYTHONPATH"]}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if os.name == "nt":  # no exec that keeps the process: wait for it instead
            import subprocess

            return subprocess.call(command, env=env)
        os.execve(command[0], command, env)
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        say(f"could not start {command[0]} ({e.strerror or e})")
        return 1
    return 0  # not reached: execve does not return
