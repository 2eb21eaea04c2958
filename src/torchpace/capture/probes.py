"""A/B probes: settings whose cost can only be known by switching them for a few steps.

Each probe applies to the user's process between steps, after the profiled window, and is
always switched back. The doctor turns the measured difference into a finding's saving.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from torchpace.capture.facts import ProcessState

# Steps timed with each setting (after a settling step, see session.SETTLE_STEPS): three
# each is enough for a median on a stable loop and keeps the probe short.
PROBE_STEPS = 3


@dataclass
class Probe:
    name: str
    apply: Callable[[bool], None]  # True: the switched setting; False: the user's own
    steps: int = PROBE_STEPS
    detail: str = ""


def _anomaly_probe() -> Probe:
    original = torch.is_anomaly_enabled()
    check_nan = torch.is_anomaly_check_nan_enabled()

    def apply(switched: bool) -> None:
        if switched:
            torch.autograd.set_detect_anomaly(False)
        else:
            torch.autograd.set_detect_anomaly(original, check_nan=check_nan)

    return Probe("anomaly-detection-off", apply, detail="torch.autograd.set_detect_anomaly(False)")


def _threads_probe(user_threads: int, cores: int) -> Probe:
    def apply(switched: bool) -> None:
        torch.set_num_threads(cores if switched else user_threads)

    return Probe(
        "threads-to-cores",
        apply,
        detail=f"torch.set_num_threads({cores}) instead of {user_threads}",
    )


def plan_probes(state: ProcessState | None) -> list[Probe]:
    if state is None:
        return []
    probes = []
    if state.anomaly_detection:
        probes.append(_anomaly_probe())
    if state.usable_cpus and state.intra_op_threads > state.usable_cpus:
        probes.append(_threads_probe(state.intra_op_threads, state.usable_cpus))
    return probes
