"""Patch points in the user's process, shared by the capture and by tune's knobs.

An unmodified script never hands torchpace its model, optimizer or loaders. These patches
find them as the script builds and first uses them, and let a listener change them:

- the model: the first module called whose parameters an optimizer holds (the root, since a
  model's own forward pre-hook fires before its submodules'); listeners get it once, before
  its first forward, and input filters see the arguments of each of its calls;
- the other trained models: a GAN trains two networks, a distillation loop a student and a
  projection head. Until the first training iteration ends (an optimizer steps a second
  time), every module called whose trained parameters an optimizer holds and that shares no
  parameter with a model already found is one more (a submodule shares its parent's, so it
  never is). ``on_each_model`` listeners (tune's knobs: compile, autocast, channels_last)
  get every one, the first included; ``on_model`` listeners (the doctor's facts) the first;
- optimizers: keyword filters run before construction (``fused=True``), listeners after;
- DataLoaders: keyword filters run before construction (``num_workers=4``), batch filters
  on every batch an iterator returns; each iterator holds its loader (``_torchpace_loader``).

One runtime per process (``runtime()``); installing it twice is a no-op. Listeners run in
the order they were added; a listener that raises is torchpace's bug and is re-raised with
what it was doing, so it is never mistaken for the user's error.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from torchpace.capture.sites import user_location

ModelListener = Callable[[torch.nn.Module], None]
InputFilter = Callable[[tuple], tuple]  # the model's positional args -> new args
KwargsFilter = Callable[[dict[str, Any]], dict[str, Any]]
OptimizerKwargsFilter = Callable[[type, dict[str, Any]], dict[str, Any]]
OptimizerListener = Callable[[torch.optim.Optimizer], None]
BatchFilter = Callable[[Any], Any]


class ChildRuntime:
    def __init__(self) -> None:
        self.models: list[torch.nn.Module] = []  # in the order of their first calls
        self._locations: dict[int, str | None] = {}  # id(model) -> where it was first called
        self._model_params: set[int] = set()  # ids of every found model's parameters
        self._judged: set[int] = set()  # ids of modules already seen by the finder
        self._steps_by_optimizer: dict[int, int] = {}
        self._step_hook = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self._model_listeners: list[ModelListener] = []
        self._each_model_listeners: list[ModelListener] = []
        self._input_filters: list[InputFilter] = []
        self._optimizer_kwargs: list[OptimizerKwargsFilter] = []
        self._optimizer_listeners: list[OptimizerListener] = []
        self._loader_kwargs: list[KwargsFilter] = []
        # the most batches a DataLoader built so far may hold made ahead of the script (its
        # workers' prefetch): a switched trial's blocks settle over them (knobs.base.Switch)
        self.batches_ahead = 0
        self._batch_filters: list[BatchFilter] = []
        # the data set of the loader whose batch the batch filters are seeing (a filter that
        # depends on the loader, e.g. on its transform, tells them apart by it)
        self.batch_dataset = None
        self._finder = None
        self._installed = False
        # (who, KnobRecords) once a configuration's knobs are applied in this process:
        # `torchpace run`'s child, a tune trial, or torchpace.apply(); applying twice would
        # stack the patches, so a second apply is refused
        self.applied_by: tuple[str, list] | None = None
        # the knobs a switched trial switches in this process (its spec's switch and arms),
        # known before the knobs apply: host-malloc leaves the warm-up to glibc's own state,
        # which its switch reads and puts back (knobs/host_malloc.py)
        self.switched_knobs: frozenset[str] = frozenset()

    @property
    def model(self) -> torch.nn.Module | None:
        """The first trained model called: the one the doctor's facts describe."""
        return self.models[0] if self.models else None

    @staticmethod
    def user_location() -> str | None:
        """'train.py:42': the user's line that is running now (for a knob's record)."""
        return user_location()

    # --- what listeners register ---------------------------------------------------
    def on_model(self, listener: ModelListener) -> None:
        if self.model is not None:  # added late (torchpace.apply after a first forward)
            listener(self.model)
        self._model_listeners.append(listener)

    def on_each_model(self, listener: ModelListener) -> None:
        """Every trained model, the first and the others, each once before its first call."""
        for model in self.models:  # added late (torchpace.apply after a first forward)
            listener(model)
        self._each_model_listeners.append(listener)

    def location_of(self, model: torch.nn.Module) -> str | None:
        """'train.py:42': where this model was first called."""
        return self._locations.get(id(model))

    def filter_model_inputs(self, f: InputFilter) -> None:
        if not self._input_filters:  # the models found so far get the hook now
            for model in self.models:
                model.register_forward_pre_hook(self._model_inputs)
        self._input_filters.append(f)

    def filter_optimizer_kwargs(self, f: OptimizerKwargsFilter) -> None:
        self._optimizer_kwargs.append(f)

    def on_optimizer(self, listener: OptimizerListener) -> None:
        for optimizer in self.optimizers:
            listener(optimizer)
        self._optimizer_listeners.append(listener)

    def filter_loader_kwargs(self, f: KwargsFilter) -> None:
        self._loader_kwargs.append(f)

    def filter_batches(self, f: BatchFilter) -> None:
        if not self._batch_filters:
            self._patch_batches()
        self._batch_filters.append(f)

    # --- the patches ---------------------------------------------------------------
    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        self._patch_optimizers()
        self._patch_loaders()
        self._finder = torch.nn.modules.module.register_module_forward_pre_hook(self._find_model)
        self._step_hook = register_optimizer_step_post_hook(self._optimizer_stepped)

    def _find_model(self, module: torch.nn.Module, args: tuple):
        if id(module) in self._judged:  # settled: never a model
            return None
        params = [p for p in module.parameters() if p.requires_grad]
        if not params or any(id(p) in self._model_params for p in params):
            # a loss module, an activation; a found model's submodule, or a wrapper of one
            self._judged.add(id(module))
            return None
        # Not settled by being left out here: its optimizer may not be built yet.
        held = {id(p) for o in self.optimizers for g in o.param_groups for p in g["params"]}
        if self.optimizers and not any(id(p) in held for p in params):
            return None  # a frozen encoder, a teacher model: not what is trained
        if self.models and not self.optimizers:
            return None  # one more model is one that an optimizer trains
        self.models.append(module)
        self._locations[id(module)] = user_location(skip=3)
        self._model_params.update(id(p) for p in module.parameters())
        if module is self.model:
            for listener in self._model_listeners:
                _call(listener, module, "a model listener")
        for listener in self._each_model_listeners:
            _call(listener, module, "a model listener")
        if not self._input_filters:
            return None  # no hook on the model: its calls keep torch's fast path
        module.register_forward_pre_hook(self._model_inputs)
        return self._model_inputs(module, args)

    def _optimizer_stepped(self, optimizer, args, kwargs) -> None:
        # A second step of any optimizer: the first training iteration is over, and every
        # model it trains has been called. The finder (a hook on every module call, which
        # also keeps torch off its fast call path) goes.
        if self._finder is None:  # done finding: this hook stays, and does nothing
            return
        count = self._steps_by_optimizer.get(id(optimizer), 0) + 1
        self._steps_by_optimizer[id(optimizer)] = count
        if count >= 2:
            self.stop_finding_models(in_step_hook=True)

    def stop_finding_models(self, in_step_hook: bool = False) -> None:
        """``in_step_hook``: called from this runtime's own optimizer step post-hook, which
        torch is iterating over with every other global one: removing it there raises
        "OrderedDict mutated during iteration" whenever a hook registered after it (the
        fidelity check's step timer, a script's own) is still to come. It stays, idle."""
        handles = (self._finder,) if in_step_hook else (self._finder, self._step_hook)
        for handle in handles:
            if handle is not None:
                handle.remove()
        self._finder = None
        if not in_step_hook:
            self._step_hook = None
        self._judged.clear()

    def _model_inputs(self, module, args: tuple):
        if not self._input_filters:
            return None
        for f in self._input_filters:
            args = _call(f, args, "a model input filter")
        return args

    def _patch_optimizers(self) -> None:
        runtime = self
        original_base = torch.optim.Optimizer.__init__

        # Listeners: every optimizer, torch's or the user's own, runs the base __init__.
        @functools.wraps(original_base)
        def base_init(self, *args, **kwargs):
            original_base(self, *args, **kwargs)
            runtime.optimizers.append(self)
            for listener in runtime._optimizer_listeners:
                _call(listener, self, "an optimizer listener")

        torch.optim.Optimizer.__init__ = base_init

        # Keyword filters act on the constructor the user calls (SGD(..., fused=True)):
        # torch's own optimizer classes, the ones whose keywords a knob may set.
        for cls in _torch_optimizers():
            cls_init = cls.__init__

            def init(self, *args, __cls=cls, __init=cls_init, **kwargs):
                if type(self) is __cls and runtime._optimizer_kwargs:
                    bound = _bind(__init, self, args, kwargs)
                    if bound is not None:
                        args, kwargs = (), bound
                        for f in runtime._optimizer_kwargs:
                            kwargs = _call(f, __cls, kwargs, "an optimizer keyword filter")
                __init(self, *args, **kwargs)

            cls.__init__ = functools.wraps(cls_init)(init)

    def _patch_loaders(self) -> None:
        original_init = DataLoader.__init__
        runtime = self

        @functools.wraps(original_init)
        def init(self, *args, **kwargs):
            if runtime._loader_kwargs:
                bound = _bind(original_init, self, args, kwargs)
                if bound is not None:
                    args, kwargs = (), bound
                    for f in runtime._loader_kwargs:
                        kwargs = _call(f, kwargs, "a DataLoader keyword filter")
            original_init(self, *args, **kwargs)
            ahead = self.num_workers * (self.prefetch_factor or 2) if self.num_workers else 0
            runtime.batches_ahead = max(runtime.batches_ahead, ahead)

        DataLoader.__init__ = init

        # Each iterator holds its loader: a script that drops its loader (``for batch in
        # DataLoader(...)``) keeps it alive through the iterator, for a knob that makes
        # another iterator of it (num-workers' switch).
        original_iter_init = _BaseDataLoaderIter.__init__

        @functools.wraps(original_iter_init)
        def iter_init(self, loader, *args, **kwargs):
            original_iter_init(self, loader, *args, **kwargs)
            self._torchpace_loader = loader

        _BaseDataLoaderIter.__init__ = iter_init

    def _patch_batches(self) -> None:
        """Installed with the first batch filter: without one, a batch costs no extra call."""
        original_next = _BaseDataLoaderIter.__next__
        runtime = self

        @functools.wraps(original_next)
        def next_(self):
            batch = original_next(self)
            runtime.batch_dataset = getattr(self, "_dataset", None)
            for f in runtime._batch_filters:
                batch = _call(f, batch, "a batch filter")
            return batch

        _BaseDataLoaderIter.__next__ = next_


