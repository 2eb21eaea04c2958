"""The doctor's checks, listed by family of problem codes. Each family module has ``CHECKS``
(instances whose thresholds are class attributes) and ``run(profile) -> list[Finding]``; each
check is a module of its own named after its code (dataloader_without_workers.py: TP101),
as lint's rules are; what a family's checks share is in _<family>.py."""

from torchpace.doctor.checks import communication, compute, data, environment, memory, syncs

FAMILIES = [data, syncs, compute, memory, environment, communication]


def run_all(profile) -> list:
    return [f for family in FAMILIES for f in family.run(profile)]
