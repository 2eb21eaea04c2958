"""The profiled window leaves nothing of the profiler behind in the user's process."""

from __future__ import annotations

import gc

import torch
from torch.autograd.profiler_util import FunctionEvent

from torchpace.capture.window import TRACE_NAME, ProfilerWindow


def _live_profiler_events() -> int:
    return sum(isinstance(o, FunctionEvent) for o in gc.get_objects())


def test_the_stopped_window_frees_the_profilers_events(tmp_path):
    # The unprofiled steps after the window give the doctor's headline samples/s: the
    # profiler's events (hundreds of thousands of objects on a real model, held in reference
    # cycles) must not still be in the heap those steps run in.
    gc.collect()
    before = _live_profiler_events()
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    window = ProfilerWindow(tmp_path, with_stack=False, max_trace_mb=50)
    window.start()
    for _ in range(3):
        model(torch.randn(8, 16)).sum().backward()
        if window.step_ended(3):
            break
    gc.disable()  # only the window's own collection may free them
    try:
        trace, truncated, _ = window.stop()
        assert _live_profiler_events() <= before
    finally:
        gc.enable()
    assert trace == tmp_path / TRACE_NAME and trace.stat().st_size > 0
    assert not truncated
