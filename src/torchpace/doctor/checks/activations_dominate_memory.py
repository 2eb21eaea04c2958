"""TP405 activations-dominate-memory: Activations fill memory: checkpointing frees most of it."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.checks._memory import MIB, peak_split
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class ActivationsDominate(Check):
    """TP405: activations saved for backward are most of the step's peak and the peak is
    close to the memory there is: checkpointing each block would free most of them.

    ## What it does

    Reports a step whose peak memory is at least 70% of the memory its tensors can use
    (`ActivationsDominate.MIN_PEAK_SHARE`) and at least half of it activations saved for
    backward (`MIN_ACTIVATION_SHARE`). The memory they can use is the device's on CUDA; on a CPU
    run it is the binding limit, the least room among the host's RAM, the process's `RLIMIT_AS`
    and `RLIMIT_DATA` and its cgroup's memory limit, less what that limit counted besides the
    step's tensors at the peak (a torch process's libraries hold about 3 GiB of address space
    and 0.8 GiB of data): a job under `ulimit -v`, `ulimit -d` or a container's `--memory` is
    memory-limited long before the host's RAM is full, and the finding names the limit. The
    activations are counted inside the user's process by a saved-tensors hook
    (`torch.autograd.graph`): the distinct storages autograd holds at the moment they are most
    (the end of forward), parameters left out; the peak comes from the profiler's `[memory]`
    events (CPU) or `torch.cuda.max_memory_allocated` (CUDA).

    The estimated saving of checkpointing each block (the model's children, containers opened):
    the block's activations minus what checkpointing keeps, that is each block's inputs, plus
    one block's activations recomputed during backward. On the planted activation-heavy model
    (`tests/planted/activation_heavy.py`, 8 MLP blocks, batch 4096) capped by `RLIMIT_DATA` 40
    MiB above its own peak, TP405 fires (a peak at 83% of the 188 MiB usable under the 1.02 GiB
    limit) and the estimate, 110.0 MiB, is checked against the peak measured with
    `torch.utils.checkpoint` applied: 112.0 MiB saved (the test holds it within 25%).

    ## Why it matters

    When memory limits the batch, activations are what scales with it. Checkpointing trades
    about one extra forward pass for most of them; a smaller micro-batch with gradient
    accumulation halves them and keeps the effective batch.

    ## Example

    ```python
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
    ```

    ## Use instead

    ```python
    from torch.utils.checkpoint import checkpoint

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
    ```

    ## Fix safety

    Same results; about 30% more compute per step. Blocks with randomness (dropout) are
    recomputed with the same RNG state by `torch.utils.checkpoint`.
    """

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
