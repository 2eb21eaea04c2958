"""Counts one training step's floating-point work and bytes, op by op, in the user's process.

A ``TorchDispatchMode`` sees every aten op below autograd, with its real tensors: the FLOPs
come from torch's own shape formulas (``torch.utils.flop_counter``: matmuls, convolutions,
attention, forward and backward), plus the CPU flash attention torch has no formula for;
the bytes are every tensor input's and output's size (a view moves nothing and is skipped).
``ModuleTracker`` names the module each op runs in, and the autograd engine's graph task
tells the backward apart.

The counted step is slower than the others (Python runs for every op), so the session
counts a step after the measured ones (``capture/session.py``, phase COUNT): no figure of
the doctor's times it.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count
from torch.utils.module_tracker import ModuleTracker

from torchpace.facts.flops import FlopFacts, ModuleWork, OpWork

# Queries about a tensor's layout: no work, and FlopCounterMode leaves them alone too.
_METADATA_OPS = {
    "aten::is_contiguous",
    "aten::sym_is_contiguous",
    "aten::is_strides_like_format",
    "aten::is_non_overlapping_and_dense",
    "aten::size",
    "aten::sym_size",
    "aten::stride",
    "aten::sym_stride",
    "aten::storage_offset",
    "aten::sym_storage_offset",
    "aten::numel",
    "aten::sym_numel",
    "aten::dim",
}
# Namespaces whose ops are torch's own (a formula or no floating-point work to speak of).
_TORCH_NAMESPACES = ("aten", "prim", "prims")
# The profiler's record_function markers (the optimizer's spans): no work at all.
_SKIPPED_NAMESPACES = ("profiler",)
# The module tree is named to this depth ("GPT", "GPT.transformer", "GPT.transformer.h"):
# deeper names would make a table of hundreds of rows.
MODULE_DEPTH = 3


def _shape(x):
    return x.shape if isinstance(x, torch.Tensor) else x


def _cpu_flash_forward(query, key, value, *args, **kwargs) -> int:
    return sdpa_flop_count(_shape(query), _shape(key), _shape(value))


def _cpu_flash_backward(grad_out, query, key, value, *args, **kwargs) -> int:
    return sdpa_backward_flop_count(_shape(grad_out), _shape(query), _shape(key), _shape(value))


def _formulas() -> dict:
    """Op overload packet -> FLOPs(*args, out_val=..., **kwargs)."""
    formulas = dict(flop_registry)
    aten = torch.ops.aten
    # F.scaled_dot_product_attention on a CPU runs this kernel; torch counts only the GPU ones
    extra = {
        "_scaled_dot_product_flash_attention_for_cpu": _cpu_flash_forward,
        "_scaled_dot_product_flash_attention_for_cpu_backward": _cpu_flash_backward,
    }
    for name, fn in extra.items():
        op = getattr(aten, name, None)
        if op is not None and op not in formulas:
            formulas[op] = lambda *a, out_val=None, _fn=fn, **k: _fn(*a, **k)
    return formulas


def _bytes(tensors) -> int:
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided:
            total += t.numel() * t.element_size()
    return total


def profiler_name(func) -> str:
    """``aten.addmm.default`` -> ``aten::addmm``, as the profiler names the op."""
    packet = func._overloadpacket
    return f"{func.namespace}::{packet.__name__.split('.')[-1]}"


class _Op:
    __slots__ = ("bytes", "calls", "dtype", "flops_backward", "flops_forward", "has_formula")

    def __init__(self) -> None:
        self.calls = self.flops_forward = self.flops_backward = self.bytes = 0
        self.has_formula = False
        self.dtype: str | None = None


class _CountingMode(TorchDispatchMode):
    def __init__(self, counter: StepCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self.counter.record(func, args, kwargs, out)
        except Exception as e:  # a formula that cannot read this call must not break the step
            self.counter.errors.append(f"{func}: {e}")
        return out


class StepCounter:
    """Enter at a step's start, exit at its end, then ``facts()``."""

    def __init__(self) -> None:
        self.formulas = _formulas()
        self.ops: dict[str, _Op] = defaultdict(_Op)
        self.modules: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.by_dtype: dict[str, int] = defaultdict(int)
        self.uncounted: set[str] = set()
        self.errors: list[str] = []
        self.tracker = ModuleTracker()
        self.mode = _CountingMode(self)
        self.active = False

    def start(self) -> None:
        self.tracker.__enter__()
        self.mode.__enter__()
        self.active = True

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        self.mode.__exit__(None, None, None)
        self.tracker.__exit__()

    def record(self, func, args, kwargs, out) -> None:
        name = profiler_name(func)
        if name in _METADATA_OPS or func.namespace in _SKIPPED_NAMESPACES:
            return
        op = self.ops[name]
        op.calls += 1
        if func.namespace not in _TORCH_NAMESPACES:
            self.uncounted.add(name)
        if not func.is_view:
            inputs, _ = tree_flatten((args, kwargs))
            outputs, _ = tree_flatten(out)
            op.bytes += _bytes(inputs) + _bytes(outputs)
        formula = self.formulas.get(func._overloadpacket)
        if formula is None:
            return
        op.has_formula = True
        flops = int(formula(*args, **kwargs, out_val=out))
        backward = torch._C._current_graph_task_id() != -1
        if backward:
            op.flops_backward += flops
        else:
            op.flops_forward += flops
        first = next((a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)
        if first is not None:
            dtype = str(first.dtype).removeprefix("torch.")
            self.by_dtype[dtype] += flops
            op.dtype = op.dtype or dtype
        for parent in self.tracker.parents:
            if parent != "Global" and parent.count(".") < MODULE_DEPTH:
                self.modules[parent][1 if backward else 0] += flops

    def facts(self, step_index: int | None, samples: int | None) -> FlopFacts:
        ops = [
            OpWork(
                name, o.calls, o.flops_forward, o.flops_backward, o.bytes, o.has_formula, o.dtype
            )
            for name, o in self.ops.items()
        ]
        ops.sort(key=lambda o: (-o.flops, -o.bytes, o.name))
        modules = [ModuleWork(n, f, b) for n, (f, b) in self.modules.items() if f or b]
        modules.sort(key=lambda m: m.name)
        reason = None
        if self.errors:
            reason = (
                f"{len(self.errors)} op call(s) could not be counted; the first: {self.errors[0]}"
            )
        return FlopFacts(
            counted=True,
            reason=reason,
            step_index=step_index,
            samples=samples,
            ops=ops,
            modules=modules,
            flops_by_dtype=dict(self.by_dtype),
            uncounted_ops=sorted(self.uncounted),
        )
