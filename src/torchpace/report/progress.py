"""What a verb says on stderr while it works: a rich spinner line on a terminal, one plain
line per phase elsewhere (a CI log gets no control codes and no line per step), nothing with
``--quiet``. stdout stays for the report.

The script's own output reaches the same terminal directly from its process, so the spinner
is transient: it is erased before the report is drawn.
"""

from __future__ import annotations

import threading

from rich.console import Console

# The capture's phases (capture/session.py) as the user reads them.
PHASE_LABELS = {
    "warmup": "warming up",
    "window": "profiling",
    "probes": "A/B probes",
    "throughput": "unprofiled steps for the samples/s figure",
    "count": "counting one step's FLOPs",
    "measured": "timing",
    "done": "finishing the script",
}


class ProgressDisplay:
    def __init__(self, verb: str, quiet: bool = False, console: Console | None = None):
        self.verb = verb
        self.console = console or Console(stderr=True)
        self.enabled = not quiet
        self.live = self.enabled and self.console.is_terminal
        self._status = None
        self._last_phase: str | None = None
        self._stopped = False  # a late line from the capture must not follow the report
        self._lock = threading.Lock()  # called from the capture's reader thread and the verb

    def capture(self, event) -> None:
        """A ``capture.progress.CaptureProgress`` from the child."""
        if event.phase == "done" and not self.live:
            return  # a log needs no line for the moment between the last step and the end
        label = PHASE_LABELS.get(event.phase, event.phase)
        if event.total:
            counted = f"{label}: step {min(event.done + 1, event.total)}/{event.total}"
            plain = f"{label} ({event.total} step{'s' if event.total != 1 else ''})"
        else:
            counted = plain = label
        self.show(counted, event.phase, plain)

    def show(self, text: str, phase: str, plain: str | None = None) -> None:
        """``text`` on the spinner; ``plain`` (default ``text``) once per phase elsewhere."""
        if not self.enabled:
            return
        with self._lock:
            if self._stopped:
                return
            if self.live:
                if self._status is None:
                    self._status = self.console.status(text, spinner="dots")
                    self._status.start()
                else:
                    self._status.update(text)
            elif phase != self._last_phase:
                self.console.print(
                    f"torchpace {self.verb}: {plain or text}", highlight=False, soft_wrap=True
                )
            self._last_phase = phase

    def line(self, text: str) -> None:
        """A line that stays (a result, not a state): printed above the spinner on a terminal,
        as it is elsewhere; nothing with ``--quiet`` or after ``stop``. Rich markup allowed."""
        if not self.enabled:
            return
        with self._lock:
            if not self._stopped:
                # one line whatever the width: a pipe or a CI log gets no hard-wrapped rows
                self.console.print(text, highlight=False, soft_wrap=True)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._status is not None:
                self._status.stop()
                self._status = None
