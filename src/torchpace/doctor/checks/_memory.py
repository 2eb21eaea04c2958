"""What the memory checks share (doctor/checks/memory.py lists them)."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.profile import Profile

KIB = 1024
MIB = 2**20


def input_shapes(profile: Profile) -> list[list[list[int]]]:
    """The distinct shapes the model was called with in the profiled steps, in order."""
    seen: list[list[list[int]]] = []
    for step in profile.facts.memory.steps if profile.facts else []:
        if step.model_input_shapes and step.model_input_shapes not in seen:
            seen.append(step.model_input_shapes)
    return seen


def peak_split(profile: Profile) -> memory.PeakSplit | None:
    """The split of the profiled step with the highest peak (doctor/memory.py)."""
    if profile.facts is None or not profile.facts.memory.steps:
        return None
    peaks: dict[int, tuple[int, str]] = {}
    window = profile.facts.window
    for record, metrics in zip(window, profile.per_step, strict=False):
        cuda = [m.peak for k, m in metrics.memory.items() if k.startswith("cuda") and m.peak]
        if record.cuda_peak_bytes:
            peaks[record.index] = (record.cuda_peak_bytes, memory.HOW["peak_cuda"])
        elif cuda:
            peaks[record.index] = (int(max(cuda)), memory.HOW["peak_cpu"])
        elif "cpu" in metrics.memory and metrics.memory["cpu"].peak:
            peaks[record.index] = (int(metrics.memory["cpu"].peak), memory.HOW["peak_cpu"])
    return memory.peak_split(profile.facts.memory.steps, peaks)
