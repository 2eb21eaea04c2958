"""What the compute checks share (doctor/checks/compute.py lists them)."""

from __future__ import annotations

from torchpace.doctor.profile import Profile


def probe_saving(profile: Profile, name: str):
    """(saving ms, probe) from the capture's A/B probe of that name, or (None, None)."""
    for probe in profile.facts.probes if profile.facts else []:
        if probe.name == name:
            return max(0.0, probe.baseline_ms - probe.probe_ms), probe
    return None, None


# On sm80+ the bf16/fp16 tensor-core rate is twice the TF32 one, and a bf16 tensor is half
# the bytes of an fp32 one: both parts of the precision gain are this factor.
BF16_SPEEDUP = 2.0


BF16_CAPABILITY = (8, 0)


def precision_parts(profile: Profile) -> dict[str, float]:
    """What bf16 autocast saves per step, by part, estimated from the kernels (ms):
    TF32 matmuls at twice the rate; fp32 elementwise traffic halved; fp32 normalisation
    halved, but only where the convs take NHWC tensors: with layout transposes in the step
    (NCHW convs) that part comes with channels_last (TP312), not with autocast alone."""
    m = profile.median
    keep = 1 - 1 / BF16_SPEEDUP
    parts = {
        "tf32_matmul": m.matmul_tf32_ms * keep,
        "fp32_elementwise": m.fp32_elementwise_ms * keep,
        "fp32_norm": m.fp32_norm_ms * keep,
    }
    if m.layout_transpose_ms > 0:
        parts["fp32_norm"] = 0.0
    return parts
