"""amp: automatic mixed precision (P19), the article's sixth optimisation.

"bf16": the model's forward runs under ``torch.autocast(dtype=bfloat16)``. "fp16": under
``torch.autocast(dtype=float16)`` with a GradScaler, which an unmodified script lacks, so
the knob places its three calls around the script's own: the backward starts from the loss
times the scale, ``unscale_`` runs before the script's ``clip_grad_norm_``/``clip_grad_value_``,
and each ``optimizer.step()`` becomes ``scaler.step(optimizer); scaler.update()``.

Autocast covers each trained model's forward (capture/runtime.py: a GAN's two networks;
its class is swapped for a subclass whose forward
enters autocast: unlike an instance attribute, a ``copy.deepcopy`` of the model, an EMA
copy, keeps it). Floating outputs come back as float32, so the loss is computed in float32,
as autocast itself would for the losses it knows (cross-entropy, MSE are on its fp32 list).
"""

from __future__ import annotations

import functools

from torchpace.knobs._common import location_of
from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

NO_NATIVE_BF16 = (
    "this CPU has no native bf16 (AVX512-BF16/AMX): bf16 autocast runs slower here; "
    "--try-all tries it anyway"
)
TRY_ALL_BF16 = (
    "tried because of --try-all: this CPU has no native bf16 (AVX512-BF16/AMX), so bf16 "
    "autocast is expected to run slower than float32 here"
)


class Amp(Knob):
    name = "amp"
    value_type = str
    choices = ("bf16", "fp16")
    title = "Mixed precision: autocast bf16, or fp16 with a GradScaler"
    answers = ("TP307", "TP311", "TP314")
    practices = ("P19",)
    changes_numerics = True

    def plan(self, ctx: TuneContext) -> Plan:
        calls = ctx.facts.calls
        if calls.autocast:
            return not_applicable("the script already uses torch.autocast")
        if not ctx.accelerator:
            if ctx.cpu.bf16_native:
                return Plan(("bf16",), "the CPU runs bf16 natively (AVX512-BF16/AMX)")
            if ctx.try_all:
                return Plan(("bf16",), TRY_ALL_BF16)
            return not_applicable(NO_NATIVE_BF16)
        values, why = [], []
        if ctx.cuda_bf16:
            values.append("bf16")
        else:
            why.append("this GPU has no fast bf16")
        fp16_not = _fp16_blocked(ctx)
        if fp16_not:
            why.append(f"fp16 not tried: {fp16_not}")
        else:
            values.append("fp16")
        if not values:
            return not_applicable("; ".join(why))
        return Plan(tuple(values), "; ".join(why) or "the GPU runs fp32 matmuls without autocast")

    def apply(self, value, runtime) -> Notes:
        import torch

        dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
        if value not in dtypes:
            raise ValueError(f"amp is one of {sorted(dtypes)}, not {value!r}")
        dtype = dtypes[value]
        scaling = _Scaling(torch, runtime) if value == "fp16" else None
        notes = Notes(
            f"autocast {value} over the model's forward, float32 outputs"
            + ("; GradScaler around backward, clipping and optimizer.step" if scaling else "")
        )

        # models found before this knob (torchpace.apply after a first forward): not inside
        # their first call, so only their later calls are autocast
        late = {id(m) for m in runtime.models}
        self._value, self._on = value, [True]  # a switched trial's switch (switch())

        def model_found(module) -> None:
            param = next((p for p in module.parameters() if p.is_floating_point()), None)
            device = param.device.type if param is not None else "cpu"
            _autocast_forward(torch, module, device, dtype, self._on)
            if id(module) not in late:
                _autocast_this_call(torch, module, device, dtype)
            notes.add(f"{type(module).__name__}{location_of(runtime.location_of(module))}: "
                      f"autocast({device!r}, {dtype})")  # fmt: skip
            if scaling is not None:
                scaling.start(device)

        runtime.on_each_model(model_found)
        return notes

    def switches(self, value) -> bool:
        """bf16 only: autocast keeps no state from one forward to the next (fp16's GradScaler
        does: its scale, its skipped steps), so a switched trial enters it or not per
        forward. An fp16 trial is an ordinary one, and says nothing of bf16's switch."""
        return value == "bf16"

    def switch(self, value, runtime):
        """Each model's forward under autocast (True), or as the script wrote it (False),
        from its next call: bf16 only."""
        if value != "bf16":
            return "fp16's GradScaler keeps a scale from step to step: not switched"
        if getattr(self, "_value", None) != value:
            return "amp was not applied in this process"

        def set_autocast(on: bool) -> None:
            self._on[0] = on

        return set_autocast

    def describe(self, value) -> str:
        return {"bf16": "autocast bf16", "fp16": "autocast fp16 + GradScaler"}.get(value, value)

    # No edit: autocast wraps the forward and the loss, and the GradScaler three lines of
    # the loop; where they go is the user's to see (docs/knobs.md shows the pattern).


def _fp16_blocked(ctx: TuneContext) -> str:
    calls, optimizers = ctx.facts.calls, ctx.facts.optimizer_details
    if calls.grad_scaler:
        return "the script builds its own GradScaler"
    if len(optimizers) > 1:
        return ("a GradScaler with several optimizers needs one update() per iteration, "
                "which tune cannot place in an unmodified script")  # fmt: skip
    if any(o.class_name == "LBFGS" for o in optimizers):
        return "LBFGS steps with a closure, which GradScaler does not support"
    return ""


