"""A/B probes: settings whose cost can only be known by switching them for a few steps.

Each probe applies to the user's process between steps, after the profiled window, and is
always switched back. The doctor turns the measured difference into a finding's saving.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from torchpace.facts.run import ProbeResult, ProcessState

# Steps timed with each setting (after a settling step, SETTLE_STEPS below): three
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


# Untimed steps at the start of each probe block, while a switched setting settles.
SETTLE_STEPS = 1


class ProbeRunner:
    """The steps after the window: each probe's blocks, switched then as the user set it.

    In blocks, not step by step: the first steps after a switch pay for the switch itself
    (a thread pool resized while the old threads still spin cost 20x a step here), so each
    block starts with untimed settling steps.
    """

    def __init__(self, probes: list[Probe]):
        self.probes = probes
        self.plan: list[tuple[str, bool]] = []
        for probe in probes:
            for switched in (True, False):
                self.plan += [(probe.name, switched)] * (SETTLE_STEPS + probe.steps)
        self.times: dict[tuple[str, bool], list[float]] = {}
        self._steps_in_block = 0
        if self.plan:
            self._apply(self.plan[0])

    @property
    def pending(self) -> bool:
        return bool(self.plan)

    def record(self, wall_ms: float) -> None:
        entry = self.plan[0]
        if self._steps_in_block >= SETTLE_STEPS:
            self.times.setdefault(entry, []).append(wall_ms)

    def advance(self) -> bool:
        """Moves to the next planned step; False when the plan is done."""
        done = self.plan.pop(0)
        same = bool(self.plan) and self.plan[0] == done
        self._steps_in_block = self._steps_in_block + 1 if same else 0
        if self.plan:
            self._apply(self.plan[0])
        return bool(self.plan)

    def _apply(self, step: tuple[str, bool]) -> None:
        name, switched = step
        for probe in self.probes:
            probe.apply(switched and probe.name == name)

    def results(self) -> list[ProbeResult]:
        out = []
        for probe in self.probes:
            probe.apply(False)  # the user's own setting back
            on = self.times.get((probe.name, False), [])
            off = self.times.get((probe.name, True), [])
            if on and off:
                out.append(
                    ProbeResult(
                        probe.name,
                        round(statistics.median(on), 3),
                        round(statistics.median(off), 3),
                        min(len(on), len(off)),
                        probe.detail,
                    )
                )
        return out
