"""A/B probes: settings whose cost can only be known by switching them for a few steps.

Each probe applies to the user's process between steps, after the profiled window, and is
always switched back. The doctor turns the measured difference into a finding's saving:
measured on unprofiled steps, it needs no scaling from the profiled window
(doctor/pricing.py).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from torchpace.capture.loader_swap import LoaderSwap
from torchpace.facts.cpu_use import WORKER
from torchpace.facts.run import ProbeResult, ProcessState, RunFacts
from torchpace.knobs import fused_optimizer

# Steps timed with each setting (after its settling steps, Probe.settle): three
# each is enough for a median on a stable loop and keeps the probe short.
PROBE_STEPS = 3


@dataclass
class Probe:
    name: str
    apply: Callable[[bool], None]  # True: the switched setting; False: the user's own
    steps: int = PROBE_STEPS
    detail: str = ""
    # untimed steps at the start of each block, while the switched setting settles
    settle: int = 1
    # called once the probes are done, the user's setting back: what the probe added to the
    # user's objects (hooks) is taken away
    close: Callable[[], None] | None = None


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


FUSED_PROBE = fused_optimizer.KNOB.name  # the check reads its result by this name (TP313)


def fused_optimizer_probe(optimizers: list) -> Probe | None:
    """torch's optimizers with a fused step, whose script set neither ``fused`` nor
    ``foreach`` (tune's fused-optimizer knob leaves the others alone too), switched from
    their default step to ``fused=True`` by the knob's own switch, which moves each
    ``state['step']`` with the flag (the fused step on a GPU fails on a CPU counter; the
    default one would read a device counter with a sync a parameter). None when there is
    none to switch."""
    chosen = [o for o in optimizers if _fusable(o)]
    if not chosen:
        return None
    switch = _knob_switch(chosen)
    if switch is None:
        return None
    names = ", ".join(sorted({type(o).__name__ for o in chosen}))
    return Probe(FUSED_PROBE, switch, detail=f"{names}: fused=True instead of the default step")


def _fusable(optimizer) -> bool:
    cls = type(optimizer)
    if cls.__name__ not in fused_optimizer.FUSED or not cls.__module__.startswith("torch.optim"):
        return False
    groups = optimizer.param_groups
    if any(g.get("fused") is not None or g.get("foreach") is not None for g in groups):
        return False  # the script chose its step: not ours to switch
    if any(g.get("differentiable") or g.get("capturable") for g in groups):
        return False
    params = [p for g in groups for p in g["params"]]
    return bool(params) and not fused_optimizer._unsupported_devices(torch, params)


def _knob_switch(chosen: list) -> Callable[[bool], None] | None:
    """The fused-optimizer knob's switch for these optimizers: it switches the groups that
    run fused, so they are marked fused while it looks, then left as the script set them."""
    for o in chosen:
        for group in o.param_groups:
            group["fused"] = True
    try:
        made = fused_optimizer.KNOB.switch("fused", SimpleNamespace(optimizers=chosen))
    finally:
        for o in chosen:
            for group in o.param_groups:
                group["fused"] = None
    return made if callable(made) else None


BF16_PROBE = "autocast-bf16"  # the check reads its result by this name (TP314)


class _AutocastHooks:
    """bf16 autocast around each model's forward while ``on``, its outputs back in float32
    (as tune's amp knob makes them: the loss the script computes after the forward stays
    float32), by a pre-hook and a forward hook on the model: nothing of the user's model
    changes, and the hooks are removed once the probe is done."""

    def __init__(self, models: list):
        from torchpace.knobs.amp import _to_float32

        self.on = False
        self._to_float32 = _to_float32
        self._entered: list = []  # per call in flight: the autocast entered, or None
        # torch.autocast.__enter__ as torch defines it: the capture's flag of the script's
        # own autocast (hooks.py) must not count the probe's
        enter = torch.autocast.__enter__
        self._enter_autocast = getattr(enter, "__wrapped__", enter)
        self._handles = []
        for model in models:
            self._handles.append(model.register_forward_pre_hook(self._before))
            self._handles.append(model.register_forward_hook(self._after, always_call=True))

    def apply(self, switched: bool) -> None:
        self.on = switched

    def close(self) -> None:
        self.on = False
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _before(self, module, args) -> None:
        if not self.on:
            self._entered.append(None)
            return
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        self._enter_autocast(autocast)
        self._entered.append(autocast)

    def _after(self, module, args, out):
        autocast = self._entered.pop() if self._entered else None
        if autocast is None:
            return None
        autocast.__exit__(None, None, None)
        return self._to_float32(torch, out, torch.bfloat16)


def cpu_bf16_probe(
    state: ProcessState | None, facts: RunFacts, models: list, continues: bool
) -> Probe | None:
    """bf16 autocast around the trained models' forward for a few steps, on a CPU that
    computes bf16 natively (AVX512-BF16, AMX): what fp32 costs there is only known by
    measuring (1.2x faster on one such CPU, 1.2-2x slower on another; 40x slower where bf16
    is emulated, where no probe runs). It prices TP314. None where it does not apply: a GPU
    run, a CPU without native bf16, a script that uses autocast itself, models not in
    float32, a run that goes on training after the capture (``continues``: its steps
    are the user's, and bf16 steps would change their numerics), or a rank of a
    data-parallel job (each rank would switch its own forward; tune's amp knob measures the
    job as a whole)."""
    if state is None or state.device != "cpu" or not state.bf16_native or continues:
        return None
    if _data_parallel():
        return None
    if (facts.calls is not None and facts.calls.autocast) or not models:
        return None
    if any(
        p.is_floating_point() and p.dtype != torch.float32
        for model in models
        for p in model.parameters()
    ):
        return None  # already in reduced precision, or float64 on purpose
    hooks = _AutocastHooks(models)
    return Probe(
        BF16_PROBE,
        hooks.apply,
        detail="torch.autocast('cpu', dtype=torch.bfloat16) around the model's forward",
        close=hooks.close,
    )


def _data_parallel() -> bool:
    distributed = torch.distributed
    return (
        distributed.is_available()
        and distributed.is_initialized()
        and distributed.get_world_size() > 1
    )


def _fewer_workers_probe(swap: LoaderSwap, loader: int, workers: int, own: int) -> Probe:
    def apply(switched: bool) -> None:
        swap.switch(loader if switched else None, workers)

    # Two settling steps: the user's workers finish the batches they were building (and
    # take the cores while they do) before they sleep; a stand-in with workers starts them.
    return Probe(
        FEWER_WORKERS,
        apply,
        detail=f"num_workers={workers} instead of {own}",
        settle=2,
    )


FEWER_WORKERS = "fewer-workers"
# The workers' CPU time in the window, as a share of the usable cores, from which their
# crowding is worth a probe's steps (the doctor's finding has its own, higher floor).
PROBE_WORKER_SHARE = 0.05


def crowded_loader(facts: RunFacts) -> tuple[int, int, int] | None:
    """(the loader's index, the workers to try, its own) when the profiled window saw loader
    workers and compute threads outnumber the usable cores while the workers took a share
    of them; the workers tried are those that fit beside the compute threads."""
    state, cpu = facts.process, facts.window_cpu
    if state is None or cpu is None or not state.usable_cpus or not facts.loaders:
        return None
    workers = cpu.of_role(WORKER)
    share = cpu.share_of_cores(workers)
    if share is None or share < PROBE_WORKER_SHARE:
        return None
    if len(workers) + state.intra_op_threads <= state.usable_cpus:
        return None
    index = max(range(len(facts.loaders)), key=lambda i: facts.loaders[i].batches_seen)
    own = facts.loaders[index].num_workers
    fit = max(0, state.usable_cpus - state.intra_op_threads)
    return (index, fit, own) if fit < own else None


def plan_probes(
    state: ProcessState | None, crowding: tuple[LoaderSwap, int, int, int] | None = None
) -> list[Probe]:
    """``crowding``: (the swap, the loader's index, the workers to try, its own workers)
    when the window saw loader workers crowd the cores (capture/session.py decides)."""
    if state is None:
        return []
    probes = []
    if crowding is not None:
        probes.append(_fewer_workers_probe(*crowding))
    if state.anomaly_detection:
        probes.append(_anomaly_probe())
    if state.usable_cpus and state.intra_op_threads > state.usable_cpus:
        probes.append(_threads_probe(state.intra_op_threads, state.usable_cpus))
    return probes


def optimizer_probes(state: ProcessState | None, optimizers: list) -> list[Probe]:
    """The fused-optimizer probe for the script's optimizers (capture/runtime.py), on a GPU
    run only: it prices TP313, a GPU finding; on a CPU its steps would price nothing."""
    if state is None or state.device != "cuda":
        return []
    fused = fused_optimizer_probe(optimizers)
    return [fused] if fused is not None else []


class ProbeRunner:
    """The steps after the window: each probe's blocks, switched then as the user set it.

    In blocks, not step by step: the first steps after a switch pay for the switch itself
    (a thread pool resized while the old threads still spin cost 20x a step here), so each
    block starts with untimed settling steps (each probe's ``settle``).
    """

    def __init__(self, probes: list[Probe]):
        self.probes = probes
        self.plan: list[tuple[str, bool]] = []
        for probe in probes:
            for switched in (True, False):
                self.plan += [(probe.name, switched)] * (probe.settle + probe.steps)
        self.times: dict[tuple[str, bool], list[float]] = {}
        self._steps_in_block = 0
        if self.plan:
            self._apply(self.plan[0])

    @property
    def pending(self) -> bool:
        return bool(self.plan)

    def record(self, wall_ms: float) -> None:
        entry = self.plan[0]
        if self._steps_in_block >= self._settle(entry[0]):
            self.times.setdefault(entry, []).append(wall_ms)

    def advance(self) -> bool:
        """Moves to the next planned step; False when the plan is done."""
        done = self.plan.pop(0)
        same = bool(self.plan) and self.plan[0] == done
        self._steps_in_block = self._steps_in_block + 1 if same else 0
        if self.plan:
            self._apply(self.plan[0])
        return bool(self.plan)

    def _settle(self, name: str) -> int:
        return next(p.settle for p in self.probes if p.name == name)

    def _apply(self, step: tuple[str, bool]) -> None:
        name, switched = step
        for probe in self.probes:
            probe.apply(switched and probe.name == name)

    def results(self) -> list[ProbeResult]:
        out = []
        for probe in self.probes:
            probe.apply(False)  # the user's own setting back
            if probe.close is not None:
                probe.close()
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
