"""A collective that timed out, said in words: which rank waited, in which collective, at
which line of the script, and what usually causes it.

gloo's own message names only its transport ("Timed out waiting 3000ms for recv operation
to complete"), and every rank's traceback looks alike. init() installs explain() in front
of ``sys.excepthook``; it adds one paragraph before the traceback, which is printed
unchanged, and only for an exception raised inside torch.distributed whose message says it
timed out.
"""

from __future__ import annotations

import os
import sys
import traceback

TIMEOUT_WORDS = ("timed out", "timeout")
C10D_FILES = ("distributed_c10d.py", "c10d_logger.py")


def describe(exc: BaseException, rank: int, world: int, timeout_s: float | None) -> str | None:
    """The paragraph for a collective timeout, or None when ``exc`` is not one."""
    if not any(word in str(exc).lower() for word in TIMEOUT_WORDS):
        return None
    frames = traceback.extract_tb(exc.__traceback__)
    collective = next(
        (f.name for f in reversed(frames) if os.path.basename(f.filename) in C10D_FILES
         and not f.name.startswith("_") and f.name != "wrapper"),
        None,
    )  # fmt: skip
    if collective is None:
        return None  # not raised by a collective
    torch_dir = os.sep + "torch" + os.sep
    user = next((f for f in reversed(frames) if torch_dir not in f.filename), None)
    where = f" at {user.filename}:{user.lineno} ({(user.line or '').strip()})" if user else ""
    waited = f" for {timeout_s:g} s" if timeout_s else ""
    others = ", ".join(str(r) for r in range(world) if r != rank) or "none"
    return (
        f"torchpace.distributed: rank {rank} of {world} waited{waited} in {collective}{where} "
        f"and timed out: rank(s) {others} did not all join this {collective}. Usually one of "
        "them crashed (its traceback is above or in its log), is still busy (a slow step, "
        "a rank-0-only task without a barrier), or took a code path that skips this "
        "collective or calls another one; TORCH_DISTRIBUTED_DEBUG=DETAIL makes torch check "
        "that every rank calls the same collectives."
    )


def install(rank: int, world: int, timeout_s: float | None) -> None:
    previous = sys.excepthook
    if getattr(previous, "_torchpace_timeouts", False):
        return

    def explain(kind, exc, tb):
        paragraph = describe(exc, rank, world, timeout_s)
        if paragraph:
            print(paragraph, file=sys.stderr, flush=True)
        previous(kind, exc, tb)

    explain._torchpace_timeouts = True  # type: ignore[attr-defined]
    sys.excepthook = explain
