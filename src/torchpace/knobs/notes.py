"""The record of what a knob's patch did once the script ran (the DataLoader at train.py:42 got
2 workers): written by ``apply`` in the child, saved with the run's facts."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchpace.facts.knob_record import KnobRecord

# A script that builds a DataLoader every epoch would repeat the same line: the record keeps
# the first few distinct ones, enough to say where the knob acted.
MAX_NOTES = 6


class Notes:
    """A knob's detail that grows after ``apply`` returned.

    ``apply`` runs before the user's script, so what a patch later does (the DataLoader at
    train.py:42 got 2 workers) is only known when the script builds it. ``apply`` returns a
    Notes; ``apply_all`` binds it to the knob's record, and each ``add`` rewrites the record's
    detail, which the child saves with its facts.
    """

    def __init__(self, summary: str):
        self.summary = summary
        self.lines: list[str] = []
        self.overrides: list[str] = []
        self._record: KnobRecord | None = None

    def add(self, line: str) -> None:
        if line in self.lines or len(self.lines) >= MAX_NOTES:
            return
        self.lines.append(line)
        if self._record is not None:
            self._record.detail = str(self)

    def bind(self, record: KnobRecord) -> None:
        self._record = record
        record.detail = str(self)
        for line in self.overrides:
            record.overridden_at.append(line)

    def overridden(self, line: str) -> None:
        """The script tried to change the setting the knob holds ("train.py:3: ..."): said
        beside the verdict, and the source edit must change that line too."""
        if line in self.overrides or len(self.overrides) >= MAX_NOTES:
            return
        self.overrides.append(line)
        if self._record is not None:
            self._record.overridden_at.append(line)

    def __str__(self) -> str:
        return "; ".join([self.summary, *self.lines])
