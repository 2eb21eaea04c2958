"""TP313 launch-bound-optimizer: Optimizer step bound by kernel launches: not fused."""

from __future__ import annotations

from torchpace.doctor.checks._compute import probe_saving
from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class LaunchBoundOptimizer(Check):
    """TP313: the optimizer step launches many small kernels and its phase is bound by the
    launches, not by the device: a fused (or multi-tensor) implementation does the same
    update in a few kernels.

    The saving is measured where the capture's A/B probe switched the optimizers to
    ``fused=True`` for a few unprofiled steps (capture/probes.py); without a probe it is
    estimated as the optimizer phase's host time above its device time (once fused, the update
    is bound by its memory traffic, which the present kernels already do no faster).

    ## What it does

    On GPU runs, measures the optimizer phase of each step (the `Optimizer.step#`/`zero_grad#`
    spans on the loop's thread) and the device work launched from inside it (kernels whose
    launch call falls in those spans, matched by correlation id): how many kernels, and how long
    they keep the GPU busy. It fires when the phase takes at least 10% of the step, launches at
    least 5 kernels, and keeps the device busy less than half of its own time (the host's
    launches and Python, not the device, pace it), unless the optimizer was built with
    `fused=True`.

    ## How the saving is measured, or estimated

    **Measured** on a GPU run: after the profiled window the capture switches the optimizers to
    `fused=True` for a few unprofiled steps and back (`capture/probes.py`, probe
    `fused-optimizer`: a settling step and 3 timed steps each way, in the same process), moving
    each parameter's `state['step']` to the device while fused runs and back to where the
    default step keeps it (the fused step fails on a CPU counter; the default one would read a
    device counter with a sync a parameter): the switch is tune's `fused-optimizer` knob's own
    (`switch()`), which moves the counters with the flag. The saving is the median step with
    the default update less the median with the fused one (evidence `step_ms_default`,
    `step_ms_fused`), of the unprofiled step; a probe that gains less than the floors (0.5 ms,
    2%) leaves no finding. Only torch's own SGD, Adam, AdamW and Adagrad whose script set
    neither `fused` nor `foreach` are switched (as the knob does).

    **Estimated** where no probe ran (a trace alone, a script that ended in the window):
    `saving = optimizer phase − its kernels' busy time`. A fused update (`fused=True`: one
    kernel per device and dtype for all parameters) is bound by its memory traffic, which the
    present kernels already move no faster; what goes is the per-parameter (or per-group, with
    `foreach`) launching and Python. The fix offered is `fused=True` where torch has it (SGD,
    Adam, AdamW, Adagrad), else `foreach=True` or compiling the step; `torchpace tune` measures
    it with the `fused-optimizer` knob.

    On an H100, a deep stack of tiny layers spent a third of its step in Adam; fused Adam
    measured 17% faster (compile 22%, both 36%): TP310 (compile) and TP313 are then the first
    two findings. That estimate is host time, which the profiler inflates: it is scaled with the
    step to the unprofiled one (docs/doctor.md, "Priced on the unprofiled step"), and even so
    it overstates: on the H100 syncs loop of issue 35 it read 20.6 ms of the profiled step
    where fused Adam saved 1.67 ms of a 14 ms step; the probe measures what fused saves. On
    pytorch/examples dcgan (`../shared/traces/h100_dcgan.json.gz`, two Adams
    per iteration, foreach by default) the optimizer phase is 4.4 ms of a 24.9 ms step for 0.24
    ms of device work: 4.15 ms estimated.

    ## Example

    ```python
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ```

    ## Use instead

    ```python
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
    ```

    ## Fix safety

    Same arithmetic in another order: parameters can differ in the last bits. `fused=True` needs
    every parameter on a supported device and floating dtype; `torchpace tune` checks the loss
    before keeping it.
    """

    code = "TP313"

    MIN_PHASE_SHARE = 0.10  # the optimizer's share of the step
    # per step: a fused update is one or two kernels per device and dtype; a foreach one
    # (torch's default on CUDA) a handful per parameter group, whose Python still costs
    MIN_KERNELS = 5
    # The device is busy less than this share of the phase: the host's launches pace it.
    MAX_BUSY_SHARE = 0.5
    # torch's optimizers with a fused CUDA implementation, and with a foreach one (as in
    # tune's fused-optimizer knob); another optimizer (Shampoo, an EMA wrapper) has neither
    FUSED = ("SGD", "Adam", "AdamW", "Adagrad")
    FOREACH = (*FUSED, "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop")

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile) or not profile.step_ms:
            return []
        m = profile.median
        phase, busy = m.optimizer_ms, m.optimizer_kernel_ms
        if phase / profile.step_ms < self.MIN_PHASE_SHARE:
            return []
        if m.optimizer_kernels < self.MIN_KERNELS:
            return []
        if busy >= self.MAX_BUSY_SHARE * phase:
            return []
        details = profile.facts.optimizer_details if profile.facts else []
        if any(o.fused for o in details):
            return []  # already fused
        saving, step, cost = phase - busy, profile.step_ms, "host"
        # capture/probes.py's fused probe, named after the knob (no torch in the doctor)
        measured, probe = probe_saving(profile, "fused-optimizer")
        if probe is not None:
            if measured < self.MIN_SAVING_MS or measured < self.MIN_SHARE * probe.baseline_ms:
                return []  # measured: fused gains nothing here
            saving, step, cost = measured, probe.baseline_ms, "unprofiled"
        elif not self.worth_reporting(profile, saving):
            return []
        seen = profile.facts.optimizers if profile.facts else profile.optimizer_classes
        names = sorted({o.class_name for o in details} or set(seen))
        if not names or not all(n in self.FOREACH for n in names):
            return []  # not torch's own optimizers: no fused or foreach switch to offer
        evidence = {
            "optimizer_ms": r(phase),
            "optimizer_pct_of_step": r(100 * phase / profile.step_ms, 1),
            "optimizer_kernels_per_step": r(m.optimizer_kernels, 0),
            "optimizer_gpu_busy_ms": r(busy),
        }
        if probe is not None:
            evidence |= {
                "step_ms_default": r(probe.baseline_ms),
                "step_ms_fused": r(probe.probe_ms),
                "probe_steps": probe.steps,
            }
        evidence["optimizers"] = ", ".join(names)
        fusable = any(n in self.FUSED for n in names)
        fix = (
            "torch.optim.Adam(..., fused=True) (also SGD, AdamW, Adagrad): one kernel per "
            "device and dtype for the whole update"
            if fusable
            else "foreach=True on the optimizer (multi-tensor kernels), or torch.compile the "
            "optimizer step"
        )
        return [
            Finding(
                "TP313",
                evidence=evidence,
                saving_ms=saving,
                step_ms=step,
                cost=cost,
                location=details[0].location if details else None,
                knob="fused-optimizer",
                detail=f"the optimizer step takes {100 * phase / profile.step_ms:.0f}% of the "
                f"step launching {m.optimizer_kernels:.0f} kernels that keep the GPU busy "
                f"{busy:.1f} of its {phase:.1f} ms",
                fix=fix,
                notes=[_saving_note(probe)],
            )
        ]


def _saving_note(probe) -> str:
    if probe is not None:
        return (
            f"saving measured: the optimizers switched to fused=True for {probe.steps} "
            "unprofiled steps against as many with their default step"
        )
    return (
        "saving: the optimizer phase's time above its kernels' busy time (a fused update is "
        "bound by its memory traffic, which these kernels already move); no probe ran"
    )
