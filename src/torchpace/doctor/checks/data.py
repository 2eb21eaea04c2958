"""Data loading and host-to-device copies: TP101, TP102, TP103, TP104, TP106, TP107.

One module per check (the check and its code); this one lists the family."""

from __future__ import annotations

from torchpace.doctor.checks.blocking_host_to_device_copy import BlockingCopies
from torchpace.doctor.checks.dataloader_without_workers import DataLoaderWithoutWorkers
from torchpace.doctor.checks.device_underfilled import DeviceUnderfilled
from torchpace.doctor.checks.float_input_transfer import FloatInputTransfer
from torchpace.doctor.checks.pageable_host_to_device_copy import PageableCopies
from torchpace.doctor.checks.workers_crowd_cores import WorkersCrowdCores
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

CHECKS = [
    DataLoaderWithoutWorkers(),
    PageableCopies(),
    BlockingCopies(),
    FloatInputTransfer(),
    DeviceUnderfilled(),
    WorkersCrowdCores(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
