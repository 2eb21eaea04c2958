"""The GPU's idle time explained by its cause: when the device idles a tenth of the step or
more, the largest of its causes (doctor/idle.py: data wait, syncs, the syncs finishing a
blocking copy, launch overhead, host work) gets a finding.

Runs after the other checks, on their findings: a cause that a finding already names (a data
wait with TP101, syncs with TP201, ...) gets that finding's evidence completed with the
split; a cause that none names gets its own finding here (TP201 for syncs below the floors
of the sync check, TP310 for launch overhead and host work). The causes are means over the
profiled steps, so that they add up to the mean idle (medians of parts do not add up).
"""

from __future__ import annotations

from torchpace.doctor.checks.base import gpu_run, r
from torchpace.doctor.checks.sync_in_training_loop import SyncInTrainingLoop
from torchpace.doctor.finding import SEVERITIES, Finding, severity_for_share
from torchpace.doctor.profile import Profile

# Idle below this share of the step is the normal slack of a busy device; from it on the
# idle must be explained.
MIN_IDLE_SHARE = 0.10
# A cause that no other finding names gets a finding of its own from this share of the
# step on (a smaller part is named in the note of the idle's split only).
MIN_CAUSE_SHARE = 0.10
# The causes, as StepMetrics fields (the syncs' idle less that after copy syncs).
CAUSES = ("data", "sync", "copy_sync", "launch", "host")
LABELS = {
    "data": "data wait",
    "sync": "syncs",
    "copy_sync": "syncs finishing blocking copies",
    "launch": "launch overhead",
    "host": "host work",
}
# The findings that explain each cause: one of them present, the cause has its finding.
EXPLAINED_BY = {
    "data": {"TP101", "TP102", "TP106", "TP104"},
    "sync": {"TP201", "TP507"},
    "copy_sync": {"TP102", "TP103"},
    "launch": {"TP310", "TP313"},
    "host": {"TP310", "TP313"},
}


def idle_causes_ms(profile: Profile) -> dict[str, float]:
    """Mean GPU idle per step by cause (they add up to the mean idle)."""
    steps = profile.per_step
    n = len(steps) or 1
    sums = dict.fromkeys(CAUSES, 0.0)
    for m in steps:
        sums["data"] += m.idle_data_ms
        sums["sync"] += max(0.0, m.idle_sync_ms - m.idle_copy_sync_ms)
        sums["copy_sync"] += m.idle_copy_sync_ms
        sums["launch"] += m.idle_launch_ms
        sums["host"] += m.idle_host_ms
    return {k: v / n for k, v in sums.items()}


def explain(profile: Profile, findings: list[Finding]) -> list[Finding]:
    """The findings, with the GPU idle's largest cause explained by one of them."""
    if not gpu_run(profile) or not profile.per_step or profile.synthetic_steps:
        # without step markers the "step" is the whole trace: its idle is set-up and
        # whatever ran between iterations as much as the loop's
        return findings
    step = sum(m.wall_ms for m in profile.per_step) / len(profile.per_step)
    causes = idle_causes_ms(profile)
    idle = sum(causes.values())
    if not step or idle / step < MIN_IDLE_SHARE:
        return findings
    largest = max(causes, key=causes.get)
    split = {f"gpu_idle_{k}_ms": r(v) for k, v in causes.items()}
    note = (
        f"the GPU idles {idle:.1f} ms per step ({100 * idle / step:.0f}%): "
        + ", ".join(f"{LABELS[k]} {v:.1f}" for k, v in causes.items() if v >= 0.005)
        + f"; the largest part, {LABELS[largest]}, is this finding's"
    )
    for f in findings:
        if f.code in EXPLAINED_BY[largest]:
            f.evidence.update(split)
            f.notes.append(note)
            return findings
    if causes[largest] / step < MIN_CAUSE_SHARE:
        return findings
    made = _finding_for(largest, profile, causes, idle, step)
    if made is None:
        return findings
    made.evidence.update(split)
    made.notes.append(note)
    return [*findings, made]


def _finding_for(
    cause: str, profile: Profile, causes: dict[str, float], idle: float, step: float
) -> Finding | None:
    part = causes[cause]
    if cause == "sync" and profile.median.syncs:
        return SyncInTrainingLoop().finding(profile)
    if cause == "host" and profile.median.gpu_comm_ms > 0:
        # a job that communicates: its host waits for other ranks and collectives more than
        # it computes (the communication findings and the cross-rank view say which)
        return None
    if cause in ("launch", "host"):
        m = profile.median
        evidence = {
            "kernels_per_step": r(m.kernels, 0),
            "tiny_kernel_pct": r(100 * m.tiny_kernels / m.kernels, 1) if m.kernels else 0.0,
        }
        if cause == "launch":
            return Finding(
                "TP310",
                evidence=evidence,
                saving_ms=part,
                step_ms=step,
                knob="compile",
                detail=f"the GPU idles {part:.1f} ms per step in short gaps between its ops: "
                "the host launches barely behind the device",
                fix="model = torch.compile(model) (fewer, fused kernels), CUDA graphs "
                '(torch.compile(mode="reduce-overhead")), or a bigger batch per launch',
            )
        return Finding(
            "TP310",
            evidence=evidence,
            step_ms=step,
            # the host's work cannot all go: only an experiment tells what compile or CUDA
            # graphs take off it; its share of the step still says how much it matters
            # at most medium: a finding whose saving is not estimated never takes the high
            # band, and ranks after the medium findings that have a saving (rank_key). It
            # does outrank a low one with a saving: on the H100 the planted syncs loop's
            # TP201 fell to low against a profiled step CUPTI had made several times longer
            # (docs/doctor.md, "The ranking rule")
            severity=max(severity_for_share(part / step), "medium", key=SEVERITIES.index),
            knob="compile",
            detail=f"the GPU idles {part:.1f} ms per step ({100 * part / step:.0f}%) with "
            "nothing queued while the host runs Python and CPU work between launches",
            fix="move CPU work out of the step (logging, metrics, per-step Python "
            'bookkeeping), torch.compile(model) or CUDA graphs (mode="reduce-overhead") to '
            "launch the step in fewer calls, or a bigger batch per launch",
            notes=[
                "saving not estimated: the host work that compile or CUDA graphs remove is "
                "measured by `torchpace tune`, not read from the trace"
            ],
        )
    return None  # data and copy syncs: the data findings' business (their own floors)
