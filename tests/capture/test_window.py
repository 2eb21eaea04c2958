"""The profiled window leaves nothing of the profiler behind in the user's process."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
import torch
from torch.autograd.profiler_util import FunctionEvent

from torchpace.capture.window import TRACE_NAME, ProfilerWindow
from torchpace.env.process import glibc


def _live_profiler_events() -> int:
    # type(), not isinstance: isinstance reads __class__, which wakes torch's deprecated
    # module attributes (a FutureWarning about torch.distributed.reduce_op)
    return sum(type(o) is FunctionEvent for o in gc.get_objects())


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


# In a fresh process: ~200 MB of malloc'd blocks freed below a block that pins the heap's
# top, so glibc keeps them (no automatic trim); the window's trim must give them back.
_FREED_HEAP_CHILD = """
import gc, os
from torchpace.capture.window import _return_free_heap_to_the_os
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
blocks = [bytes(2000) + bytes([i % 256]) for i in range(100_000)]
pin = bytes(2000) + b"x"
del blocks
gc.collect()
held = rss()
_return_free_heap_to_the_os()
print(held - rss())
"""


@pytest.mark.skipif(glibc() is None, reason="glibc only")
def test_the_stopped_window_gives_the_freed_heap_back():
    # The freed profiler events leave free heap that the user's loop would reuse without the
    # page faults the plain script pays: the headline would run faster than the script.
    out = subprocess.run([sys.executable, "-c", _FREED_HEAP_CHILD], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert int(out) > 100 * 2**20
