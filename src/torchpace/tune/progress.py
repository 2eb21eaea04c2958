"""What tune says on stderr while it works, drawn by the doctor's progress display
(report/progress.py): the trial running now on the spinner of a terminal (one plain line per
trial elsewhere), and a line that stays for each verdict. ``--quiet``: nothing.

Implements ledger.Progress (trial_started / trial_done). A trial's verdict may come after the
next trial has started (the paired test decides on pairs), so the two calls are independent.
"""

from __future__ import annotations

import sys

from torchpace.printable import printable
from torchpace.report.progress import ProgressDisplay
from torchpace.tune.trial import TrialResult


def say(message: str) -> None:
    """One line of tune's own on stderr, whatever the display."""
    print(f"torchpace tune: {printable(message, lines=True)}", file=sys.stderr)


class TrialProgress:
    def __init__(self, display: ProgressDisplay):
        self.display = display
        self._started = False

    def trial_started(self, index: int, label: str) -> None:
        if not self._started:
            self._started = True
            self.display.line("[bold]2/2[/] trials, each a fresh process, timed unprofiled")
        # one phase per trial: the spinner shows it, a log gets it once
        self.display.show(f"trial {index}: {label}", f"trial-{index}")

    def trial_done(self, result: TrialResult, verdict: str, best_speedup: float) -> None:
        timing = f"{result.ms_per_step:8.1f} ms/step" if result.ok else f"{result.outcome!s:>15}"
        rate = f" {result.samples_per_s:8.1f} samples/s" if result.samples_per_s else ""
        self.display.line(
            f"  {result.label:<42} {timing}{rate}  [dim]{verdict}[/]  best {best_speedup:.2f}x"
        )
