"""channels-last: convolution weights and image inputs in NHWC memory order (P11).

cuDNN's tensor-core convolutions and oneDNN's CPU ones work in NHWC; a model left in NCHW
pays layout conversions around each convolution. Every trained model is converted (a GAN's
generator and discriminator), and the 4-D floating inputs of each. Same arithmetic in
another memory order. On small CPU convolutions it has been measured slower: tune
measures, never assumes.
"""

from __future__ import annotations

from torchpace.knobs._common import NO_MODEL, location_of
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class ChannelsLast(Knob):
    name = "channels-last"
    title = "channels_last memory format for a convolutional model and its 4-D inputs"
    answers = ("TP312",)
    practices = ("P11",)
    switchable = True

    def plan(self, ctx: TuneContext) -> Plan:
        model = ctx.facts.model
        if model is None:
            return not_applicable(NO_MODEL)
        if model.conv_layers == 0:
            return not_applicable(
                f"{model.class_name} has no convolution layers: channels_last only changes them"
            )
        return Plan((True,), f"{model.class_name} has {model.conv_layers} convolution layers")

    def apply(self, value, runtime) -> Notes | str:
        import torch

        if not value:
            return "nothing done (channels-last=false)"
        notes = Notes("model and its 4-D floating inputs in channels_last")
        # a switched trial's switch (switch()): the inputs converted while on[0], and the
        # 4-D tensors this knob converted, which its reference blocks turn back
        self._on, self._converted = [True], []

        def model_found(module) -> None:
            # at the model's first call, after the optimizer was built: module.to swaps each
            # parameter's data in place, so the optimizer still holds the same Parameters
            self._converted += [
                t for t in (*module.parameters(), *module.buffers())
                if t.dim() == 4 and not t.is_contiguous(memory_format=torch.channels_last)
            ]  # fmt: skip
            module.to(memory_format=torch.channels_last)
            notes.add(f"{type(module).__name__}{location_of(runtime.location_of(module))}: "
                      "parameters channels_last")  # fmt: skip

        def convert(args: tuple) -> tuple:
            if not self._on[0]:
                return args
            return tuple(
                a.contiguous(memory_format=torch.channels_last)
                if isinstance(a, torch.Tensor) and a.dim() == 4 and a.is_floating_point()
                else a
                for a in args
            )

        runtime.on_each_model(model_found)
        runtime.filter_model_inputs(convert)
        return notes

    def switch(self, value, runtime):
        """channels_last (True) or the layout the script's tensors had (False), between two
        steps: the parameters and buffers this knob converted, their gradients and the
        optimizers' state of the same shape (Adam's moments, SGD's momentum), and the
        model's 4-D inputs from the next call. Same values in another order: nothing the
        script computes changes but the speed."""
        import torch

        converted = getattr(self, "_converted", None)
        if not value or converted is None:
            return "channels-last was not applied in this process"
        if not converted:
            return "no 4-D parameter was converted to channels_last: nothing to switch"

        def set_layout(on: bool) -> None:
            layout = torch.channels_last if on else torch.contiguous_format
            _relayout(torch, converted, runtime.optimizers, layout)
            self._on[0] = on

        return set_layout

    def describe(self, value) -> str:
        return "channels_last" if value else "contiguous (NCHW)"

    def source_edits(self, value) -> list[SourceEdit]:
        if not value:
            return []
        return [
            SourceEdit(
                "wrap-assignment",
                code="{} = {}.to(memory_format=torch.channels_last)",
                note="tune also converted the model's 4-D inputs: "
                "x = x.to(memory_format=torch.channels_last) before the forward",
            )
        ]


def _relayout(torch, tensors: list, optimizers, layout) -> None:
    """Each tensor's data, its gradient and its optimizer state of the same shape in
    ``layout``, in place: the Parameters the optimizers hold stay the same objects."""
    states = {}
    for optimizer in optimizers:
        for param, state in optimizer.state.items():
            states.setdefault(id(param), []).append(state)
    for t in tensors:
        t.data = t.data.contiguous(memory_format=layout)
        if t.grad is not None:
            t.grad = t.grad.contiguous(memory_format=layout)
        for state in states.get(id(t), ()):
            for key, held in state.items():
                if isinstance(held, torch.Tensor) and held.shape == t.shape:
                    state[key] = held.contiguous(memory_format=layout)


KNOB = ChannelsLast()
