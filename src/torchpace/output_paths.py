"""Where a verb may write what the user asked for (--out, --json, --html): checked before any
work starts, so that a wrong path costs one line instead of a traceback after the run.

One rule for every output: a missing folder on the way is created (the terminal says so for
a file's folder: `--html reports/r.html` creates reports/), and anything that would make the
write fail is refused up front: a file where a folder must be, a folder that cannot be
written (read-only, not yours, a read-only file system).
"""

from __future__ import annotations

import os
from pathlib import Path


def _nearest_existing(folder: Path) -> Path:
    folder = Path(os.path.abspath(folder))
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def folder_problem(folder: Path) -> str | None:
    """Why files cannot be created in ``folder``, created first where it is missing (in
    words), or None when they can."""
    base = _nearest_existing(Path(folder))
    if not base.is_dir():
        return f"{base} is a file, not a folder"
    # access() also reports a read-only file system (EROFS), for root too
    if not os.access(base, os.W_OK | os.X_OK):
        what = "the folder" if base == Path(os.path.abspath(folder)) else "the folder above it,"
        return f"{what} {base} is not writable (read-only, or not yours)"
    return None


def output_file_problem(flag: str, path: Path) -> str | None:
    """Why ``flag PATH`` cannot be written, or None."""
    path = Path(path)
    if path.is_dir():
        return f"{flag} {path} is a folder; give a file name"
    problem = folder_problem(path.parent)
    return f"{flag} {path}: {problem}" if problem else None


def is_own_report(path: Path, verb: str) -> bool:
    """A path a verb's --json may be written to: new, or an earlier JSON report of the same
    verb (its "verb" key); never another file of the user's (a script, a config, data)."""
    path = Path(path)
    if not path.exists():
        return True
    try:
        import json

        return path.is_file() and json.loads(path.read_text()).get("verb") == verb
    except (OSError, ValueError, AttributeError):  # not text, not JSON, not an object
        return False


def report_outputs_problem(verb: str, who: str, json_path, html_path, html_ok) -> str | None:
    """Why a verb's --json and --html cannot be written, or None: each must be new or an
    earlier report of the kind (``html_ok(path)``: an earlier torchpace page), in a folder
    that can be written. ``who`` names the verb in the refusal."""
    kinds = (("--json", json_path, lambda p: is_own_report(p, verb), f"{verb} report"),
             ("--html", html_path, html_ok, "torchpace report"))  # fmt: skip
    for flag, path, replaceable, kind in kinds:
        if path is not None and not replaceable(path):
            return (f"{flag} {path} exists and is not an earlier {kind}; {who} never writes "
                    "over other files: give a new path")  # fmt: skip
    for flag, path, _replaceable, _kind in kinds:
        problem = output_file_problem(flag, path) if path is not None else None
        if problem:
            return problem
    return None


def make_folder_for(path: Path) -> Path | None:
    """Create the missing folders that hold ``path``; the outermost one created (for the
    line that says so), or None when its folder already existed."""
    folder = Path(path).parent
    created = None
    probe = folder
    while not probe.exists() and probe.parent != probe:
        created = probe
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    return created


def write_failure(flag: str, path: Path, error: OSError) -> str:
    """The one line for an output that could not be written after all (the disk filled,
    the folder went away): what, where and why."""
    return f"{flag} {path} could not be written ({error.strerror or error})"


def write_output(flag: str, path: Path, write, say) -> bool:
    """``write(path)`` for the output the user named with ``flag``: its missing folders
    created and said so through ``say``, a failure said in one line instead of raised.
    False when it could not be written."""
    try:
        created = make_folder_for(path)
        write(path)
    except OSError as e:
        say(write_failure(flag, path, e))
        return False
    if created is not None:
        say(f"created the folder {created} for {flag} {path}")
    return True
