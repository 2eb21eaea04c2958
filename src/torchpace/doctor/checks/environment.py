"""Distributed wrappers (TP501, TP503), communication-bound GPU ranks (TP506) and the
process environment (TP601).

One module per check (the check and its code); this one lists the family."""

from __future__ import annotations

from torchpace.doctor.checks.communication_bound import CommunicationBound
from torchpace.doctor.checks.data_parallel import DataParallelUsed
from torchpace.doctor.checks.find_unused_parameters import FindUnusedParameters
from torchpace.doctor.checks.thread_oversubscription import ThreadOversubscription
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

CHECKS = [
    DataParallelUsed(),
    FindUnusedParameters(),
    CommunicationBound(),
    ThreadOversubscription(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
