"""Where in the user's code something happened: the first frame outside torch and torchpace."""

from __future__ import annotations

import os
import sys

import torch

import torchpace

# Frames from these folders are library internals, never the user's line.
_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, torchpace)
)
_STDLIB_MARKERS = (os.sep + "runpy.py", os.sep + "threading.py", os.sep + "contextlib.py")


def user_location(skip: int = 2) -> str | None:
    """'train.py:42' for the innermost frame of the user's code, or None."""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        library = filename.startswith(_LIBRARY_DIRS) or filename.endswith(_STDLIB_MARKERS)
        if not library and not filename.startswith("<"):
            return f"{_short(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _short(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:  # another drive on Windows
        return filename
    return filename if rel.startswith(".." + os.sep + "..") else rel