_runtime: ChildRuntime | None = None


def runtime() -> ChildRuntime:
    """The process's runtime, installed on first use."""
    global _runtime
    if _runtime is None:
        _runtime = ChildRuntime()
        _runtime.install()
    return _runtime


class TorchpaceHookError(RuntimeError):
    """A torchpace patch failed inside the user's process: torchpace's bug, not theirs."""


def _call(f, *args):
    *call_args, what = args
    try:
        return f(*call_args)
    except Exception as e:
        raise TorchpaceHookError(
            f"torchpace: {what} ({getattr(f, '__qualname__', f)}) failed: {e!r}; this is a "
            "torchpace bug: rerun without the tune configuration and please report it"
        ) from e


def _bind(function, self, args: tuple, kwargs: dict) -> dict | None:
    """Positional arguments turned into keywords, so filters see one shape; None if the
    signature cannot be read (then the call goes through unfiltered)."""
    try:
        signature = inspect.signature(function)
        bound = signature.bind(self, *args, **kwargs)
    except (TypeError, ValueError):
        return None
    arguments = dict(bound.arguments)
    arguments.pop(next(iter(signature.parameters)))  # self
    for name, param in signature.parameters.items():
        if param.kind is inspect.Parameter.VAR_KEYWORD and name in arguments:
            arguments.update(arguments.pop(name))
        elif param.kind is inspect.Parameter.VAR_POSITIONAL and name in arguments:
            if arguments[name]:
                return None  # *args we cannot name: leave the call alone
            arguments.pop(name)
    return arguments


def _torch_optimizers() -> list[type]:
    return [
        cls
        for cls in vars(torch.optim).values()
        if isinstance(cls, type)
        and issubclass(cls, torch.optim.Optimizer)
        and cls is not torch.optim.Optimizer
    ]
