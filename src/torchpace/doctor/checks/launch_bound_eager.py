"""TP310 launch-bound-eager: Many tiny kernels: launch overhead dominates."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class LaunchBoundEager(Check):
    """TP310: many tiny kernels/ops whose launch overhead outweighs their work.

    ## What it does

    Reports a step made of many tiny operations whose fixed cost (a kernel launch, a trip
    through the dispatcher) outweighs their arithmetic, which `torch.compile` would fuse.
    - GPU: at least 300 kernels per step with at least 60% of them under 10 µs. The estimated
      saving is the sum of the short gaps (< 50 µs) between consecutive device ops: the time the
      GPU waits for the CPU to launch the next kernel.
    - CPU: at least 100 top-level ops per step shorter than 20 µs (outside data loading) taking
      at least 30% of the step; the estimated saving is half their time (`FUSION_RECOVERABLE =
      0.5`: fusion removes the dispatch and memory round-trips, not the math).

    Both are host time, which the profiler inflates (each launch and op pays for its record):
    the saving is scaled with the step to the unprofiled one, keeping its share (docs/doctor.md,
    "Priced on the unprofiled step"). The host-work finding (GPU idle while the host runs
    Python, from `checks/gpu_idle.py`) has no saving and keeps its severity, at most medium.

    ## Why it matters

    A kernel launch costs 5-10 µs of CPU time; a pointwise kernel on a small tensor runs in 2-5
    µs. A model made of such ops keeps the GPU idle between kernels however fast the GPU is.
    Article 002's `torch.compile` step gained most on exactly such models.

    ## Example

    ```python
    def gelu_ln(x, w, b):                      # five small pointwise ops per call
        x = x * 0.5 * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x ** 3)))
        return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b)
    ```

    ## Use instead

    ```python
    model = torch.compile(model)               # fuses the pointwise chains into few kernels
    ```

    ## Fix safety

    Compilation takes seconds to minutes and must be paid back by the run's length; shapes that
    change trigger recompiles (mark them dynamic or pad). Numerics can differ in the last bits.
    `torchpace tune` measures the gain including compile time.
    """

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
