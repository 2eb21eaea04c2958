"""compile: ``torch.compile`` of each trained model (P21), the article's seventh optimisation.

Each model the first iteration trains (capture/runtime.py: a GAN's generator and
discriminator) is compiled in place (``module.compile(mode=...)``) at its first call; that call
runs eagerly, the next ones compile, then run the compiled graph. Compilation takes
seconds to minutes: tune's engine reads it from the warm-up steps and weighs it against the
saving per step. "reduce-overhead" adds CUDA graphs, "max-autotune-no-cudagraphs" times
kernel variants; both only on CUDA.
"""

from __future__ import annotations

import os
import shutil

from torchpace.knobs._common import NO_MODEL, location_of
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

CUDA_MODES = ("max-autotune-no-cudagraphs", "reduce-overhead")


def cpp_compiler() -> str | None:
    """The C++ compiler inductor's CPU code needs: $CXX, else the first one on PATH."""
    return os.environ.get("CXX") or next(
        (c for c in ("g++", "c++", "clang++") if shutil.which(c)), None
    )


def c_compiler() -> str | None:
    """Triton builds its CUDA launcher with a C compiler: $CC, else one on PATH."""
    return os.environ.get("CC") or next(
        (c for c in ("cc", "gcc", "clang") if shutil.which(c)), None
    )


class Compile(Knob):
    name = "compile"
    value_type = str
    choices = ("default", *CUDA_MODES)
    title = "torch.compile the model"
    answers = ("TP310",)
    practices = ("P21", "P10")
    switchable = True
    pays_once = True  # compilation, in the first compiled steps

    def plan(self, ctx: TuneContext) -> Plan:
        if ctx.facts.calls.compiled:
            return not_applicable("the script calls torch.compile itself")
        model = ctx.facts.model
        if model is None:
            return not_applicable(NO_MODEL)
        if not ctx.accelerator and cpp_compiler() is None:
            return not_applicable(
                "torch.compile on the CPU needs a C++ compiler (g++ or clang++, or $CXX): "
                "none was found on PATH"
            )
        if ctx.accelerator and c_compiler() is None:
            return not_applicable(
                "torch.compile on CUDA (Triton) needs a C compiler (gcc or clang, or $CC): "
                "none was found on PATH"
            )
        values = ("default", *CUDA_MODES) if ctx.accelerator else ("default",)
        return Plan(values, f"{model.class_name} runs eagerly; compile time is paid in warm-up")

    def apply(self, value, runtime) -> Notes:
        value = str(value)
        if value not in ("default", *CUDA_MODES):
            raise ValueError(f"compile mode {value!r} is not one of default, {CUDA_MODES}")
        mode = None if value == "default" else value
        notes = Notes(f"torch.compile(mode={mode!r}) of the model at its first call")
        self._compiled = []  # (module, its compiled call): a switched trial's switch

        def model_found(module) -> None:
            module.compile(mode=mode)
            self._compiled.append((module, module._compiled_call_impl))
            notes.add(f"{type(module).__name__}{location_of(runtime.location_of(module))} compiled")

        runtime.on_each_model(model_found)
        return notes

    def switch(self, value, runtime):
        """Each compiled model's call through its compiled graph (True) or eagerly, as the
        script wrote it (False): ``nn.Module.compile`` keeps the compiled call in
        ``_compiled_call_impl``, which ``Module.__call__`` takes when it is set. The graph
        was compiled in the warm-up, with the knob on: the compilation is paid once, there,
        and tune reports it as the one-time cost (the warm-up beyond its references');
        the eager blocks between keep the compiled code and its guards, so switching back
        compiles nothing."""
        compiled = getattr(self, "_compiled", None)
        if compiled is None:
            return "compile was not applied in this process"
        if not compiled:
            return "no model was compiled: nothing to switch"
        if any(m._compiled_call_impl is not c for m, c in compiled):
            return "the model's compiled call was replaced in this process: not switched"

        def set_compiled(on: bool) -> None:
            for module, call in compiled:
                module._compiled_call_impl = call if on else None

        return set_compiled

    def describe(self, value) -> str:
        return "torch.compile" if value == "default" else f"torch.compile(mode={value!r})"

    def source_edits(self, value) -> list[SourceEdit]:
        mode = "" if value == "default" else f"mode={str(value)!r}"
        # In place, as tune measured it: `model = torch.compile(model)` would rebind the name
        # to a wrapper whose state_dict keys start with '_orig_mod.', and a checkpoint the
        # script loads or saves through that name would no longer match (dcgan's --netD).
        return [
            SourceEdit(
                "wrap-assignment",
                code="{}.compile(" + mode + ")",
                note="compiled in place (nn.Module.compile(), torch 2.2+): the same module "
                "object, its state_dict keys unchanged",
            )
        ]


KNOB = Compile()
