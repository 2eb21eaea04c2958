"""Everything `torchpace env` reads, in one record (``collect()``)."""

from __future__ import annotations

import dataclasses
import platform
from dataclasses import dataclass

from torchpace.env.cpu import CpuFacts, read_cpu_facts
from torchpace.env.gpu import TorchFacts, read_torch_facts
from torchpace.env.process import ProcessFacts, read_process_facts

__all__ = ["EnvFacts", "collect"]


@dataclass(frozen=True)
class EnvFacts:
    python: str
    platform: str
    torch: TorchFacts
    cpu: CpuFacts
    process: ProcessFacts

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["cpu"]["bf16_native"] = self.cpu.bf16_native
        return d


def collect() -> EnvFacts:
    return EnvFacts(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.release()} {platform.machine()}",
        torch=read_torch_facts(),
        cpu=read_cpu_facts(),
        process=read_process_facts(),
    )
