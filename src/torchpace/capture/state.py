"""The process facts that change speed, read inside the user's process at the window start."""

from __future__ import annotations

import os

import torch

from torchpace.env.cpu import read_cpu_facts
from torchpace.env.process import allocator_from_ld_preload, thread_env
from torchpace.facts.run import ProcessState


def _fallback_device() -> str:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return "cuda"
    return "cpu"


def read_process_state(device: str | None) -> ProcessState:
    """``device``: where the stepped optimizer's parameters live, when one has stepped."""
    cuda = torch.cuda.is_available()
    cudnn = torch.backends.cudnn
    cpu = read_cpu_facts()
    return ProcessState(
        device=device or _fallback_device(),
        cuda_available=cuda,
        cuda_total_memory_bytes=torch.cuda.get_device_properties(0).total_memory if cuda else None,
        anomaly_detection=torch.is_anomaly_enabled(),
        grad_enabled=torch.is_grad_enabled(),
        cudnn_benchmark=bool(cudnn.benchmark) if cudnn.is_available() else None,
        cudnn_deterministic=bool(cudnn.deterministic) if cudnn.is_available() else None,
        deterministic_algorithms=torch.are_deterministic_algorithms_enabled(),
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32 if cuda else None,
        tf32_cudnn=bool(cudnn.allow_tf32) if cuda else None,
        intra_op_threads=torch.get_num_threads(),
        inter_op_threads=torch.get_num_interop_threads(),
        usable_cpus=cpu.usable_cpus,
        physical_cores=cpu.physical_cores,
        thread_env=thread_env(dict(os.environ)),
        allocator=allocator_from_ld_preload(os.environ.get("LD_PRELOAD", "")),
        cuda_devices=torch.cuda.device_count() if cuda else None,
        bf16_native=cpu.bf16_native,
    )
