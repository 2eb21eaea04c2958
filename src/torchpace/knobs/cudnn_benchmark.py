"""cudnn-benchmark: let cuDNN time its convolution algorithms and keep the fastest (P17).

Pays a search on every new input shape, then runs the fastest algorithm: a gain for the
fixed shapes of most vision training, a loss where shapes change every batch. The chosen
algorithms may differ from run to run, so results are not bitwise reproducible.
"""

from __future__ import annotations

from torchpace.knobs._common import NO_ACCELERATOR, flag_switch
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable


class CudnnBenchmark(Knob):
    name = "cudnn-benchmark"
    title = "torch.backends.cudnn.benchmark = True"
    answers = ("TP308",)
    practices = ("P17",)
    cuda_only = "cuDNN is a GPU library"
    # a process-wide flag read at each convolution: a switched trial sets it per block (the
    # first block with it on pays the search for each shape, then the block's settling step
    # has paid it: cuDNN keeps the algorithms it found for the process)
    switchable = True

    def plan(self, ctx: TuneContext) -> Plan:
        if not ctx.accelerator:
            return not_applicable(f"{NO_ACCELERATOR}: {self.cuda_only}")
        model = ctx.facts.model
        if model is None or model.conv_layers == 0:
            return not_applicable("the model has no convolution layers: cuDNN's choice is moot")
        process = ctx.facts.process
        if process is not None and process.cudnn_benchmark:
            return not_applicable("the script already sets cudnn.benchmark = True")
        if process is not None and process.cudnn_deterministic:
            return not_applicable(
                "the script asks for deterministic cuDNN (cudnn.deterministic = True): "
                "benchmarking would give that up"
            )
        return Plan((True,), f"{model.conv_layers} convolution layers, cudnn.benchmark off")

    def apply(self, value, runtime) -> str:
        import torch

        before = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = bool(value)
        self._value, self._before = bool(value), before  # a switched trial's two settings
        return f"torch.backends.cudnn.benchmark {before} -> {bool(value)}"

    def check(self, value, runtime) -> str | None:
        import torch

        if torch.backends.cudnn.benchmark == bool(value):
            return None
        return (f"torch.backends.cudnn.benchmark is {torch.backends.cudnn.benchmark} at the "
                "timed steps: the script sets it itself after torchpace did")  # fmt: skip

    def switch(self, value, runtime):
        """cudnn.benchmark as the knob sets it (True) or as the process had it (False)."""
        import torch

        cudnn = torch.backends.cudnn
        return flag_switch(
            self.name, bool(value), getattr(self, "_value", None), getattr(self, "_before", None),
            lambda: cudnn.benchmark, lambda flag: setattr(cudnn, "benchmark", flag),
            "torch.backends.cudnn.benchmark",
        )  # fmt: skip

    def describe(self, value) -> str:
        return f"cudnn.benchmark={bool(value)}"

    def source_edits(self, value) -> list[SourceEdit]:
        code = f"torch.backends.cudnn.benchmark = {bool(value)}"
        return [SourceEdit("statement-after-imports", code=code)]


KNOB = CudnnBenchmark()
