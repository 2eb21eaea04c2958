"""What one tune knob did in a run (``KnobRecord``), apart from the rest of the run's facts:
`torchpace run` and ``torchpace.apply()`` make records before the user's script starts, and
importing ``facts.run`` (its two dozen dataclasses) would add ~10 ms to every tuned job's
start-up (benchmarks/run_startup.py). ``facts.run`` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KnobRecord:
    """A tune knob applied in this run, and what it did (or why it could not)."""

    name: str
    value: object
    applied: bool
    detail: str = ""
    # checked inside the trial at its first and last timed steps (Knob.check): True when the
    # setting was in force (or the knob has nothing to check), False when it was not
    # (``not_held`` says why), None when no timed step was reached
    holds: bool | None = None
    not_held: str = ""
    # the script's own lines that tried to change the setting while the knob held it
    # ("train.py:3: torch.set_num_threads(32)"): the source edit must change them too
    overridden_at: list[str] = field(default_factory=list)
