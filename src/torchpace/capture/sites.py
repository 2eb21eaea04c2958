"""Where in the user's code something happened: the first frame outside torch, torchpace,
the standard library and installed packages (Lightning, Accelerate, transformers: a
framework's internals are never the user's line)."""

from __future__ import annotations

import contextlib
import os
import site
import sys
import sysconfig

import torch

# Frames from these folders are library internals, never the user's line: torch's and
# torchpace's (this file's package's parent; not `import torchpace`, which would tie capture
# to the package's face and the verbs it hands on).
_TORCHPACE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY_DIRS = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _TORCHPACE_DIR + os.sep)
_STDLIB_MARKERS = (os.sep + "runpy.py", os.sep + "threading.py", os.sep + "contextlib.py")


def _installed_dirs() -> tuple[str, ...]:
    """site-packages (system, virtualenv, user) and the standard library: installed code.
    A user's own package installed editable lives in its source tree, not here."""
    paths = {sysconfig.get_paths().get(k) for k in ("purelib", "platlib", "stdlib")}
    with contextlib.suppress(AttributeError):  # some virtualenvs' site module lacks it
        paths.update(site.getsitepackages())
    paths.add(site.getusersitepackages() if site.ENABLE_USER_SITE else None)
    return tuple(os.path.abspath(p) + os.sep for p in paths if p)


_INSTALLED_DIRS = _installed_dirs()


def _is_library(filename: str) -> bool:
    return (
        filename.startswith(_LIBRARY_DIRS)
        or filename.endswith(_STDLIB_MARKERS)
        or filename.startswith(_INSTALLED_DIRS)
        or filename.startswith("<")
    )


def built_by_library(skip: int = 2) -> bool:
    """True when the innermost frame outside torch and torchpace is installed code: the call
    was made by a framework (Lightning re-creating a DataLoader), not by the user's line."""
    frame = sys._getframe(skip)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back
    return frame is not None and _is_library(frame.f_code.co_filename)


def user_frame(skip: int = 2):
    """The innermost frame of the user's code, or None."""
    frame = sys._getframe(skip)
    while frame is not None and _is_library(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_location(skip: int = 2) -> str | None:
    """'train.py:42' for the innermost frame of the user's code, or None."""
    frame = user_frame(skip + 1)
    return None if frame is None else f"{_short(frame.f_code.co_filename)}:{frame.f_lineno}"


def is_torchpace_file(filename: str) -> bool:
    return filename.startswith(_LIBRARY_DIRS[1])


def _short(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive on Windows
        return filename
    return filename if rel.startswith(".." + os.sep + "..") else rel
