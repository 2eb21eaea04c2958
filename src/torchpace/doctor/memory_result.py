"""The memory part of the doctor's report, as plain data: the split at the peak with how each
number was obtained, the top lines filling memory, the window's timeline, and, for a run
that ran out of memory, the state at the failure and the ranked ways out."""

from __future__ import annotations

import dataclasses

from torchpace.doctor.checks.memory import peak_split
from torchpace.doctor.memory import batch_headroom, checkpoint_saving, shortfall, ways_out


def memory_details(d) -> dict:
    p = d.profile
    out: dict = {"split_at_peak": None, "top_sites": [], "timeline": p.memory_timeline}
    facts = p.facts
    split = peak_split(p)
    oom = facts.memory.oom if facts is not None else None
    if split is not None:
        out["split_at_peak"] = split.to_dict()
        step = next(s for s in facts.memory.steps if s.index == split.step)
        out["top_sites"] = [dataclasses.asdict(s) for s in step.sites]
        out["checkpointing_frees_bytes"] = checkpoint_saving(step.units)
        if oom is None:  # a failed run's earlier peak says nothing of the room left
            out["batch_headroom"] = batch_headroom(split, _batch_size(facts))
    if facts is not None and facts.memory.activations_unmeasured:
        out["activations_unmeasured"] = facts.memory.activations_unmeasured
    if oom is not None:
        out["out_of_memory"] = {
            **dataclasses.asdict(oom),
            "shortfall_bytes": shortfall(oom),
            "ways_out": [w.to_dict() for w in ways_out(oom)],
        }
    return out


def headroom_of(d) -> dict | None:
    """The doctor's batch headroom estimate for this diagnosis (tune's batch-size finder
    reports it beside what it found), or None."""
    return memory_details(d).get("batch_headroom")


def _batch_size(facts) -> int | None:
    """The loop's batch: the loader's, else the samples the capture counted in a step."""
    if facts.loaders:
        loader = max(facts.loaders, key=lambda x: x.batches_seen)
        if loader.batch_size:
            return loader.batch_size
    samples = [s.samples for s in facts.window if s.samples]
    return max(samples) if samples else None
