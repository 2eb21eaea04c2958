"""TP405 activations-dominate-memory: Activations fill memory: checkpointing frees most of it."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.checks._memory import MIB, peak_split
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class ActivationsDominate(Check):
    """TP405: activations saved for backward are most of the step's peak and the peak is
    close to the memory there is: checkpointing each block would free most of them."""

    code = "TP405"

    # Activations at least this share of the peak: what checkpointing can act on.
    MIN_ACTIVATION_SHARE = 0.5
    # ...on a job whose peak takes this share of what its tensors can use (the device's
    # memory; on CPU the binding limit, less what the process holds outside the step):
    # below it, the memory is not what limits the batch.
    MIN_PEAK_SHARE = 0.7

    def run(self, profile: Profile) -> list[Finding]:
        split = peak_split(profile)
        usable = split.usable if split is not None else None
        if split is None or not usable or not split.peak:
            return []
        act = split.parts["activations"]
        if act / split.peak < self.MIN_ACTIVATION_SHARE:
            return []
        if split.peak / usable < self.MIN_PEAK_SHARE:
            return []
        steps = profile.facts.memory.steps
        units = next(s.units for s in steps if s.index == split.step)
        saving = memory.checkpoint_saving(units)
        evidence = {
            "peak_mib": r(split.peak / MIB),
            "activations_mib": r(act / MIB),
            "activations_pct_of_peak": r(100 * act / split.peak, 1),
            "peak_pct_of_usable": r(100 * split.peak / usable, 1),
            "usable_mib": r(usable / MIB),
            "capacity": memory.capacity_phrase(split.capacity_kind, split.capacity, split.device),
        }
        notes = ["checkpointing costs about one extra forward pass per step (~30% compute)"]
        if saving is not None:
            evidence["checkpointing_frees_mib"] = r(saving / MIB)
            evidence["blocks"] = sum(1 for u in units if u.activation_bytes)
        else:
            notes.append("the model has no repeated blocks to checkpoint: use micro-batches")
        fix = (
            "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) around each "
            "block in forward (frees "
            + (f"~{saving / MIB:.0f} MiB" if saving is not None else "most activations")
            + "), or half the micro-batch with 2 accumulation steps (frees "
            f"~{act / 2 / MIB:.0f} MiB)"
        )
        return [
            Finding(
                "TP405",
                evidence=evidence,
                severity="medium",
                detail=f"activations saved for backward are {100 * act / split.peak:.0f}% of "
                f"a peak at {100 * split.peak / usable:.0f}% of the {memory.size(usable)} the "
                "step's tensors can use under "
                + memory.capacity_phrase(split.capacity_kind, split.capacity, split.device),
                fix=fix,
                notes=notes,
            )
        ]
