"""The doctor's checks, one module per family of problem codes. Each module has ``CHECKS``
(instances whose thresholds are class attributes) and ``run(profile) -> list[Finding]``."""

from torchpace.doctor.checks import communication, compute, data, environment, memory, syncs

FAMILIES = [data, syncs, compute, memory, environment, communication]


def run_all(profile) -> list:
    return [f for family in FAMILIES for f in family.run(profile)]
