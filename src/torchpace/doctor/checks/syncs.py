"""CPU-GPU synchronisation: TP201. GPU runs only: on a CPU there is nothing to wait for.

One module per check (the check and its code); this one lists the family."""

from __future__ import annotations

from torchpace.doctor.checks.sync_in_training_loop import SyncInTrainingLoop
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

CHECKS = [SyncInTrainingLoop()]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
