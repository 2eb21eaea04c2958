"""Whether a script or module can be run at all, said before any capture starts: a missing
file or a syntax error is answered in a line instead of a child process and a traceback."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from torchpace.capture.spec import CaptureSpec
from torchpace.exit_codes import EXIT_FAILURE, EXIT_USAGE


@dataclass(frozen=True)
class TargetProblem:
    """Why the target cannot run, and the exit code that says what kind of problem it is."""

    message: str
    exit_code: int  # EXIT_USAGE: nothing to run at that name; EXIT_FAILURE: the script is broken


def check_target(target: str, is_module: bool, who: str = "torchpace") -> TargetProblem | None:
    """None when ``python target`` (or ``python -m target``) would start the script.

    ``who`` names the caller in the advice ("fix the script and run {who} again").
    """
    if is_module:
        return _check_module(target)
    path = Path(target)
    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        return TargetProblem(
            f"script {target} {where}; give the path of your training script", EXIT_USAGE
        )
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as e:
        # A script that does not compile is the user's bug, not a bad command line: exit 1,
        # as `python broken.py` does.
        return TargetProblem(
            f"{target} has a syntax error at line {e.lineno}: {e.msg}\n    {(e.text or '').strip()}"
            f"\nfix the script (`python {target}` shows the same) and run {who} again",
            EXIT_FAILURE,
        )
    return None


def _check_module(target: str) -> TargetProblem | None:
    sys.path.insert(0, os.getcwd())  # what `python -m` puts first
    try:
        found = importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path.pop(0)
    if found:
        return None
    return TargetProblem(
        f"module {target!r} cannot be found from {os.getcwd()}; check the name and "
        "that its package is importable (installed, or under the current folder)",
        EXIT_USAGE,
    )


def add_target_arguments(parser) -> None:
    """The script (or ``-m module``) and everything after it, untouched: the same for every
    verb that runs a script (doctor, tune, run), so they read the command line alike."""
    import argparse

    parser.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        metavar="MODULE",
        help="run a module as `python -m MODULE args...` does",
    )
    parser.add_argument("script", nargs=argparse.REMAINDER, help="the training script and its args")


def target_from_args(module: list[str] | None, script: list[str]) -> tuple[str, bool, list[str]]:
    """(target, is_module, the script's own arguments) from add_target_arguments' parse:
    its ``-m`` list (None when not given) and its script list."""
    if module:
        return module[0], True, list(module[1:])
    return script[0], False, list(script[1:])


@dataclass(frozen=True)
class RunStart:
    """What a capturing verb starts from: the target it checked and the new run folder."""

    target: str
    is_module: bool
    script_args: list[str]
    out_dir: Path

    def capture_spec(self, out_dir: Path | None = None, **settings) -> CaptureSpec:
        """The capture of this target into ``out_dir`` (default: the run folder); the other
        fields of CaptureSpec from ``settings``."""
        return CaptureSpec(
            target=self.target,
            args=list(self.script_args),
            out_dir=out_dir if out_dir is not None else self.out_dir,
            is_module=self.is_module,
            **settings,
        )


def start_run(
    target: str, is_module: bool, script_args: list[str], out: Path | None, who: str
) -> RunStart | TargetProblem:
    """The prologue every capturing verb shares (doctor, tune): the target checked, and a
    new run folder at ``out`` (--out; None: under torchpace-runs/). A TargetProblem says in
    words why not, with the exit code; nothing is created then."""
    from torchpace.capture.run_folder import RunFolderError, new_run_folder

    problem = check_target(target, is_module, who=who)
    if problem is not None:
        return problem
    try:
        out_dir = new_run_folder(out, who=who)
    except RunFolderError as e:
        return TargetProblem(str(e), EXIT_USAGE)
    return RunStart(target, is_module, script_args, out_dir)
