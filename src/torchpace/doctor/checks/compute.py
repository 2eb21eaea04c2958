"""Compute and precision: TP304 (debug APIs), TP307 (fp32 on tensor cores), TP308 (cudnn
benchmark), TP310 (launch-bound eager), TP311 (fp32/TF32 where bf16 serves), TP312 (layout
transposes around NCHW convs), TP313 (launch-bound optimizer step), TP314 (fp32 on a CPU
with native bf16).

One module per check (the check and its code); this one lists the family."""

from __future__ import annotations

from torchpace.doctor.checks.cudnn_benchmark_off import CudnnBenchmarkOff
from torchpace.doctor.checks.debug_api_in_training import AnomalyDetectionOn
from torchpace.doctor.checks.fp32_matmul_on_tensor_cores import Fp32OnTensorCores
from torchpace.doctor.checks.fp32_on_bf16_cpu import Fp32OnBf16Cpu
from torchpace.doctor.checks.fp32_where_bf16_serves import ReducedPrecisionServes
from torchpace.doctor.checks.launch_bound_eager import LaunchBoundEager
from torchpace.doctor.checks.launch_bound_optimizer import LaunchBoundOptimizer
from torchpace.doctor.checks.layout_transposes import LayoutTransposes
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

CHECKS = [
    AnomalyDetectionOn(),
    Fp32OnTensorCores(),
    CudnnBenchmarkOff(),
    LaunchBoundEager(),
    ReducedPrecisionServes(),
    LayoutTransposes(),
    LaunchBoundOptimizer(),
    Fp32OnBf16Cpu(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
