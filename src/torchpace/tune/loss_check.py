"""The loss must still behave: a faster configuration that trains differently is no win.

Every trial runs with the same seed, so the same data in the same order reaches the same
initial weights: the measured steps' losses are comparable with the baseline's. A trial is
rejected when a loss is NaN or infinite, or when the mean over its measured steps departs
from the baseline's by more than the tolerance (relative, default 10%: bf16 autocast moves
an early loss by well under 1%, a broken loss by far more).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

DEFAULT_TOLERANCE = 0.10


@dataclass(frozen=True)
class LossVerdict:
    ok: bool
    reason: str
    mean: float | None = None
    baseline_mean: float | None = None

    @property
    def deviation_pct(self) -> float | None:
        if self.mean is None or not self.baseline_mean:
            return None
        return round(100 * (self.mean - self.baseline_mean) / abs(self.baseline_mean), 2)


def check_loss(losses: list[float], baseline: list[float], tolerance: float) -> LossVerdict:
    if not baseline:
        return LossVerdict(True, "not checked: the baseline showed no scalar loss to compare")
    base = statistics.fmean(baseline)
    bad = [x for x in losses if not math.isfinite(x)]
    if bad:
        return LossVerdict(False, f"the loss became {bad[0]} ({len(bad)} of {len(losses)} steps)")
    if not losses:
        return LossVerdict(False, "no loss was seen in the measured steps", None, base)
    mean = statistics.fmean(losses)
    verdict = LossVerdict(True, "", mean, base)
    if abs(mean - base) > tolerance * abs(base):
        return LossVerdict(
            False,
            f"mean loss {mean:.4g} vs the baseline's {base:.4g} ({verdict.deviation_pct:+.1f}%, "
            f"beyond the {100 * tolerance:.0f}% tolerance: --loss-tolerance)",
            mean,
            base,
        )
    return LossVerdict(True, f"mean loss {mean:.4g} ({verdict.deviation_pct:+.2f}%)", mean, base)
