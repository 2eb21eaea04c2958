"""The floating-point work and the bytes of one training step, as plain data (part of
``run_facts.json``).

Counted by ``capture/flops.py`` inside the user's process over one step that is not timed
(the step after the measured ones), read by the doctor's speed-of-light analysis
(``doctor/speed_of_light.py``). FLOPs are counted from the shapes of each op with a formula
(matmuls, convolutions, attention: torch's ``flop_counter`` formulas), a multiply-add being
two FLOPs; other aten ops (elementwise, reductions, copies) count bytes only, as MFU's
convention has it. Ops outside the aten namespace (a custom C++ or Triton op) have no
formula: their names are listed in ``uncounted_ops``. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OpWork:
    """One aten op's work in the counted step, summed over its calls."""

    name: str  # the profiler's spelling, "aten::addmm", so that traces match it
    calls: int
    flops_forward: int  # outside backward (the forward, the loss, the optimizer update)
    flops_backward: int  # inside the autograd engine
    bytes: int  # every tensor input's and output's bytes, each call (views move nothing)
    has_formula: bool  # False: its FLOPs are not counted (elementwise) or not known (custom)
    dtype: str | None = None  # of its first tensor input ("float32"), where it has a formula

    @property
    def flops(self) -> int:
        return self.flops_forward + self.flops_backward


@dataclass
class ModuleWork:
    """FLOPs inside one module (its qualified name in the model, torch's ModuleTracker
    spelling: "GPT.transformer.h.0"), forward and backward apart."""

    name: str
    flops_forward: int
    flops_backward: int


@dataclass
class FlopFacts:
    counted: bool = False  # a step was counted whole
    # why not, when not counted: "the script ended before a step could be counted"
    reason: str | None = None
    step_index: int | None = None  # the counted step's index in the run's steps
    samples: int | None = None  # the counted step's batch (samples fetched from loaders)
    ops: list[OpWork] = field(default_factory=list)  # most FLOPs first, then most bytes
    modules: list[ModuleWork] = field(default_factory=list)  # the model's top two levels
    # FLOPs by the dtype of the op's first input ("float32", "bfloat16"): which peak applies
    flops_by_dtype: dict[str, int] = field(default_factory=dict)
    # ops that ran outside aten (custom C++/Triton ops): no formula, FLOPs unknown
    uncounted_ops: list[str] = field(default_factory=list)

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @property
    def flops_forward(self) -> int:
        return sum(op.flops_forward for op in self.ops)

    @property
    def flops_backward(self) -> int:
        return sum(op.flops_backward for op in self.ops)

    @property
    def bytes(self) -> int:
        return sum(op.bytes for op in self.ops)

    @classmethod
    def from_dict(cls, d: dict) -> FlopFacts:
        d = dict(d)
        d["ops"] = [OpWork(**x) for x in d.get("ops", [])]
        d["modules"] = [ModuleWork(**x) for x in d.get("modules", [])]
        return cls(**d)
