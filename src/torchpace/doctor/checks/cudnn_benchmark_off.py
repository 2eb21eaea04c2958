"""TP308 cudnn-benchmark-off: cudnn.benchmark off for fixed-shape convs."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class CudnnBenchmarkOff(Check):
    """TP308: convolutions on CUDA with torch.backends.cudnn.benchmark off."""

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
