"""The TuneContext a knob's plan reads: the doctor's facts and this machine's."""

from __future__ import annotations

from torchpace.facts.run import RunFacts
from torchpace.knobs.base import TuneContext
from torchpace.report.memory_model import BatchHeadroom


def build_context(
    facts: RunFacts,
    codes: list[str],
    try_all: bool = False,
    allow_batch_size: bool = False,
    batch_headroom: BatchHeadroom | None = None,
    nproc_per_node: int = 1,
) -> TuneContext:
    import torch

    from torchpace.env.cpu import read_cpu_facts

    device = facts.process.device if facts.process else ("cuda" if _cuda(torch) else "cpu")
    capability = torch.cuda.get_device_capability() if device == "cuda" else None
    major, minor = torch.__version__.split(".")[:2]
    return TuneContext(
        facts=facts,
        cpu=read_cpu_facts(),
        device=device,
        cuda_capability=capability,
        cuda_bf16=bool(device == "cuda" and torch.cuda.is_bf16_supported()),
        torch_version=(int(major), int(minor)),
        try_all=try_all,
        allow_batch_size=allow_batch_size,
        finding_codes=frozenset(codes),
        first_finding=codes[0] if codes else None,  # ``codes`` come in the doctor's rank order
        batch_headroom=batch_headroom,
        nproc_per_node=nproc_per_node,
    )


def _cuda(torch) -> bool:
    return torch.cuda.is_available()
