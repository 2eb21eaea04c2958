"""fused-optimizer: the optimizer's update in one fused kernel, or multi-tensor (foreach).

torch's optimizers update parameter by parameter in a Python loop unless told otherwise
(``foreach`` is the default only for CUDA tensors). ``fused=True`` runs the whole update in
one kernel per device and dtype (CUDA, and the CPU since torch 2.4); ``foreach=True`` groups
the tensors into a few multi-tensor ops. Same arithmetic, another order of operations: the
parameters can differ in the last bits.
"""

from __future__ import annotations

import inspect

from torchpace.knobs._common import location_of
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

# torch's optimizers with a fused implementation, and those with a foreach one (torch 2.4+;
# apply() checks the constructor's signature in the torch that runs).
FUSED = frozenset({"SGD", "Adam", "AdamW", "Adagrad"})
FOREACH = frozenset(
    {"SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam",
     "RMSprop", "Rprop"}
)  # fmt: skip
CPU_FUSED_SINCE = (2, 4)
VALUES = ("fused", "foreach")


class FusedOptimizer(Knob):
    name = "fused-optimizer"
    value_type = str
    choices = ("fused", "foreach")
    title = "Fused or multi-tensor (foreach) optimizer step"
    answers = ("TP310", "TP313")
    practices = ("P10",)
    switchable = True
    multi_arm = True

    def plan(self, ctx: TuneContext) -> Plan:
        details = ctx.facts.optimizer_details
        if not details:
            return not_applicable("no optimizer was seen in the script")
        free = [o for o in details if o.fused is None and o.foreach is None]
        if not free:
            o = details[0]
            return not_applicable(
                f"the script sets fused/foreach itself on {o.class_name}{location_of(o.location)}"
            )
        names = {o.class_name for o in free}
        values = []
        if names & FUSED and (ctx.accelerator or ctx.torch_version >= CPU_FUSED_SINCE):
            values.append("fused")
        if names & FOREACH and not ctx.accelerator:  # on CUDA foreach is already the default
            values.append("foreach")
        if not values:
            return not_applicable(
                f"{', '.join(sorted(names))} has no fused or foreach implementation "
                + ("that is not already the default on CUDA" if ctx.accelerator else "here")
            )
        return Plan(tuple(values), f"{', '.join(sorted(names))} steps parameter by parameter")

    def apply(self, value, runtime) -> Notes:
        import torch

        user_location = runtime.user_location  # the user's line, as the capture reads it

        value = str(value)
        if value not in VALUES:
            raise ValueError(f"fused-optimizer is one of {VALUES}, not {value!r}")
        notes = Notes(f"{value}=True on torch optimizers that accept it")

        def set_kwarg(cls: type, kwargs: dict) -> dict:
            where = f"{cls.__name__} at {user_location() or '?'}"
            if kwargs.get("fused") is not None or kwargs.get("foreach") is not None:
                notes.add(f"{where}: left alone (the script sets fused/foreach)")
                return kwargs
            if value not in inspect.signature(cls.__init__).parameters:
                notes.add(f"{where}: left alone (no {value} implementation)")
                self._without.append(where)
                return kwargs
            if kwargs.get("differentiable"):
                notes.add(f"{where}: left alone (differentiable=True)")
                return kwargs
            if value == "fused":
                # a generator of parameters is read once here and handed on as a list
                kwargs["params"] = params = list(kwargs.get("params", ()))
                unsupported = _unsupported_devices(torch, params)
                if unsupported:
                    notes.add(f"{where}: left alone (parameters on {unsupported})")
                    return kwargs
            kwargs[value] = True
            notes.add(f"{where}: {value}=True")
            return kwargs

        # the optimizers left alone for want of the value's implementation: another value's
        # arm would not reach them as its own trial does (switch_arms)
        self._without: list[str] = []
        runtime.filter_optimizer_kwargs(set_kwarg)
        self._notes = notes  # for check(), in this process
        return notes

    def check(self, value, runtime) -> str | None:
        """At least one optimizer runs with the flag: else the knob measured nothing."""
        value = str(value)
        optimizers = list(runtime.optimizers)
        if not optimizers or any(g.get(value) for o in optimizers for g in o.param_groups):
            return None
        notes = getattr(self, "_notes", None)
        why = "; ".join(notes.lines) if notes is not None and notes.lines else ""
        return f"no optimizer runs with {value}=True at the timed steps" + (
            f" ({why})" if why else ""
        )

    def switch(self, value, runtime):
        """The flag on the param groups this knob set, and the script's own (None) back:
        torch's optimizers read ``fused``/``foreach`` from the group at every step. On the
        CPU both paths keep the step count in the same CPU tensor. On a GPU the fused step
        keeps it on the parameter's device, the other path on the CPU (read there without a
        sync): each parameter's ``state["step"]`` moves with the flag, as each path would
        have made it, so that neither arm pays for the other's layout."""
        import torch

        value = str(value)
        groups = [g for o in runtime.optimizers for g in o.param_groups if g.get(value)]
        if not groups:
            return f"no optimizer runs with {value}=True to switch"
        moved = [g for g in groups if value == "fused" and not g.get("capturable")]
        states = [o.state for o in runtime.optimizers]

        def set_flag(on: bool) -> None:
            for group in groups:
                group[value] = True if on else None
            move_steps(torch, moved, states, on)

        return set_flag

    def switch_arms(self, values, runtime):
        """Fused and foreach in one process (arm 1 the value applied, arm 2 the other, arm
        0 the script's own: neither flag) on the param groups this knob set; each step's
        state moves with the flag as in ``switch``."""
        if len(values) == 1:
            return super().switch_arms(values, runtime)
        import torch

        values = [str(v) for v in values]
        groups = [g for o in runtime.optimizers for g in o.param_groups if g.get(values[0])]
        if not groups:
            return f"no optimizer runs with {values[0]}=True to switch"
        if getattr(self, "_without", None):
            return (f"{', '.join(self._without)} has no {values[0]} implementation: its "
                    "values are tried one at a time")  # fmt: skip
        moved = [g for g in groups if "fused" in values and not g.get("capturable")]
        states = [o.state for o in runtime.optimizers]

        def set_arm(arm: int) -> None:
            flag = values[arm - 1] if arm else None
            for group in groups:  # never both: torch refuses fused with foreach
                for name in VALUES:
                    group[name] = True if name == flag else None
            move_steps(torch, moved, states, flag == "fused")

        return set_arm

    def describe(self, value) -> str:
        return f"optimizer {value}=True"

    def source_edits(self, value) -> list[SourceEdit]:
        return [SourceEdit("optimizer-kwargs", kwargs={str(value): True})]