def _autocast_forward(torch, module, device: str, dtype, on: list) -> None:
    """Swaps the module's class for a subclass whose forward runs under autocast (while
    ``on[0]``: a switched trial turns it off in its reference blocks)."""
    cls = type(module)
    if getattr(cls, "_torchpace_autocast", False):
        return

    def forward(self, *args, **kwargs):
        with torch.autocast(device, dtype=dtype, enabled=on[0]):
            out = cls.forward(self, *args, **kwargs)
        return _to_float32(torch, out, dtype)

    namespace = {"forward": forward, "_torchpace_autocast": True,
                 "__module__": cls.__module__, "__qualname__": cls.__qualname__}  # fmt: skip
    module.__class__ = type(cls.__name__, (cls,), namespace)


def _autocast_this_call(torch, module, device: str, dtype) -> None:
    """The model is found in a pre-hook of its first call, which has already picked the
    forward it runs: autocast is entered now and left by a one-shot forward hook (always
    called, an exception included)."""
    autocast = torch.autocast(device, dtype=dtype)
    autocast.__enter__()

    def leave(module, args, out):
        handle.remove()
        autocast.__exit__(None, None, None)
        return _to_float32(torch, out, dtype)

    handle = module.register_forward_hook(leave, always_call=True)


def _to_float32(torch, out, dtype):
    if isinstance(out, torch.Tensor):
        return out.float() if out.dtype == dtype else out
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # a namedtuple
        return type(out)(*(_to_float32(torch, x, dtype) for x in out))
    if isinstance(out, (list, tuple)):
        return type(out)(_to_float32(torch, x, dtype) for x in out)
    if isinstance(out, dict):
        if type(out) is dict:
            return {k: _to_float32(torch, v, dtype) for k, v in out.items()}
        for k in list(out):  # a dict subclass (a model-output record): set in place
            out[k] = _to_float32(torch, out[k], dtype)
    return out


class _Scaling:
    """A GradScaler placed around an unmodified loop's backward, clipping and step."""

    def __init__(self, torch, runtime):
        self.torch = torch
        self.runtime = runtime
        self.scaler = None  # made when the model is found: its device decides the scaler's
        self.unscaled: set[int] = set()  # optimizers unscaled since the last update
        self.stepping = False
        self._patch_backward()
        self._patch_clipping()
        runtime.on_optimizer(self._wrap_step)

    def start(self, device: str) -> None:
        # once: a second model (a GAN's generator) shares the first one's scaler, as torch's
        # AMP examples do for several losses and optimizers
        if self.scaler is None:
            self.scaler = self.torch.amp.GradScaler(device)

    def _patch_backward(self) -> None:
        # Tensor.backward calls torch.autograd.backward: patching the latter sees both
        # spellings. The loss itself is left alone (what the capture records as the loss):
        # the backward starts from a gradient of `scale` instead of 1, the same as
        # scaler.scale(loss).backward().
        autograd, scaling = self.torch.autograd, self
        original = autograd.backward

        @functools.wraps(original)
        def backward(tensors, grad_tensors=None, *args, **kwargs):
            t = tensors
            if (scaling.scaler is not None and grad_tensors is None
                    and isinstance(t, scaling.torch.Tensor) and t.numel() == 1
                    and t.is_floating_point()):  # fmt: skip
                grad_tensors = scaling.scaler.scale(scaling.torch.ones_like(t))
            return original(tensors, grad_tensors, *args, **kwargs)

        autograd.backward = backward

    def _patch_clipping(self) -> None:
        import torch.nn.utils as nn_utils
        import torch.nn.utils.clip_grad as clip_grad

        for name in ("clip_grad_norm_", "clip_grad_value_"):
            clip = self._unscale_first(getattr(clip_grad, name))
            setattr(clip_grad, name, clip)
            setattr(nn_utils, name, clip)

    def _unscale_first(self, original):
        @functools.wraps(original)
        def clip(*args, **kwargs):
            self.unscale_all()
            return original(*args, **kwargs)

        return clip

    def unscale_all(self) -> None:
        """Clipping must see true gradients: unscale every optimizer not yet unscaled."""
        if self.scaler is None:
            return
        for optimizer in self.runtime.optimizers:
            if id(optimizer) not in self.unscaled and _has_grads(optimizer):
                self.scaler.unscale_(optimizer)
                self.unscaled.add(id(optimizer))

    def _wrap_step(self, optimizer) -> None:
        original = optimizer.step  # bound: an instance attribute, as LR schedulers do

        @functools.wraps(original)
        def step(*args, **kwargs):
            # scaler.step calls optimizer.step itself: that inner call is the real step
            if self.scaler is None or self.stepping or args or kwargs or not _has_grads(optimizer):
                return original(*args, **kwargs)
            self.stepping = True
            try:
                result = self.scaler.step(optimizer)  # skipped on inf/NaN gradients
                self.scaler.update()
            finally:
                self.stepping = False
                self.unscaled.clear()
            return result

        optimizer.step = step


def _has_grads(optimizer) -> bool:
    return any(p.grad is not None for g in optimizer.param_groups for p in g["params"])


KNOB = Amp()
