"""What tune says while it works: each trial as it starts and ends, and the best so far."""

from __future__ import annotations

from rich.console import Console

from torchpace.tune.trial import TrialResult


class ConsoleProgress:
    def __init__(self, console: Console):
        self.console = console
        self._status = None
        self._started = False

    def trial_started(self, index: int, label: str) -> None:
        if not self._started:
            self._started = True
            self.console.print("[bold]2/2[/] trials, each a fresh process, timed unprofiled")
        if self.console.is_terminal:
            self._status = self.console.status(f"trial {index}: {label} ...")
            self._status.start()

    def trial_done(self, result: TrialResult, verdict: str, best_speedup: float) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        timing = f"{result.median_ms:8.1f} ms/step" if result.ok else f"{result.outcome!s:>15}"
        rate = f" {result.samples_per_s:8.1f} samples/s" if result.samples_per_s else ""
        self.console.print(
            f"  {result.label:<42} {timing}{rate}  [dim]{verdict}[/]  best {best_speedup:.2f}x",
            highlight=False,
        )
