"""The memory part of the doctor's report (report/memory_model.MemoryReport): the peaks, the
split at the peak with how each number was obtained, the top lines filling memory, the
window's timeline, and, for a run that ran out of memory, the state at the failure and the
ranked ways out."""

from __future__ import annotations

from torchpace.doctor.checks._memory import peak_split
from torchpace.doctor.memory import batch_headroom, checkpoint_saving, shortfall, ways_out
from torchpace.report.memory_model import MemoryReport, OutOfMemoryReport


def memory_report(d) -> MemoryReport:
    p = d.profile
    facts = p.facts
    peaks = {device: int(peak) for device, peak in p.device_peaks().items()}
    facts_peaks = [s.cuda_peak_bytes for s in facts.window if s.cuda_peak_bytes] if facts else []
    if facts_peaks and not any(k.startswith("cuda:") for k in peaks):
        peaks["cuda"] = max(facts_peaks)  # the trace had no CUDA [memory] events
    rss = [s.rss_bytes for s in facts.window if s.rss_bytes] if facts else []
    capacity = p.memory_capacity or (p.process.cuda_total_memory_bytes if p.process else None)
    peak = peaks.get("cuda") or max(
        (v for k, v in peaks.items() if k.startswith("cuda:")), default=None
    )
    oom = facts.memory.oom if facts is not None else None
    split = peak_split(p)
    step = next(s for s in facts.memory.steps if s.index == split.step) if split else None
    return MemoryReport(
        growth=tuple(p.growth),
        peaks=peaks,
        host_rss_bytes=max(rss) if rss else None,
        # a failed run's earlier peak says nothing of the room left
        headroom_bytes=capacity - peak if capacity and peak and oom is None else None,
        split_at_peak=split.report() if split else None,
        top_sites=tuple(step.sites) if step else (),
        timeline=p.memory_timeline,
        checkpointing_frees_bytes=checkpoint_saving(step.units) if step else None,
        batch_headroom=(
            batch_headroom(split, _batch_size(facts)) if split and oom is None else None
        ),
        activations_unmeasured=facts.memory.activations_unmeasured if facts else None,
        out_of_memory=(
            OutOfMemoryReport(oom, shortfall(oom), tuple(ways_out(oom))) if oom else None
        ),
    )


def _batch_size(facts) -> int | None:
    """The loop's batch: the loader's, else the samples the capture counted in a step."""
    if facts.loaders:
        loader = max(facts.loaders, key=lambda x: x.batches_seen)
        if loader.batch_size:
            return loader.batch_size
    samples = [s.samples for s in facts.window if s.samples]
    return max(samples) if samples else None
