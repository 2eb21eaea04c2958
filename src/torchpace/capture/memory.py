"""Memory measured inside the user's process (the doctor's capture only, never tune's timed
trials): what the model's parameters, gradients and optimizer state hold, which activations
autograd keeps for backward and the user's line that computed each, and the state of memory
when the script dies of an out-of-memory error.

Activations are seen through a default saved-tensors hook (``torch.autograd.graph``): every
tensor autograd saves for backward passes through ``pack``, which notes its storage, size,
the user's source line and the model's block it was computed in, and keeps only a weak
reference, so that the tensor dies when autograd lets it go, exactly as without the hook.
The live set is therefore what autograd holds at any moment. The hook adds one Python call
per saved tensor (a few microseconds) and is installed for the warm-up and the profiled
steps, so that a failure in the first steps is explained too.

Tensors kept past their step without their graph (``kept.append(out.detach())``,
``logits.detach().clone()``) hold no saved activation: the copies the user's own lines make
with ``detach``, ``clone``, ``to`` and ``cpu`` are noted with that line too, so that a leak
of detached outputs points to the line that keeps them.
"""

from __future__ import annotations

import functools
import re
import sys
import time
import traceback
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from torchpace.capture.memory_limits import binding, read_limits
from torchpace.capture.sites import _is_library, _short, user_location
from torchpace.facts.memory import (
    MemoryFacts,
    MemorySplit,
    OutOfMemory,
    SiteBytes,
    StepMemory,
    UnitBytes,
)

# The sites and units kept per moment: enough for "what fills my memory", small in the JSON.
TOP_SITES = 8
TOP_UNITS = 64
# The tensor methods whose results, made on a line of the user's code, are noted with that
# line: what a loop keeps across steps without the graph (a detached output, its copy).
COPY_METHODS = ("detach", "clone", "to", "cpu")
# torch's own detach, before _watch_copies notes the user's calls of it
_DETACH = torch.Tensor.detach


@dataclass
class _Saved:
    """One storage autograd holds for backward (several saved tensors can share it)."""

    nbytes: int
    site: str | None
    unit: str | None
    step: int
    dtype: str
    refs: int = 0
    kind: str = "activations"  # "activations", "outputs", "copies" (SiteBytes.kind)


