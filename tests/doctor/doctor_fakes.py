"""Profiles and run facts built by hand, for testing each check at its thresholds."""

from __future__ import annotations

from torchpace.doctor.profile import Profile
from torchpace.doctor.steps import DeviceMemory, StepMetrics
from torchpace.facts.run import (
    LoaderFacts,
    ProbeResult,
    ProcessState,
    RunFacts,
    Status,
    StepPhase,
    StepRecord,
    SyncSite,
    WrapperFacts,
)


def profile(
    metrics: dict[str, float],
    facts: RunFacts | None = None,
    *,
    peaks: dict[str, float] | None = None,
    **kw,
) -> Profile:
    """Five identical steps with these metrics (StepMetrics field names) and, per device
    key, this peak of allocated bytes; ``kw`` sets the profile's other fields."""
    memory = {key: DeviceMemory(peak=peak) for key, peak in (peaks or {}).items()}
    step = StepMetrics(**metrics, memory=memory)
    p = Profile(synthetic_steps=False, per_step=[step] * 5, facts=facts)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def process(**kw) -> ProcessState:
    base = dict(
        device="cpu",
        cuda_available=False,
        cuda_total_memory_bytes=None,
        anomaly_detection=False,
        grad_enabled=True,
        cudnn_benchmark=None,
        cudnn_deterministic=None,
        deterministic_algorithms=False,
        tf32_matmul=None,
        tf32_cudnn=None,
        intra_op_threads=2,
        inter_op_threads=2,
        usable_cpus=2,
        physical_cores=2,
    )
    base.update(kw)
    return ProcessState(**base)


def loader(num_workers=0, batch_size=32, location="train.py:40", **kw) -> LoaderFacts:
    base = dict(
        location=location,
        num_workers=num_workers,
        pin_memory=False,
        persistent_workers=False,
        prefetch_factor=None,
        batch_size=batch_size,
        drop_last=False,
        dataset_len=1000,
        dataset_type="FakeData",
        batches_seen=8,
    )
    base.update(kw)
    return LoaderFacts(**base)


def facts(
    *,
    proc: ProcessState | None = None,
    loaders=(),
    syncs=(),
    wrappers=(),
    probes=(),
    steps=None,
    status=Status.COMPLETE,
) -> RunFacts:
    if steps is None:
        steps = [StepRecord(i, 10.0, 1.0, in_window=i >= 2) for i in range(7)]
    return RunFacts(
        command=["python", "train.py"],
        step_source="optimizer",
        optimizers=["SGD"],
        optimizer_steps_per_step=1.0,
        warmup=2,
        steps_requested=5,
        status=status,
        steps=list(steps),
        loaders=list(loaders),
        syncs=list(syncs),
        wrappers=list(wrappers),
        probes=list(probes),
        process=proc or process(),
    )


__all__ = [
    "ProbeResult",
    "Status",
    "StepPhase",
    "StepRecord",
    "SyncSite",
    "WrapperFacts",
    "facts",
    "loader",
    "process",
    "profile",
]
