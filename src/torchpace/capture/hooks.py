"""The patches that let the capture child see an unmodified script's steps, data loading,
syncs and wrappers. Each installer returns nothing and records into the session."""

from __future__ import annotations

import contextlib
import functools
import time
import warnings
from collections import Counter
from typing import ClassVar

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from torchpace.capture import batch_origin
from torchpace.capture.sites import built_by_library, is_torchpace_file, user_frame, user_location
from torchpace.facts.run import (
    LoaderFacts,
    ModelFacts,
    OptimizerFacts,
    WrapperFacts,
)
from torchpace.trace.model import CLOSURE_SPAN


def install_optimizer_hook(session) -> None:
    # Global hooks fire for every optimizer, however it is stepped: plain loops, GradScaler,
    # Lightning, Accelerate, HF Trainer all end in Optimizer.step.
    from torchpace.capture.frameworks import driving_framework

    first = [True]

    def stepped(optimizer, args, kwargs) -> None:
        if first[0]:  # the first step: who drives it (one look at the stack)
            first[0] = False
            session.facts.framework = driving_framework()
        session.boundaries.optimizer_stepped(optimizer)

    register_optimizer_step_post_hook(stepped)
    register_optimizer_step_pre_hook(_mark_closure)


def _mark_closure(optimizer, args, kwargs):
    """``optimizer.step(closure)`` runs the forward and backward inside the optimizer's span
    (Lightning's automatic optimization, LBFGS): a span around the closure lets the doctor
    count them as forward and backward, not as optimizer time."""
    # ``args`` starts with the optimizer itself (torch's step wrapper passes them whole)
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    if not callable(closure):
        return None

    def closure_in_a_span():
        with torch.profiler.record_function(CLOSURE_SPAN):
            return closure()

    if "closure" in kwargs:
        return args, {**kwargs, "closure": closure_in_a_span}
    return (args[0], closure_in_a_span, *args[2:]), kwargs


def install_model_facts(session, runtime) -> None:
    """The model and optimizers as the runtime finds them (capture/runtime.py)."""

    def model_found(module: torch.nn.Module) -> None:
        params = list(module.parameters())
        floating = next((p for p in params if p.is_floating_point() and not _lazy(p)), None)
        found = ModelFacts(
            class_name=type(module).__name__,
            location=runtime.location_of(module),
            parameters=_count(params),
            conv_layers=sum(isinstance(m, _CONV) for m in module.modules()),
            norm_layers=sum(isinstance(m, _NORM) for m in module.modules()),
            device=floating.device.type if floating is not None else "cpu",
            dtype=str(floating.dtype).removeprefix("torch.") if floating is not None else "",
        )
        if module is runtime.model:
            session.facts.model = found
        else:
            session.facts.other_models.append(found)

    def optimizer_built(optimizer: torch.optim.Optimizer) -> None:
        session.facts.optimizer_details.append(
            OptimizerFacts(
                class_name=type(optimizer).__name__,
                location=user_location(),
                parameters=_count(p for g in optimizer.param_groups for p in g["params"]),
                fused=optimizer.defaults.get("fused"),
                foreach=optimizer.defaults.get("foreach"),
            )
        )

    runtime.on_each_model(model_found)
    runtime.on_optimizer(optimizer_built)


def _lazy(p) -> bool:
    """A LazyLinear's weight has no shape until the first forward: it cannot be counted."""
    return torch.nn.parameter.is_lazy(p)


def _count(params) -> int:
    """Parameters that exist yet (lazy ones are counted as 0 until materialized)."""
    return sum(p.numel() for p in params if not _lazy(p))


_CONV = (torch.nn.modules.conv._ConvNd,)
_NORM = (
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
)


def install_backward_hook(session) -> None:
    """Sees the scalar each backward() starts from: the step's loss, for tune's loss check,
    and the step's end in a loop that builds no optimizer (capture/boundaries.py)."""
    original = torch.Tensor.backward

    @functools.wraps(original)
    def backward(self, *args, **kwargs):
        session.loss_backward(self)
        return original(self, *args, **kwargs)

    torch.Tensor.backward = backward


