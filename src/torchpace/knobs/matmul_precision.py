"""matmul-precision: float32 matmuls on TF32 tensor cores (P19).

``torch.set_float32_matmul_precision("high")`` lets CUDA run float32 matrix products in
TF32 (10-bit mantissa inputs, float32 accumulation) on Ampere and newer GPUs: several times
the fp32 throughput, with results that differ from float32 in the fourth significant digit.
"""

from __future__ import annotations

from torchpace.knobs._common import NO_ACCELERATOR, flag_switch
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable

TF32_CAPABILITY = (8, 0)  # Ampere


class MatmulPrecision(Knob):
    name = "matmul-precision"
    value_type = str
    choices = ("high", "medium")
    title = 'torch.set_float32_matmul_precision("high"): TF32 matmuls'
    answers = ("TP307",)
    practices = ("P19",)
    cuda_only = "TF32 runs on NVIDIA tensor cores"
    changes_numerics = True
    # a process-wide flag read at each matmul: a switched trial sets it per block
    switchable = True

    def plan(self, ctx: TuneContext) -> Plan:
        if not ctx.accelerator:
            return not_applicable(f"{NO_ACCELERATOR}: {self.cuda_only}")
        capability = ctx.cuda_capability
        if capability is None or tuple(capability) < TF32_CAPABILITY:
            seen = "unknown" if capability is None else f"{capability[0]}.{capability[1]}"
            return not_applicable(
                f"TF32 needs an Ampere or newer GPU (compute capability 8.0+); this one is {seen}"
            )
        process = ctx.facts.process
        if process is not None and process.tf32_matmul:
            return not_applicable("the script already allows TF32 matmuls")
        return Plan(("high",), "float32 matmuls run in full float32 on a TF32-capable GPU")

    def apply(self, value, runtime) -> str:
        import torch

        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(str(value))
        self._value, self._before = str(value), before  # a switched trial's two settings
        return f"torch.set_float32_matmul_precision({str(value)!r}) (was {before!r})"

    def check(self, value, runtime) -> str | None:
        import torch

        now = torch.get_float32_matmul_precision()
        if now == str(value):
            return None
        return (f"the float32 matmul precision is {now!r} at the timed steps: the script "
                "sets it itself (torch.set_float32_matmul_precision, or allow_tf32)")  # fmt: skip

    def switch(self, value, runtime):
        """The knob's precision (True) or the one the process had before it (False), from
        the next matmul on."""
        import torch

        return flag_switch(
            self.name, str(value), getattr(self, "_value", None), getattr(self, "_before", None),
            torch.get_float32_matmul_precision, torch.set_float32_matmul_precision,
            "the float32 matmul precision",
        )  # fmt: skip

    def describe(self, value) -> str:
        return f"float32 matmul precision {value!r}"

    def source_edits(self, value) -> list[SourceEdit]:
        code = f"torch.set_float32_matmul_precision({str(value)!r})"
        return [SourceEdit("statement-after-imports", code=code)]


KNOB = MatmulPrecision()
