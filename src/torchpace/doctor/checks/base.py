"""What every check shares: the floors below which a cost is not worth reporting, and how to
tell a GPU run from a CPU-only one (on which nothing about GPUs is ever claimed)."""

from __future__ import annotations

from typing import ClassVar

from torchpace.doctor.finding import Finding
from torchpace.doctor.pricing import basis_of, priced_ms
from torchpace.doctor.profile import Profile


class Check:
    """A check reads a profile and returns findings of its one code; thresholds are class
    attributes. Like a lint rule (lint/rule.py), a check lives in a module of its own named
    after its code's catalog name, and its code's page is docs/codes/<code>.md."""

    code: ClassVar[str]  # the catalog code of every finding it makes

    # Savings below this are lost in step-to-step noise on any machine: not reported.
    MIN_SAVING_MS = 0.5
    # ...and below this share of the step they are not worth a user's attention first.
    # Skipped on traces without step markers, where the "step" is the whole trace.
    MIN_SHARE = 0.02

    def run(self, profile: Profile) -> list[Finding]:
        raise NotImplementedError

    def worth_reporting(self, profile: Profile, saving_ms: float, cost: str = "host") -> bool:
        """Both floors on the step the finding will be priced on (doctor/pricing.py): a
        saving of the profiled step made of ``cost``, put on the unprofiled step."""
        if not profile.step_ms:
            return saving_ms >= self.MIN_SAVING_MS
        basis = basis_of(profile)
        saving_ms = priced_ms(saving_ms, cost, profile.step_ms, basis)
        if saving_ms < self.MIN_SAVING_MS:
            return False
        if profile.synthetic_steps:
            return True
        return saving_ms / (basis.unprofiled_step_ms or profile.step_ms) >= self.MIN_SHARE


def gpu_run(profile: Profile) -> bool:
    """GPU findings need GPU work in the trace itself, not just a CUDA-capable machine."""
    return profile.has_gpu


def r(x: float, digits: int = 2) -> float:
    return round(float(x), digits)


def main_loader(profile: Profile):
    """The DataLoader that fed the loop: the one with the most batches seen."""
    if profile.facts is None or not profile.facts.loaders:
        return None
    return max(profile.facts.loaders, key=lambda lf: lf.batches_seen)
