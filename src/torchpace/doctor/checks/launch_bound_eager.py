"""TP310 launch-bound-eager: Many tiny kernels: launch overhead dominates."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class LaunchBoundEager(Check):
    """TP310: many tiny kernels/ops whose launch overhead outweighs their work."""

    code = "TP310"

    # GPU: at least this many kernels per step, most of them tiny, before calling it
    # launch-bound; a ResNet step is ~900 kernels with a third tiny and is not.
    MIN_KERNELS = 300
    MIN_TINY_KERNEL_SHARE = 0.6
    # CPU: tiny top-level ops (see steps.TINY_CPU_OP_US) taking this share of the step.
    MIN_TINY_CPU_SHARE = 0.30
    MIN_TINY_CPU_OPS = 100
    # Share of tiny ops' time torch.compile removes by fusing them (dispatch and memory
    # round-trips go, the arithmetic stays).
    FUSION_RECOVERABLE = 0.5

    def run(self, profile: Profile) -> list[Finding]:
        step = profile.step_ms
        if not step:
            return []
        if gpu_run(profile):
            kernels, tiny = profile.median.kernels, profile.median.tiny_kernels
            saving = profile.median.launch_gap_ms
            if kernels < self.MIN_KERNELS or tiny / kernels < self.MIN_TINY_KERNEL_SHARE:
                return []
            evidence = {
                "kernels_per_step": r(kernels, 0),
                "tiny_kernel_pct": r(100 * tiny / kernels, 1),
                "launch_gaps_ms": r(saving),
            }
        else:
            ops, tiny_ms = profile.median.tiny_cpu_ops, profile.median.tiny_cpu_ops_ms
            if ops < self.MIN_TINY_CPU_OPS or tiny_ms / step < self.MIN_TINY_CPU_SHARE:
                return []
            saving = tiny_ms * self.FUSION_RECOVERABLE
            evidence = {"tiny_ops_per_step": r(ops, 0), "tiny_ops_ms": r(tiny_ms)}
        if not self.worth_reporting(profile, saving):
            return []
        return [
            Finding(
                "TP310",
                evidence=evidence,
                saving_ms=saving,
                step_ms=step,
                knob="compile",
                detail="the step is made of many tiny ops: launch/dispatch overhead dominates",
                fix="model = torch.compile(model) (pays back its compile time within a few "
                "hundred steps when shapes are fixed)",
            )
        ]
