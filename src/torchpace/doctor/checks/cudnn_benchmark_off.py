"""TP308 cudnn-benchmark-off: cudnn.benchmark off for fixed-shape convs."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class CudnnBenchmarkOff(Check):
    """TP308: convolutions on CUDA with torch.backends.cudnn.benchmark off.

    ## What it does

    Reports a run whose model does convolutions on CUDA (convolution ops in the trace and conv
    kernels on the device) while `torch.backends.cudnn.benchmark` is `False` and
    `cudnn.deterministic` is not set. The flag values come from the captured process state (run
    facts), so this check needs a `torchpace doctor script.py` run, not only a trace.

    ## Why it matters

    With benchmark off, cuDNN picks each convolution's algorithm by heuristics; with it on, it
    times the candidates once per input shape and keeps the fastest, which for fixed shapes is
    often a double-digit percentage faster on conv-heavy models. The doctor does not guess the
    size of that gain: `torchpace tune` measures it.

    ## Example

    ```python
    model = torchvision.models.resnet50().cuda()
    ```

    ## Use instead

    ```python
    torch.backends.cudnn.benchmark = True       # input shapes fixed from step to step
    model = torchvision.models.resnet50().cuda()
    ```

    ## Fix safety

    Safe for fixed shapes. With shapes that change every step (variable-length inputs), each new
    shape is re-tuned and the run gets slower. It conflicts with `cudnn.deterministic = True`
    (the doctor stays silent then).
    """

    code = "TP308"

    def run(self, profile: Profile) -> list[Finding]:
        state = profile.process
        if state is None or state.cudnn_benchmark is not False or state.cudnn_deterministic:
            return []
        if not gpu_run(profile) or not profile.has_convs:
            return []
        return [
            Finding(
                "TP308",
                evidence={
                    "cudnn_benchmark": "off",
                    "conv_kernels_per_step": r(profile.median.conv_kernels, 0),
                },
                severity="low",
                knob="cudnn-benchmark",
                detail="cuDNN picks conv algorithms by heuristics instead of timing them",
                fix="torch.backends.cudnn.benchmark = True when input shapes are fixed",
                notes=[
                    "the saving is not estimated: `torchpace tune` measures it; it re-tunes "
                    "on every new input shape"
                ],
            )
        ]
