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
    ``fused=True`` for a few unprofiled steps (capture/probes.py): the median step with the
    default update less that with the fused one. Without a probe it is estimated as the
    optimizer phase's host time above its device time (once fused, the update is bound by
    its memory traffic, which the present kernels already do no faster), host time that the
    profiler inflates and doctor/pricing.py scales to the unprofiled step. On an H100 loop
    the estimate read 20.6 ms of a profiled step where fused saved 1.67 ms of 14.
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
