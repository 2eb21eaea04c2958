"""TP406 variable-input-shapes: Input shapes change from step to step."""

from __future__ import annotations

import itertools

from torchpace.doctor.checks._memory import input_shapes
from torchpace.doctor.checks.base import Check, gpu_run
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class VariableInputShapes(Check):
    """TP406: the model is called with inputs of other shapes step after step: the caching
    allocator keeps blocks of every size (fragmentation, re-allocation), cudnn.benchmark
    re-tunes each new shape, torch.compile recompiles.

    ## What it does

    Reports a loop whose model is called with inputs of a different shape in at least half of
    the step-to-step transitions of the profiled window (`VariableInputShapes.MIN_CHANGE_SHARE`;
    one short last batch of an epoch is not it). The shapes are those of the tensors given to
    the model's first call in each step, recorded inside the process by a forward pre-hook. The
    evidence lists the distinct shapes; the notes say which costs apply to this run:
    `torch.compile` recompiles (or turns dynamic) on new shapes, `cudnn.benchmark` re-tunes
    every new convolution shape, and on a GPU the caching allocator keeps blocks of every size.

    ## Why it matters

    Variable-length batches (text, detection, audio) make each new shape pay again: allocator
    blocks that do not fit the next request (fragmentation, and out-of-memory errors with memory
    free), autotuning and recompilation. The largest batch also arrives late, when memory is
    already fragmented.

    ## Example

    ```python
    for tokens in loader:            # each batch padded to its own longest sequence
        loss = model(tokens).loss
    ```

    ## Use instead

    ```python
    # pad to a few fixed lengths (buckets), and run the longest batch first:
    collate = partial(pad_to_bucket, buckets=(128, 256, 512))
    # or, under torch.compile:
    model = torch.compile(model, dynamic=True)
    ```

    ## Fix safety

    Padding adds work on the padded positions (mask them in the loss); bucketing changes the
    order samples are seen in. No time saving is estimated: `torchpace tune` measures it.
    """

    code = "TP406"

    # Shapes that change in at least this share of step-to-step transitions: one odd last
    # batch of an epoch (drop_last=False) is not it.
    MIN_CHANGE_SHARE = 0.5

    def run(self, profile: Profile) -> list[Finding]:
        steps = [s.model_input_shapes for s in profile.facts.memory.steps] if profile.facts else []
        steps = [s for s in steps if s]
        if len(steps) < 3:
            return []
        changes = sum(1 for a, b in itertools.pairwise(steps) if a != b)
        if changes / (len(steps) - 1) < self.MIN_CHANGE_SHARE:
            return []
        distinct = input_shapes(profile)
        costs = []
        calls = profile.facts.calls
        proc = profile.process
        if calls.compiled:
            costs.append("torch.compile recompiles for new shapes (or falls back to dynamic)")
        if proc is not None and proc.cudnn_benchmark and profile.has_convs:
            costs.append("cudnn.benchmark re-tunes every new convolution shape")
        if gpu_run(profile):
            costs.append("the caching allocator keeps blocks of every size (fragmentation)")
        return [
            Finding(
                "TP406",
                evidence={
                    "distinct_shapes": len(distinct),
                    "steps": len(steps),
                    "shape_changes": changes,
                    "shapes": "; ".join(str(x) for x in distinct[:4]),
                },
                severity="medium" if costs else "low",
                detail=f"the model got {len(distinct)} different input shapes in "
                f"{len(steps)} steps",
                fix="pad to a few fixed lengths (buckets), run one max-size step first so that "
                "the allocator reserves the largest blocks once, or torch.compile(dynamic=True)",
                notes=costs or ["on this CPU run the cost is re-allocation only"],
            )
        ]
