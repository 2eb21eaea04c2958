"""Read torch.profiler Chrome traces into one model (see ``model.py``)."""

from torchpace.trace.loader import TraceError, read_trace_file
from torchpace.trace.model import GpuOp, MemorySample, Span, Step, TraceModel, load_trace

__all__ = [
    "GpuOp",
    "MemorySample",
    "Span",
    "Step",
    "TraceError",
    "TraceModel",
    "load_trace",
    "read_trace_file",
]