def move_steps(torch, groups: list, states: list, fused: bool, device_of=None) -> None:
    """Each parameter's ``state["step"]`` where the path about to step expects it: on the
    parameter's device as float32 for the fused kernels (torch's ``_init_group`` makes it
    so), on the CPU in the default scalar dtype for the others. ``device_of`` (tests: a
    fake device) gives a parameter's device."""
    device_of = device_of or (lambda p: p.device)
    try:
        from torch.optim.optimizer import _get_scalar_dtype
    except ImportError:  # older torch: float32 unless the default dtype is float64

        def _get_scalar_dtype(is_fused=None):
            default = torch.get_default_dtype()
            return torch.float32 if is_fused or default != torch.float64 else default

    for group in groups:
        for p in group["params"]:
            state = next((s[p] for s in states if p in s), None)
            step = state.get("step") if state is not None else None
            if not isinstance(step, torch.Tensor):
                continue
            device = device_of(p) if fused else torch.device("cpu")
            state["step"] = step.to(device=device, dtype=_get_scalar_dtype(is_fused=fused))


def _unsupported_devices(torch, params: list) -> str:
    """Where fused cannot run: a device type without fused kernels, or non-float params."""
    try:
        from torch.optim.optimizer import _get_fused_kernels_supported_devices

        supported = set(_get_fused_kernels_supported_devices())
    except ImportError:  # older torch: CUDA only
        supported = {"cuda"}
    tensors = []
    for p in params:
        if isinstance(p, dict):  # a param group: its "params" may be a generator too
            group = p["params"]
            p["params"] = group = [group] if isinstance(group, torch.Tensor) else list(group)
            tensors.extend(group)
        else:
            tensors.append(p)
    bad = set()
    for t in tensors:
        if isinstance(t, tuple):  # named parameters: (name, tensor)
            t = t[1]
        if not isinstance(t, torch.Tensor):
            continue
        if t.device.type not in supported or not t.is_floating_point():
            bad.add(f"{t.device.type}/{str(t.dtype).removeprefix('torch.')}")
    return ", ".join(sorted(bad))


KNOB = FusedOptimizer()
