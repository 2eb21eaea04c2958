"""TP404 out-of-memory: The script ran out of memory.

Not a Check: the out-of-memory failure is found whether or not a step reached the window,
and it is the report's first finding (doctor/analyze.py calls after_out_of_memory)."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.checks._memory import MIB
from torchpace.doctor.checks.base import r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

# Findings that ask a job for more memory: never given to a run that ran out of it (a
# bigger batch for a job that died of "CUDA out of memory" would be the wrong first step).
NOT_AFTER_OOM = frozenset({"TP104"})


def out_of_memory(profile: Profile) -> list[Finding]:
    """TP404: the script died of an out-of-memory error. Given whether or not a step reached
    the window: it is the report's first finding."""
    oom = profile.facts.memory.oom if profile.facts else None
    if oom is None:
        return []
    split = oom.split
    ways = memory.ways_out(oom)
    missing = memory.shortfall(oom)
    evidence = {
        "step": oom.step,
        "phase": oom.step_phase,
        "parameters_mib": r(split.parameters / MIB),
        "gradients_mib": r(split.gradients / MIB),
        "optimizer_state_mib": r(split.optimizer_state / MIB),
        "activations_mib": r(split.activations / MIB),
    }
    if oom.input_bytes:
        evidence["batch_mib"] = r(oom.input_bytes / MIB)
    if split.allocated is not None:
        evidence["allocated_mib"] = r(split.allocated / MIB)
        evidence["reserved_mib"] = r((split.reserved or 0) / MIB)
    if oom.requested_bytes is not None:
        evidence["requested_mib"] = r(oom.requested_bytes / MIB)
    if oom.free_bytes is not None:
        evidence["free_mib"] = r(oom.free_bytes / MIB)
    under = ""
    if split.capacity:
        evidence["capacity"] = memory.capacity_phrase(
            split.capacity_kind, split.capacity, split.device
        )
        under = f", under {evidence['capacity']}"
        if split.capacity_used is not None:
            evidence["capacity_used_mib"] = r(split.capacity_used / MIB)
            under += f" ({memory.size(split.capacity_used)} in use)"
    notes = []
    for i, way in enumerate(ways, 1):
        enough = ""
        if missing is not None and way.frees_bytes >= missing:
            enough = " (enough for the failed request)"
        notes.append(f"way out {i}: {way.name}: frees ~{memory.size(way.frees_bytes)}{enough}; "
                     f"{way.how}; cost: {way.cost}")  # fmt: skip
    sites = ", ".join(f"{s.location} {memory.size(s.bytes)}" for s in oom.sites[:3] if s.bytes)
    if sites:
        notes.append(f"activations alive at the failure, by line: {sites}")
    unmeasured = profile.facts.memory.activations_unmeasured
    if unmeasured:
        notes.append(f"activations at the failure not measured: {unmeasured}")
    phase = {"warmup": "warm-up", "window": "profiled window"}.get(oom.capture_phase)
    where = f", {phase} step" if phase else ""
    return [
        Finding(
            "TP404",
            evidence=evidence,
            severity="high",
            location=oom.location,
            ends_job=f"the job ran out of memory in step {oom.step}",
            detail=f"out of memory in step {oom.step}{where}, during the {oom.step_phase}"
            f"{under}: {oom.message}",
            fix=ways[0].name
            if ways
            else "a smaller batch (with gradient accumulation to keep the effective batch)",
            notes=notes,
        )
    ]


def after_out_of_memory(profile: Profile, findings: list[Finding]) -> list[Finding]:
    """A run that ran out of memory: TP404 first, and no finding that asks for more memory."""
    oom = out_of_memory(profile)
    if not oom:
        return findings
    return oom + [f for f in findings if f.code not in NOT_AFTER_OOM]
