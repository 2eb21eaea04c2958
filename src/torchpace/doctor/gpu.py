"""What the device did in one step: busy time, idle gaps, copies, syncs and tensor cores.

Pure functions over the trace model's GPU work and runtime calls; times in microseconds.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from torchpace.trace.model import SYNC_RUNTIME_CALLS, GpuOp, Span

# A kernel shorter than this does too little work to hide its own launch (a launch costs
# about 5-10 us of CPU time): a step made of many of them is bound by launches, not math.
TINY_KERNEL_US = 10.0
# Gaps between consecutive device ops shorter than this are the device waiting for the CPU
# to launch the next one; longer gaps are something else (data loading, a sync, Python).
LAUNCH_GAP_US = 50.0
# Kernel names of matrix multiplications and convolutions (cuBLAS, cuDNN, CUTLASS families).
MATMUL_CONV_KERNEL = re.compile(
    r"gemm|scudnn|hcudnn|conv|dgrad|wgrad|fprop|winograd|xmma|cutlass|fft2d", re.IGNORECASE
)
# Markers of tensor-core kernels: the MMA instruction shapes (884, 1688, 16816), hmma/wgmma,
# CUTLASS "tensorop", and reduced-precision input types in the kernel name.
TENSOR_CORE_KERNEL = re.compile(
    r"884|1688|16816|8816|hmma|wgmma|tensorop|tf32|bf16|fp16|f16f16|_h\d*gemm|hcudnn",
    re.IGNORECASE,
)

# TF32 among the tensor-core matmuls: fp32 storage, TF32 math (cuBLAS/cuDNN "tf32" names,
# CUTLASS's single-precision tensor-op shapes "s1688"/"s16816"). On sm80+ the TF32 rate is
# half the bf16/fp16 one.
TF32_KERNEL = re.compile(r"tf32|_s1688|_s16816|s1688gemm|s16816gemm", re.IGNORECASE)
# cuDNN's layout transposes: an NCHW tensor turned NHWC for a conv kernel, and back. With
# channels_last memory format the convs take the tensors as they are.
LAYOUT_TRANSPOSE_KERNEL = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", re.IGNORECASE)
# Normalisation kernels (cuDNN batch norm, ATen batch/layer/group norm).
NORM_KERNEL = re.compile(
    r"bn_fw|bn_bw|batch_norm|batchnorm|layer_norm|layernorm|group_norm|groupnorm|welford",
    re.IGNORECASE,
)
# ATen's elementwise and reduction kernels (activations, residual adds, losses); the
# optimizer's multi-tensor kernels are not among them (autocast leaves the optimizer fp32).
ELEMENTWISE_KERNEL = re.compile(r"elementwise_kernel|reduce_kernel", re.IGNORECASE)
# A kernel templated on float (not half, bfloat16 or an integer type) moves fp32 data.
FLOAT_KERNEL = re.compile(r"<float\b|\bfloat,|\(float\)|float2", re.IGNORECASE)
HALF_KERNEL = re.compile(r"half|bfloat16|bf16|fp16|__nv_bfloat|c10::Half|c10::BFloat16", re.I)


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the (start, end) intervals, overlaps counted once."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def launch_gaps_us(ops: list[GpuOp]) -> float:
    """Sum of the short gaps between consecutive device ops: time spent waiting on launches."""
    total, last_end = 0.0, None
    for op in sorted(ops, key=lambda o: o.ts):
        if last_end is not None and 0 < op.ts - last_end < LAUNCH_GAP_US:
            total += op.ts - last_end
        last_end = op.end if last_end is None else max(last_end, op.end)
    return total


@dataclass
class CopyStats:
    """Host-to-device copies of one step (and device-to-host ones from pageable memory)."""

    h2d_ms: float = 0.0  # device time of the copies
    h2d_bytes: float = 0.0
    h2d_pageable_bytes: float = 0.0
    h2d_pinned_bytes: float = 0.0
    h2d_pageable_ms: float = 0.0
    h2d_pageable_host_ms: float = 0.0  # host time blocked in pageable copies
    h2d_count: float = 0.0
    d2h_pageable_count: float = 0.0


def copy_stats(ops: list[GpuOp], runtime_by_corr: dict[int, Span]) -> CopyStats:
    """Host-to-device copies: device time, bytes, pageable vs pinned, host time blocked."""
    stats = CopyStats()
    for op in ops:
        if op.kind != "memcpy":
            continue
        if op.direction == "DtoH" and op.host_memory == "Pageable":
            stats.d2h_pageable_count += 1
        if op.direction != "HtoD":
            continue
        stats.h2d_count += 1
        stats.h2d_ms += op.dur / 1000
        stats.h2d_bytes += op.bytes
        if op.host_memory == "Pinned":
            stats.h2d_pinned_bytes += op.bytes
        elif op.host_memory == "Pageable":
            stats.h2d_pageable_bytes += op.bytes
            stats.h2d_pageable_ms += op.dur / 1000
            call = runtime_by_corr.get(op.correlation)
            # A pageable copy blocks the calling thread for its whole duration (the driver
            # stages it through a pinned buffer): that host time is the cost pinning removes.
            stats.h2d_pageable_host_ms += (call.dur if call else op.dur) / 1000
    return stats


@dataclass
class SyncStats:
    """Host syncs of one step; ``copy_*`` are those that finish a blocking copy."""

    syncs: float = 0.0
    sync_wait_ms: float = 0.0  # host time blocked
    sync_idle_ms: float = 0.0  # device idle after them
    copy_syncs: float = 0.0
    copy_sync_wait_ms: float = 0.0
    copy_sync_idle_ms: float = 0.0

    def add(self, after_copy: bool, wait_ms: float, idle_ms: float) -> None:
        if after_copy:
            self.copy_syncs += 1
            self.copy_sync_wait_ms += wait_ms
            self.copy_sync_idle_ms += idle_ms
        else:
            self.syncs += 1
            self.sync_wait_ms += wait_ms
            self.sync_idle_ms += idle_ms


def sync_stats(
    runtime: list[Span], ops: list[GpuOp], copy_corrs: set[int], step_end: float
) -> SyncStats:
    """Host syncs in a step: count, host time blocked, and device idle each one caused.

    A sync drains the device's queue; until the CPU launches again the device idles. That
    idle, from the sync's return to the next device op (capped at the step's end), is what
    removing the sync saves. Syncs that finish a blocking host-to-device copy are counted
    apart (``copy_syncs``): they belong to the copy findings, not to the sync finding.
    """
    starts = sorted(op.ts for op in ops)
    calls = sorted(runtime, key=lambda s: s.ts)
    out = SyncStats()
    previous: dict = {}  # thread -> its previous runtime call
    for call in calls:
        if call.name in SYNC_RUNTIME_CALLS:
            before = previous.get(call.tid)
            after_copy = before is not None and before.args.get("correlation") in copy_corrs
            i = bisect.bisect_left(starts, call.end)
            next_start = starts[i] if i < len(starts) else step_end
            idle_us = max(0.0, min(next_start, step_end) - call.end)
            out.add(after_copy, call.dur / 1000, idle_us / 1000)
        previous[call.tid] = call
    return out


@dataclass(frozen=True)
class KernelStats:
    kernels: float
    tiny_kernels: float  # shorter than TINY_KERNEL_US
    kernel_ms: float
    matmul_ms: float  # matmul and conv kernels
    matmul_tensor_core_ms: float  # ...of which on tensor cores
    conv_kernels: float
    matmul_tf32_ms: float  # ...of the tensor-core ones, in TF32
    layout_transpose_ms: float  # cuDNN's NCHW<->NHWC transposes
    fp32_norm_ms: float  # normalisation kernels on fp32 tensors
    fp32_elementwise_ms: float  # elementwise/reduction kernels on fp32 tensors


def kernel_stats(ops: list[GpuOp]) -> KernelStats:
    kernels = [op for op in ops if op.kind == "kernel"]
    matmul = [k for k in kernels if MATMUL_CONV_KERNEL.search(k.name)]
    tensor_core = [k for k in matmul if TENSOR_CORE_KERNEL.search(k.name)]
    fp32 = [k for k in kernels if _fp32(k.name)]
    layout = [k for k in kernels if LAYOUT_TRANSPOSE_KERNEL.search(k.name)]
    norm = [k for k in fp32 if NORM_KERNEL.search(k.name)]
    elementwise = [k for k in fp32 if ELEMENTWISE_KERNEL.search(k.name)]
    return KernelStats(
        kernels=float(len(kernels)),
        tiny_kernels=float(sum(1 for k in kernels if k.dur < TINY_KERNEL_US)),
        kernel_ms=_ms(kernels),
        matmul_ms=_ms(matmul),
        matmul_tensor_core_ms=_ms(tensor_core),
        conv_kernels=float(sum(1 for k in matmul if "gemm" not in k.name.lower())),
        matmul_tf32_ms=_ms([k for k in tensor_core if TF32_KERNEL.search(k.name)]),
        layout_transpose_ms=_ms(layout),
        fp32_norm_ms=_ms(norm),
        fp32_elementwise_ms=_ms(elementwise),
    )


def _ms(kernels: list[GpuOp]) -> float:
    return sum(k.dur for k in kernels) / 1000


def _fp32(name: str) -> bool:
    return bool(FLOAT_KERNEL.search(name)) and not HALF_KERNEL.search(name)
