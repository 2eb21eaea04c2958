"""Run a function on a thread with a deep stack and a high recursion limit.

libcst parses in native code and walks its trees in Python, both recursing once per level
of nesting. The main thread's stack (8 MiB by default) overflows in the parser at about
1,200 nested brackets, a segfault no `except` can catch; Python's default recursion limit
(1,000) stops a walk of a 1,000-term sum. A thread whose stack is large enough for
``RECURSION_LIMIT`` frames gives both the room that ``lint.depth.MAX_NESTING`` allows, and
turns anything deeper into a RecursionError, which lint reports, instead of a crash. The
stack is reserved, not used: only the pages a deep file touches are ever allocated.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TypeVar

STACK_BYTES = 512 << 20
# About 10 frames per level of MAX_NESTING (a libcst visit takes three per node, code
# generation two, and a level of nesting may be two nodes), with room to spare.
RECURSION_LIMIT = 25_000

T = TypeVar("T")
# The stack size and the recursion limit are process-wide settings: one caller at a time
# changes and restores them.
_lock = threading.Lock()


def call_with_deep_stack(function: Callable[..., T], *args) -> T:
    """``function(*args)`` on a thread of its own with a deep stack; its exception, if it
    raises one, is raised here."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as e:  # handed to the caller's thread
            outcome["error"] = e

    with _lock:
        previous_stack = threading.stack_size(STACK_BYTES)
        previous_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(previous_limit, RECURSION_LIMIT))
        try:
            thread = threading.Thread(target=target, name="torchpace-lint-deep-stack", daemon=True)
            thread.start()
        finally:
            threading.stack_size(previous_stack)
        try:
            thread.join()
        finally:
            sys.setrecursionlimit(previous_limit)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