def install_call_counters(session) -> None:
    """Counts the calls that decide whether a tune knob applies (facts.CallFacts)."""
    calls = session.facts.calls

    def count_clip(original):
        @functools.wraps(original)
        def clip(*args, **kwargs):
            calls.grad_clipping += 1
            return original(*args, **kwargs)

        return clip

    import torch.nn.utils as nn_utils
    import torch.nn.utils.clip_grad as clip_grad

    for name in ("clip_grad_norm_", "clip_grad_value_"):
        wrapped = count_clip(getattr(clip_grad, name))
        setattr(clip_grad, name, wrapped)
        setattr(nn_utils, name, wrapped)

    def watch_zero_grad(owner) -> None:
        original = owner.zero_grad

        @functools.wraps(original)
        def zero_grad(self, set_to_none: bool = True):
            if not set_to_none:
                calls.zero_grad_keep += 1
            return original(self, set_to_none)

        owner.zero_grad = zero_grad

    watch_zero_grad(torch.optim.Optimizer)
    watch_zero_grad(torch.nn.Module)

    def flag(owner, name: str, attribute: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def flagged(*args, **kwargs):
            setattr(calls, attribute, True)
            return original(*args, **kwargs)

        setattr(owner, name, flagged)

    flag(torch.amp.GradScaler, "__init__", "grad_scaler")
    flag(torch.autocast, "__enter__", "autocast")
    flag(torch, "compile", "compiled")


# the session's phases whose steps are timed (capture/session.Phase values)
_TIMED_PHASES = ("window", "throughput", "measured")


def install_dataloader_hooks(session) -> None:
    original_init = DataLoader.__init__
    original_iter_init = _BaseDataLoaderIter.__init__
    original_next = _BaseDataLoaderIter.__next__
    # id(dataset) -> where the user built a loader on it: a framework that re-creates the
    # user's loader (Lightning adding a sampler, accelerate.prepare) keeps the user's line
    built_at: dict[int, str | None] = {}

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        with warnings_from_the_users_line():
            original_init(self, *args, **kwargs)
        try:
            dataset_len = len(self.dataset)
        except Exception:  # iterable datasets have no length
            dataset_len = None
        location = user_location()
        if id(self.dataset) in built_at and built_by_library():
            location = built_at[id(self.dataset)]
        else:
            built_at.setdefault(id(self.dataset), location)
        session.facts.loaders.append(
            LoaderFacts(
                location=location,
                num_workers=self.num_workers,
                pin_memory=bool(self.pin_memory),
                persistent_workers=bool(self.persistent_workers),
                prefetch_factor=self.prefetch_factor if self.num_workers > 0 else None,
                batch_size=self.batch_size,
                drop_last=bool(self.drop_last),
                dataset_len=dataset_len,
                dataset_type=type(self.dataset).__name__,
                transform=_transform_names(self.dataset),
            )
        )
        facts = session.facts.loaders[-1]
        try:
            facts.uint8_evidence = batch_origin.from_dataset(self.dataset, facts.transform)
        except Exception:  # reading the user's dataset must never break the user's run
            facts.uint8_evidence = None
        self._torchpace_index = len(session.facts.loaders) - 1
        session.loader_swap.loader_built(self._torchpace_index, self)

    @functools.wraps(original_iter_init)
    def iter_init(self, loader, *args, **kwargs):
        with warnings_from_the_users_line():
            original_iter_init(self, loader, *args, **kwargs)
        self._torchpace_index = getattr(loader, "_torchpace_index", None)
        if session.loader_swap.iterator_started(self._torchpace_index, self):
            session.boundaries.loader_started()  # an epoch's start, in this step's time

    @functools.wraps(original_next)
    def next_(self):
        session.first_activity()
        session.boundaries.dataloader_next()
        start = time.perf_counter()
        batch = None
        try:
            # the fewer-workers probe's switched steps take it from a stand-in
            batch = session.loader_swap.next_from(self, original_next)
            return batch
        finally:
            session.boundaries.fetched(time.perf_counter() - start, _batch_len(batch))
            index = getattr(self, "_torchpace_index", None)
            if index is not None:
                loader = session.facts.loaders[index]
                if loader.batches_seen == 0 and loader.uint8_evidence is None:
                    loader.uint8_evidence = _batch_evidence(batch)
                loader.batches_seen += 1
                if session.phase.value in _TIMED_PHASES:
                    loader.batches_timed += 1

    DataLoader.__init__ = init
    _BaseDataLoaderIter.__init__ = iter_init
    _BaseDataLoaderIter.__next__ = next_


@contextlib.contextmanager
def warnings_from_the_users_line():
    """torch warns with ``stacklevel=2`` to name the caller of the method that warns
    ("'pin_memory' argument is set as true but no accelerator is found"): inside a wrapper of
    ours, that caller is this file, and the user would read the warning as torchpace's. Such
    warnings are issued again at the user's line (their filters and once-per-line rule then
    apply as they would have); any other warning is issued again unchanged."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    frame = user_frame(3)
    for w in caught:
        if frame is not None and is_torchpace_file(w.filename):
            filename, lineno, module_globals = (
                frame.f_code.co_filename,
                frame.f_lineno,
                frame.f_globals,
            )
        else:
            filename, lineno, module_globals = w.filename, w.lineno, None
        registry = module_globals.setdefault("__warningregistry__", {}) if module_globals else None
        module = module_globals.get("__name__") if module_globals else None
        warnings.warn_explicit(w.message, w.category, filename, lineno, module, registry)


def install_wrapper_hooks(session) -> None:
    def watch(cls, kind):
        original = cls.__init__

        @functools.wraps(original)
        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            session.facts.wrappers.append(wrapper_facts(self, kind))

        cls.__init__ = init

    watch(torch.nn.DataParallel, "DataParallel")
    watch(torch.nn.parallel.DistributedDataParallel, "DistributedDataParallel")


def wrapper_facts(wrapper, kind: str) -> WrapperFacts:
    """What a DataParallel/DDP wrapper was built with: DDP's settings are its attributes."""
    facts = WrapperFacts(kind, user_location(), getattr(wrapper, "find_unused_parameters", None))
    if kind != "DistributedDataParallel":
        return facts
    cap = getattr(wrapper, "bucket_bytes_cap", None)
    facts.bucket_cap_mb = round(cap / (1 << 20), 3) if isinstance(cap, int) else None
    facts.gradient_as_bucket_view = getattr(wrapper, "gradient_as_bucket_view", None)
    facts.static_graph = getattr(wrapper, "static_graph", None)
    facts.broadcast_buffers = getattr(wrapper, "broadcast_buffers", None)
    module = getattr(wrapper, "module", None)
    facts.has_buffers = any(True for _ in module.buffers()) if module is not None else None
    group = getattr(wrapper, "process_group", None)
    try:
        facts.world_size = group.size() if group is not None else None
    except Exception:  # a group torch cannot size here: the fact is only unknown
        facts.world_size = None
    return facts


class SyncRecorder:
    """Counts the calls that make the CPU wait for the GPU, by the user's source line.

    Active only inside the profiled window: the methods are swapped in at its start and back
    at its end, so steps outside the window pay nothing.
    """

    TENSOR_METHODS: ClassVar[dict[str, str]] = {
        "item": "item", "tolist": "tolist", "numpy": "numpy", "cpu": "cpu",
        "nonzero": "nonzero", "__repr__": "print", "__format__": "print",
    }  # fmt: skip

    def __init__(self):
        # (kind, user's line, device of the tensor): an .item() on a CPU tensor (Adam's step
        # counter, a CPU metric) makes no GPU wait, and the doctor must be able to tell.
        self.counts: Counter[tuple[str, str | None, str | None]] = Counter()
        self._originals: dict[tuple[object, str], object] = {}
        self._depth = 0  # f"{loss:.3f}" calls __format__ then item: count the outer call only

    def _wrap(self, owner, name: str, kind: str, device: str | None = None) -> None:
        """``device``: fixed for device-wide calls; else that of the tensor called on."""
        original = getattr(owner, name, None)
        if original is None:  # an API this torch build lacks
            return
        counts = self.counts

        @functools.wraps(original)
        def recorded(*args, **kwargs):
            if self._depth == 0:
                on = device or _device_type(args[0] if args else None)
                counts[(kind, user_location(), on)] += 1
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1

        self._originals[(owner, name)] = original
        setattr(owner, name, recorded)

    def start(self) -> None:
        for name, kind in self.TENSOR_METHODS.items():
            self._wrap(torch.Tensor, name, kind)
        self._wrap(torch, "nonzero", "nonzero")
        self._wrap(torch.cuda, "synchronize", "synchronize", "cuda")
        self._wrap(torch.cuda.Stream, "synchronize", "synchronize", "cuda")
        self._wrap(torch.cuda.Event, "synchronize", "synchronize", "cuda")

    def stop(self) -> None:
        for (owner, name), original in self._originals.items():
            setattr(owner, name, original)
        self._originals.clear()


def _transform_names(dataset) -> list[str] | None:
    transform = getattr(dataset, "transform", None)
    if transform is None:
        return None
    inner = getattr(transform, "transforms", None)  # torchvision's Compose
    if isinstance(inner, (list, tuple)):
        return [type(t).__name__ for t in inner]
    return [type(transform).__name__]


def _batch_evidence(batch) -> str | None:
    """8-bit origin read from the first batch's values, once per loader (a warm-up step
    pays for it, never a measured one); never raises into the user's loop."""
    try:
        return batch_origin.from_batch(batch)
    except Exception:
        return None


def _batch_len(batch) -> int:
    """Samples in a batch: the first dimension of its first tensor (0 when none)."""
    while isinstance(batch, (list, tuple, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    if isinstance(batch, torch.Tensor) and batch.dim() > 0:
        return int(batch.shape[0])
    return 0


def _device_type(value) -> str | None:
    return value.device.type if isinstance(value, torch.Tensor) else None
