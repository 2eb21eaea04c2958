"""What the data checks share (doctor/checks/data.py lists them)."""

from __future__ import annotations

from torchpace.doctor.profile import Profile

MIB = 2**20


def _device_transforms_apply(loader) -> bool:
    """The device-transforms knob moves a torchvision transform pipeline to the device."""
    return loader is not None and bool(loader.transform)


def _peak_and_capacity(profile: Profile) -> tuple[float | None, float | None]:
    peaks = [peak for key, peak in profile.device_peaks().items() if key.startswith("cuda:")]
    facts_peaks = [
        s.cuda_peak_bytes
        for s in (profile.facts.window if profile.facts else [])
        if s.cuda_peak_bytes
    ]
    peak = max(peaks + facts_peaks) if peaks or facts_peaks else None
    capacity = profile.memory_capacity
    if capacity is None and profile.process is not None:
        capacity = profile.process.cuda_total_memory_bytes
    return peak, capacity
