"""The kept configuration as `torchpace run` runs it: the tune's last measurement.

Every figure before this one comes from trials (capture TIMING mode: a seed, each step's loss,
the DataLoader's fetch times, a watchdog). The user gets the configuration through `torchpace
run` (or its source diff): the script with the knobs applied and nothing else. This check
alternates the script as it is (capture PLAIN, the fidelity check's reference: one
step-timing hook) with the script and the kept knobs applied as `run` applies them (PLAIN
with the spec's knobs), PAIRS pairs, each pair's order drawn at random, and reports the
speedup there beside the trials' (issue 22: on makemore a num_workers=0 trial ran 12.4-13.4
ms/step where `torchpace run` with the same knob ran 10.1-10.7).

It reports; it does not decide: three pairs cannot overrule the sequential test that kept
the configuration. The tune's final figure stays the trials' paired estimate; when the two
disagree beyond the run-to-run noise, the terminal says so (docs/tune.md, "As `run` runs
it"). A configuration that changes the batch size is not checked: a plain run counts no
samples, and its steps are not comparable.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torchpace.tune.fidelity import plain_run, run_pair
from torchpace.tune.trial import TrialSettings

PAIRS = 3
# every pair this far (or farther) from the trials' figure, on one side, is a disagreement
# worth saying; nearer is within what three pairs on a shared machine can tell
DISAGREE_PCT = 10.0


@dataclass
class RunCheck:
    plain_ms: list[float] = field(default_factory=list)  # the script as it is, each run
    tuned_ms: list[float] = field(default_factory=list)  # with the kept knobs, each run
    trials_speedup: float | None = None  # the tune's final figure, from trials
    error: str | None = None  # why it could not be measured (a run failed)
    skipped: str | None = None  # why it was not run

    @property
    def ratios(self) -> list[float]:
        """Each pair's speedup: plain ms/step over tuned ms/step."""
        return [p / t for p, t in zip(self.plain_ms, self.tuned_ms, strict=False) if t > 0]

    @property
    def speedup(self) -> float | None:
        return round(statistics.median(self.ratios), 3) if self.ratios else None

    @property
    def disagrees(self) -> bool:
        """Every pair lies more than DISAGREE_PCT from the trials' figure, on one side: more
        than three pairs of noise would put there (an equal workload puts all three on one
        side one time in four, rarely all three that far)."""
        if self.trials_speedup is None or len(self.ratios) < PAIRS:
            return False
        off = [100 * (r / self.trials_speedup - 1) for r in self.ratios]
        return all(o > DISAGREE_PCT for o in off) or all(o < -DISAGREE_PCT for o in off)

    def line(self) -> str:
        if self.skipped:
            return f"as `torchpace run` runs it: not checked ({self.skipped})"
        if self.speedup is None:
            return f"as `torchpace run` runs it: not measured ({self.error or 'no run'})"
        pairs = ", ".join(f"{r:.2f}x" for r in self.ratios)
        text = (
            f"as `torchpace run` runs it: {self.speedup:.2f}x over the script as it is "
            f"({len(self.ratios)} alternated pairs: {pairs})"
        )
        if self.trials_speedup is not None:
            text += f"; the trials measured {self.trials_speedup:.2f}x"
        if self.disagrees:
            side = "above" if self.ratios[0] > self.trials_speedup else "below"
            text += (
                f"; every pair lies over {DISAGREE_PCT:.0f}% {side} it: the trials did not "
                'time this configuration as `run` runs it (docs/tune.md, "As `run` runs '
                'it"; please report it with the run folder)'
            )
        if self.error:
            text += f"; incomplete: {self.error}"
        return text

    @classmethod
    def from_dict(cls, d: dict) -> RunCheck:
        return cls(list(d.get("plain_ms") or []), list(d.get("tuned_ms") or []),
                   d.get("trials_speedup"), d.get("error"), d.get("skipped"))  # fmt: skip

    def to_dict(self) -> dict:
        return {
            "speedup": self.speedup,
            "trials_speedup": self.trials_speedup,
            "disagrees": self.disagrees,
            "plain_ms": [round(x, 3) for x in self.plain_ms],
            "tuned_ms": [round(x, 3) for x in self.tuned_ms],
            "error": self.error,
            "skipped": self.skipped,
        }


def check_under_run(
    settings: TrialSettings,
    config: dict,
    out_dir: Path,
    trials_speedup: float | None,
    on_run: Callable[[str, float | None], None] | None = None,
) -> RunCheck:
    """PAIRS pairs of the plain script and the script with ``config`` applied as `run`
    applies it. ``on_run(label, ms)``: told after each run (the progress display)."""
    check = RunCheck(trials_speedup=trials_speedup)
    if "batch-size" in config:
        check.skipped = "the batch size changes: a plain run's steps are not comparable"
        return check
    order = random.Random(settings.seed if settings.seed is not None else 0)
    for pair in range(PAIRS):
        sides = ["plain", "tuned"]
        order.shuffle(sides)
        got = run_pair(
            sides,
            lambda side, where: plain_run(settings, where, config if side == "tuned" else None),
            out_dir, pair, on_run,
        )  # fmt: skip
        if isinstance(got, str):
            check.error = got
            return check
        check.plain_ms.append(got["plain"])
        check.tuned_ms.append(got["tuned"])
    return check
