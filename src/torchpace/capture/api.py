"""The one-line API for loops torchpace cannot see on its own: ``torchpace.step()``.

Call it once at the end of each iteration. Outside ``torchpace doctor --step-on manual`` it
does nothing, so it can stay in the code.
"""

from __future__ import annotations

_session = None  # set by the capture child; None in a normal run


def step() -> None:
    """Mark the end of one training (or inference) step."""
    if _session is not None:
        _session.boundaries.manual_step()


def _attach(session) -> None:
    global _session
    _session = session
