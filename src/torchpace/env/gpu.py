"""Accelerator facts from torch: versions, devices, and what their tensor cores run."""

from __future__ import annotations

from dataclasses import dataclass

# Low-precision dtypes that NVIDIA tensor cores execute, by the compute capability that
# introduced them (CUDA programming guide, "Tensor cores" per architecture).
_TENSOR_CORE_DTYPES = [
    ((7, 0), "fp16"),  # Volta
    ((7, 5), "int8"),  # Turing
    ((8, 0), "bf16"),  # Ampere
    ((8, 0), "tf32"),
    ((8, 9), "fp8"),  # Ada, Hopper
    ((10, 0), "fp4"),  # Blackwell
]


def tensor_core_dtypes(capability: tuple[int, int]) -> tuple[str, ...]:
    return tuple(dtype for since, dtype in _TENSOR_CORE_DTYPES if capability >= since)


@dataclass(frozen=True)
class DeviceFacts:
    index: int
    name: str
    total_memory_bytes: int
    capability: str  # "9.0"
    tensor_core_dtypes: tuple[str, ...]
    multiprocessors: int


@dataclass(frozen=True)
class TorchFacts:
    torch: str
    cuda: str | None  # the CUDA version torch was built with; None for a CPU build
    cudnn: str | None
    nccl: str | None
    cuda_available: bool
    devices: tuple[DeviceFacts, ...]
    pinned_memory: str  # "usable", or why not


def _cudnn_version(torch) -> str | None:
    try:
        v = torch.backends.cudnn.version()
    except Exception:
        return None
    if not v:
        return None
    # cudnn encodes 9.26.0 as 92600 (9.x) and 8.9.7 as 8907 (8.x).
    major, rest = (v // 10000, v % 10000) if v >= 90000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _nccl_version(torch) -> str | None:
    try:
        v = torch.cuda.nccl.version()
    except Exception:
        return None
    return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def _pinned_memory(torch) -> str:
    if not torch.cuda.is_available():
        return "no: no CUDA device (pinning only helps copies to an accelerator)"
    try:
        torch.empty(1, pin_memory=True)
    except RuntimeError as e:
        return f"no: {str(e).splitlines()[0]}"
    return "usable"


def read_torch_facts() -> TorchFacts:
    import torch

    available = torch.cuda.is_available()
    devices = []
    for i in range(torch.cuda.device_count() if available else 0):
        p = torch.cuda.get_device_properties(i)
        cap = (p.major, p.minor)
        devices.append(
            DeviceFacts(
                i,
                p.name,
                p.total_memory,
                f"{p.major}.{p.minor}",
                tensor_core_dtypes(cap),
                p.multi_processor_count,
            )
        )
    return TorchFacts(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=_cudnn_version(torch),
        nccl=_nccl_version(torch),
        cuda_available=available,
        devices=tuple(devices),
        pinned_memory=_pinned_memory(torch),
    )