class MemoryTracker:
    def __init__(self, facts: MemoryFacts, in_window: Callable[[], bool]):
        self.facts = facts
        self.in_window = in_window  # whether the running step is profiled
        self.model: torch.nn.Module | None = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self.step = 0
        self.saved: dict[int, _Saved] = {}  # storage address -> what holds it
        self.outputs: dict[int, _Saved] = {}  # the model's outputs, until they die
        self.copies: dict[int, _Saved] = {}  # detach/clone/to/cpu results made on user lines
        self.total = 0  # bytes of self.saved
        self.max_total = 0  # the most in the current step
        self._at_max: tuple | None = None  # the moment of max_total, taken lazily
        self._max_pending = False  # max_total was raised and not yet snapshotted
        self._at_optimizer: MemorySplit | None = None  # the split at this step's optimizer step
        self.unit_names: dict[int, str] = {}  # id(module) -> qualified name
        self.unit: str | None = None  # the unit whose forward is running
        self.unit_inputs: Counter[str] = Counter()  # this step: unit -> input bytes
        self.input_bytes = 0
        self.model_input_shapes: list[list[int]] | None = None  # this step's first call
        self.grad_forwards = 0  # this step's model calls with autograd on
        self.unpacked = False  # autograd unpacked a saved tensor this step: backward ran
        self.empty_cache_calls = 0
        self.empty_cache_s = 0.0
        self._retries_before = 0
        self._hooks = None
        self._handles: list = []
        self._restore: list = []
        self.tracking = True  # activations are seen (warm-up and the profiled window)

    # --- installation ------------------------------------------------------------------
    def install(self, runtime) -> None:
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        runtime.on_model(self._model_found)
        runtime.on_optimizer(self.optimizers.append)
        runtime.filter_batches(self._batch)
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._handles = [
            register_module_forward_pre_hook(self._unit_enter),
            register_module_forward_hook(self._unit_exit),
            register_optimizer_step_pre_hook(self._optimizer_step),
        ]
        self._watch_empty_cache()
        self._watch_zero_grad()
        self._watch_copies()

    def _watch_empty_cache(self) -> None:
        """Counts torch.cuda.empty_cache() calls and their host time (TP402 at run time)."""
        original = torch.cuda.empty_cache
        tracker = self

        @functools.wraps(original)
        def empty_cache():
            start = time.perf_counter()
            try:
                return original()
            finally:
                tracker.empty_cache_calls += 1
                tracker.empty_cache_s += time.perf_counter() - start

        torch.cuda.empty_cache = empty_cache
        self._restore.append((torch.cuda, "empty_cache", original))

    def _watch_zero_grad(self) -> None:
        """The moment of most activations is taken lazily, when the first of them is freed;
        a zero_grad() between forward and backward frees the gradients first: the moment
        is taken before it, gradients included."""
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            original = owner.zero_grad
            owner.zero_grad = _before(original, self._take_pending_max)
            self._restore.append((owner, "zero_grad", original))

    def _watch_copies(self) -> None:
        """Notes the tensors the user's own lines make with COPY_METHODS (see the module's
        docstring); calls from library code (an optimizer's detach) are not noted."""
        for name in COPY_METHODS:
            original = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, _noting_copies(original, self))
            self._restore.append((torch.Tensor, name, original))

    def uninstall(self) -> None:
        """Removes the hooks (tests; the capture child keeps them to its end)."""
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore = []

    def stop_tracking(self) -> None:
        """After the profiled window. The saved-tensors hook walks the stack for every tensor
        autograd saves: kept on, it made the unprofiled steps that the headline samples/s is
        measured on 5-23% slower than the plain script (benchmarks/doctor_throughput.py). A
        later out-of-memory failure still gets parameters, gradients and optimizer state."""
        self.uninstall()
        self.saved.clear()
        self.outputs.clear()
        self.copies.clear()
        self.total = 0
        self.tracking = False

    def _model_found(self, model: torch.nn.Module) -> None:
        self.model = model
        self.unit_names = {id(m): name for name, m in checkpoint_units(model)}

    def _batch(self, batch):
        self.input_bytes = _tensor_bytes(batch)
        return batch

    def _unit_enter(self, module, args) -> None:
        if module is self.model:
            if self.model_input_shapes is None:
                self.model_input_shapes = [list(t.shape) for t in _tensors(args)]
            if torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters()):
                self.grad_forwards += 1
        name = self.unit_names.get(id(module))
        if name is not None and self.unit is None:
            self.unit = name
            if torch.is_grad_enabled():
                self.unit_inputs[name] += _tensor_bytes(args)

    def _unit_exit(self, module, args, output) -> None:
        if self.unit is not None and self.unit_names.get(id(module)) == self.unit:
            self.unit = None
        if module is self.model and not _compiling():
            # the model's outputs: kept past their step (a list of outputs) they are a leak
            site = user_location()
            for t in _tensors(output):
                self._keep(self.outputs, t, site, kind="outputs")

    def _keep(
        self, registry: dict, tensor, site: str | None, owner=None, kind: str = "activations"
    ) -> bool:
        """Notes a tensor's storage in ``registry`` until ``owner`` (the tensor itself by
        default) dies; True when the storage is new there."""
        try:
            storage = tensor.untyped_storage()
            address, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # sparse, nested or wrapper tensors
            return False
        if not address or not nbytes:
            return False
        entry = registry.get(address)
        new = entry is None
        if new:
            entry = _Saved(nbytes, site, self.unit, self.step, _dtype(tensor), kind=kind)
            registry[address] = entry
        entry.refs += 1
        weakref.finalize(tensor if owner is None else owner, self._released, registry, address)
        return new

    # --- the saved-tensors hook ----------------------------------------------------------
    def _pack(self, tensor):
        if _compiling():
            self.facts.activations_unmeasured = (
                "the model runs under torch.compile: activations saved inside compiled "
                "graphs are not all seen by the saved-tensors hook"
            )
            return tensor
        if tensor.device.type == "meta":
            return tensor
        # What autograd holds is the holder: it dies when autograd lets the tensor go, even
        # when the user's own variable keeps the tensor alive longer. It holds the tensor
        # detached: a node's own output saved with its grad_fn would make a cycle (node ->
        # holder -> tensor -> node) that only backward breaks, and a graph never backwarded
        # (a GAN's G(z).detach() for D's step) leaked every step; autograd rewrites the
        # unpacked tensor's autograd metadata anyway.
        held = _Held(_DETACH(tensor))
        if self._keep(self.saved, tensor, None, owner=held):
            entry = self.saved[tensor.untyped_storage().data_ptr()]
            entry.site = user_location()
            self.total += entry.nbytes
            if self.total > self.max_total:
                self.max_total = self.total
                self._max_pending = True
        return held

    def _unpack(self, held):
        self.unpacked = True
        return held.tensor if isinstance(held, _Held) else held

    def _take_pending_max(self) -> None:
        """Takes the moment of most activations now if it was not taken yet."""
        if self._max_pending and self.in_window():
            self._at_max = self._moment()
            self._max_pending = False

    def _optimizer_step(self, optimizer, args, kwargs) -> None:
        """The optimizer's step begins: gradients complete, activations freed. Of several
        optimizer steps in one step (a GAN's), the one holding the most is kept."""
        if not self.tracking or not self.in_window() or _compiling():
            return
        split = self.split()
        if self._at_optimizer is None or _named(split) > _named(self._at_optimizer):
            self._at_optimizer = split

    def _released(self, registry: dict, address: int) -> None:
        entry = registry.get(address)
        if entry is None:
            return
        if registry is self.saved and self._max_pending and self.in_window():
            self._take_pending_max()  # the total falls from its max: keep that moment
        entry.refs -= 1
        if entry.refs <= 0:
            del registry[address]
            if registry is self.saved:
                self.total -= entry.nbytes

    # --- what one moment holds ---------------------------------------------------------
    def _moment(self) -> tuple[MemorySplit, list[SiteBytes], list[UnitBytes]]:
        split = self.split()
        return split, self.sites(), self.units()

    def _activations(self) -> list[_Saved]:
        """The saved storages that are activations: not parameters, gradients or state
        (a Linear saves its weight, which is counted as a parameter)."""
        return [e for _, e in self._activation_items()]

    def _activation_items(self) -> list[tuple[int, _Saved]]:
        params, grads, state = self._state_storages()
        counted = params.keys() | grads.keys() | state.keys()
        return [(a, e) for a, e in self.saved.items() if a not in counted]

    def _state_storages(self) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        params: dict[int, int] = {}
        grads: dict[int, int] = {}
        state: dict[int, int] = {}
        tensors = list(self.model.parameters()) if self.model is not None else []
        for opt in self.optimizers:
            tensors += [p for g in opt.param_groups for p in g["params"]]
        for p in tensors:
            _add_storage(params, p)
            if p.grad is not None:
                _add_storage(grads, p.grad)
        for opt in self.optimizers:
            for per_param in opt.state.values():
                for value in per_param.values() if isinstance(per_param, dict) else ():
                    if isinstance(value, torch.Tensor):
                        _add_storage(state, value)
        return params, grads, state

    def split(self) -> MemorySplit:
        """The bytes held at this moment, with the memory there is and what its limit counts."""
        params, grads, state = self._state_storages()
        activations = sum(e.nbytes for e in self._activations())
        device = "cpu"
        if self.model is not None:
            first = next(self.model.parameters(), None)
            device = first.device.type if first is not None else "cpu"
        split = MemorySplit(
            device=device,
            parameters=sum(params.values()),
            gradients=sum(grads.values()),
            optimizer_state=sum(state.values()),
            activations=activations,
        )
        if device == "cuda" and torch.cuda.is_initialized():
            split.allocated = torch.cuda.memory_allocated()
            split.reserved = torch.cuda.memory_reserved()
            index = torch.cuda.current_device()
            split.capacity = torch.cuda.get_device_properties(index).total_memory
            split.capacity_kind = "device"
            fraction = _memory_fraction(index)
            if fraction is not None and fraction < 1.0:  # set_per_process_memory_fraction
                split.capacity = int(split.capacity * fraction)
                split.capacity_kind = f"per-process memory fraction {fraction:g}"
        elif device == "cpu":
            limit = binding(read_limits())
            if limit is not None:
                split.capacity, split.capacity_kind = limit.limit, limit.kind
                split.capacity_used = limit.used
        return split

    def sites(self, only_before_step: int | None = None) -> list[SiteBytes]:
        """Saved activations by line; with ``only_before_step``, what is still alive from
        that step or earlier, the model's outputs included (what a leak keeps)."""
        if only_before_step is None:
            entries = self._activations()
        else:  # a storage in several registries counts once, by its most specific line:
            # the copy the user's line made, else the model's output, else the activation
            by_address = dict(self._activation_items())
            by_address.update(self.outputs)
            by_address.update(self.copies)
            entries = [e for e in by_address.values() if e.step <= only_before_step]
        by_site: dict[str | None, Counter[str]] = {}
        refs: Counter[str | None] = Counter()
        for e in entries:
            by_site.setdefault(e.site, Counter())[e.kind] += e.nbytes
            refs[e.site] += e.refs
        ranked = sorted(by_site.items(), key=lambda kv: -kv[1].total())[:TOP_SITES]
        return [
            SiteBytes(site, kinds.total(), refs[site], kinds.most_common(1)[0][0])
            for site, kinds in ranked
        ]

    def units(self) -> list[UnitBytes]:
        by_unit: Counter[str] = Counter()
        for e in self._activations():
            if e.unit is not None:
                by_unit[e.unit] += e.nbytes
        names = list(self.unit_names.values())
        return [
            UnitBytes(name, by_unit[name], self.unit_inputs[name])
            for name in names[:TOP_UNITS]
            if by_unit[name] or self.unit_inputs[name]
        ]

    def dtype_bytes(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for e in self._activations():
            out[e.dtype] += e.nbytes
        return dict(out)

    # --- the session's events ------------------------------------------------------------
    def step_ended(self, index: int, in_window: bool) -> None:
        """``index``: the step that ended; ``in_window``: whether it was profiled."""
        if in_window:
            if self._max_pending or self._at_max is None:  # nothing freed since the max
                self._at_max = self._moment()
            split, sites, units = self._at_max
            self.facts.steps.append(
                StepMemory(
                    index=index,
                    split=split,
                    sites=sites,
                    units=units,
                    kept_at_end=self.sites(only_before_step=index),
                    input_bytes=self.input_bytes,
                    model_input_shapes=self.model_input_shapes or [],
                    grad_forwards=self.grad_forwards,
                    backward_ran=self.unpacked,
                    empty_cache_calls=self.empty_cache_calls,
                    empty_cache_ms=round(1000 * self.empty_cache_s, 3),
                    alloc_retries=_alloc_retries() - self._retries_before,
                    optimizer_split=self._at_optimizer,
                )
            )
        self.step = index + 1
        self.max_total = self.total
        self._at_max = None
        self._max_pending = False
        self._at_optimizer = None
        self.unit_inputs.clear()
        self.unit = None
        self.model_input_shapes = None
        self.grad_forwards = 0
        self.unpacked = False
        self.empty_cache_calls = 0
        self.empty_cache_s = 0.0
        self._retries_before = _alloc_retries()

    def out_of_memory(self, exc: BaseException, capture_phase: str) -> OutOfMemory:
        """The state at the failure: taken in the handler, while the failed step's frames
        (and the tensors they hold) are still alive."""
        message = _first_line(exc)
        if not self.tracking:
            self.facts.activations_unmeasured = (
                "the failure came after the profiled steps, where activations are no longer "
                "tracked (the hooks would slow the steps timed for samples/s)"
            )
        split = self.split()
        requested, free = _sizes_in_message(str(exc))
        return OutOfMemory(
            step=self.step,
            capture_phase=capture_phase,
            step_phase=step_phase_of(exc),
            location=user_frame_of(exc),
            message=message,
            error_type=f"{type(exc).__module__}.{type(exc).__qualname__}".replace("builtins.", ""),
            requested_bytes=requested,
            free_bytes=free,
            split=split,
            sites=self.sites(),
            units=self.units(),
            input_bytes=self.input_bytes,
            autocast=torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu"),
            param_dtype=_param_dtype(self.model),
            activation_dtype_bytes=self.dtype_bytes(),
        )


def _named(split: MemorySplit) -> int:
    return split.parameters + split.gradients + split.optimizer_state + split.activations


def _memory_fraction(index: int) -> float | None:
    try:
        return float(torch.cuda.get_per_process_memory_fraction(index))
    except (AttributeError, RuntimeError):  # an older torch
        return None


def _before(original, call):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        call()
        return original(*args, **kwargs)

    return wrapper


def _noting_copies(original, tracker: MemoryTracker):
    @functools.wraps(original)
    def method(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if not isinstance(out, torch.Tensor) or _compiling():
            return out
        caller = sys._getframe(1)
        filename = caller.f_code.co_filename
        if not _is_library(filename):
            site = f"{_short(filename)}:{caller.f_lineno}"
            tracker._keep(tracker.copies, out, site, kind="copies")
        return out

    return method


class _Held:
    """A tensor autograd saved for backward, as the graph holds it (see _pack)."""

    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor):
        self.tensor = tensor


def _alloc_retries() -> int:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return 0
    return int(torch.cuda.memory_stats().get("num_alloc_retries", 0))


def _compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # an older torch
        return False


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _add_storage(into: dict[int, int], tensor: torch.Tensor) -> None:
    try:
        storage = tensor.untyped_storage()
        into[storage.data_ptr()] = storage.nbytes()
    except (RuntimeError, NotImplementedError):
        pass


def _tensors(value) -> list[torch.Tensor]:
    """The tensors in a (nested) output, batch or argument tuple."""
    out, stack = [], [value]
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return out


def _tensor_bytes(value) -> int:
    """Distinct storage bytes of the tensors in a (nested) batch or argument tuple."""
    seen: dict[int, int] = {}
    for t in _tensors(value):
        _add_storage(seen, t)
    return sum(seen.values())


def _param_dtype(model) -> str | None:
    if model is None:
        return None
    first = next((p for p in model.parameters() if p.is_floating_point()), None)
    return _dtype(first) if first is not None else None


def checkpoint_units(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The model's checkpointable units: its children, with containers (Sequential,
    ModuleList, ModuleDict) opened into their children, and a model whose body is one
    module opened into that module's units. A residual block or transformer layer is a unit;
    ``torch.utils.checkpoint`` is applied to units."""
    containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)

    def expand(prefix: str, module: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
        units = []
        for name, child in module.named_children():
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(child, containers):
                units += expand(full, child)
            else:
                units.append((full, child))
        return units

    units = expand("", model)
    while len(units) == 1 and any(True for _ in units[0][1].children()):
        name, only = units[0]
        units = expand(name, only)
    return units


# --- what the traceback says ------------------------------------------------------------

# The messages torch's allocators raise when a request cannot be met: CUDA's caching
# allocator (torch.OutOfMemoryError), the CPU allocator (a RuntimeError on older torch).
_OOM_MESSAGES = re.compile(
    r"out of memory|can't allocate memory|not enough memory|Cannot allocate memory",
    re.IGNORECASE,
)
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"([\d.]+) ?(B|KiB|MiB|GiB|TiB)"


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))):
        return True
    return isinstance(exc, RuntimeError) and bool(_OOM_MESSAGES.search(str(exc)))


def _sizes_in_message(text: str) -> tuple[int | None, int | None]:
    """(requested, free) bytes as CUDA ("Tried to allocate 2.00 GiB ... of which 1.2 GiB is
    free") or the CPU allocator ("you tried to allocate 123 bytes") write them."""
    requested = free = None
    m = re.search(r"[Tt]ried to allocate " + _SIZE, text)
    if m:
        requested = int(float(m.group(1)) * _UNITS[m.group(2)])
    m = m or re.search(r"tried to allocate (\d+) bytes", text)
    if m and requested is None:
        requested = int(m.group(1))
    m = re.search(r"of which " + _SIZE + " (?:is )?free", text)
    if m:
        free = int(float(m.group(1)) * _UNITS[m.group(2)])
    return requested, free


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:500]


_TORCH_DIR = torch.__file__.rsplit("/", 1)[0]


def step_phase_of(exc: BaseException) -> str:
    """Where in the step the error was raised, from the torch frames of its traceback
    (innermost first): autograd's backward, an optimizer's step, a DataLoader, a module's
    forward; else the loop's own code."""
    frames = traceback.extract_tb(exc.__traceback__)
    for frame in reversed(frames):
        name = frame.filename
        if not name.startswith(_TORCH_DIR):
            continue
        if "/autograd/" in name and frame.name in ("backward", "_engine_run_backward", "grad"):
            return "backward"
        if "/optim/" in name:
            return "optimizer step"
        if "/utils/data/" in name:
            return "data loading"
    for frame in reversed(frames):
        if frame.filename.startswith(_TORCH_DIR) and frame.name in ("_call_impl", "forward"):
            return "forward"
    return "loop code"


def user_frame_of(exc: BaseException) -> str | None:
    """The innermost frame of the user's code in the traceback: 'train.py:42'."""
    from torchpace.capture.sites import _LIBRARY_DIRS, _short

    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if not frame.filename.startswith(_LIBRARY_DIRS) and not frame.filename.startswith("<"):
            return f"{_short(frame.filename)}:{frame.lineno}"
    return None
