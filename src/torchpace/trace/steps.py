"""Step boundaries for traces without ``ProfilerStep#N`` spans (a profiler run without a
schedule, or a trace cut from a longer job): taken from the optimizer's own spans, or from
the DataLoader's, the same events that mark a step in a live capture.
"""

from __future__ import annotations

import itertools

from torchpace.trace.model import DATALOADER_PREFIX, Span, Step, TraceModel

OPTIMIZER_STEP_PREFIX = "Optimizer.step#"
# A marker this close to the trace's first event is the boundary the window started at.
SAME_INSTANT_US = 100.0


def derive_steps(
    model: TraceModel,
    source: str = "optimizer",
    optimizers_per_step: int = 1,
    starts_at_boundary: bool = False,
) -> tuple[Step, ...]:
    """Steps from the trace's own markers, or the model's steps unchanged when there are none.

    ``source``: "optimizer" ends a step when the last of its ``optimizers_per_step``
    optimizers finishes stepping (a GAN's G and D make one step); "dataloader" starts one at
    each batch fetch. ``starts_at_boundary``: the trace began exactly at a step boundary (a
    torchpace capture window), so the stretch before the first marker is a whole step;
    otherwise it is a partial one and is left out.
    """
    if model.steps and not model.steps[0].synthetic:
        return model.steps
    main = sorted((s for s in model.annotations if s.tid == model.main_tid), key=lambda s: s.ts)
    if source == "optimizer":
        ends = [s.end for s in main if s.name.startswith(OPTIMIZER_STEP_PREFIX)]
        bounds = ends[max(optimizers_per_step, 1) - 1 :: max(optimizers_per_step, 1)]
    elif source == "dataloader":
        bounds = [s.ts for s in main if s.name.startswith(DATALOADER_PREFIX)]
    else:
        return model.steps
    if starts_at_boundary and bounds:
        start = _trace_start(model)
        if bounds[0] - start > SAME_INSTANT_US:  # else the first marker is the window's start
            bounds = [start, *bounds]
    if len(bounds) < 2:
        return model.steps
    return tuple(
        Step(f"step {i}", i, a, b - a, synthetic=False)
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    )


def _trace_start(model: TraceModel) -> float:
    spans: tuple[Span, ...] = model.cpu_ops + model.annotations + model.runtime
    return min(s.ts for s in spans)
