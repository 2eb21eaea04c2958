"""device-transforms: carry uint8 images over the bus, convert and normalise on the device
(P04), the article's fourth optimisation.

A torchvision pipeline ``[..., ToTensor, Normalize]`` turns each image into float32 on the
host: four times the bytes of the uint8 pixels go through the DataLoader and the copy. Two
modes split it (``_device_images.py`` does the work):

- "normalize": the host keeps its stages (Resize, crops, flips...) and ends in a uint8
  tensor; the float conversion and Normalize run on the batch after ``.to(device)``. The
  same arithmetic on the same values: the result is bitwise the same.
- "full": the host only makes the uint8 tensor; Resize, CenterCrop and random flips run on
  the batch on the device too (the bus carries the small source images). Not bitwise the
  same: the tensor resize rounds differently from PIL's (a few 1/255 at most), and the
  flips draw from torch's generator on the device, not the host's.
"""

from __future__ import annotations

from torchpace.knobs._common import NO_LOADER, training_loaders, where
from torchpace.knobs.base import Knob, Plan, Switch, TuneContext, not_applicable
from torchpace.knobs.image_stages import DEVICE_STAGES, HOST_STAGES, MODES, TAIL
from torchpace.knobs.notes import Notes


def modes_for(names: list[str] | None) -> tuple[tuple[str, ...], str]:
    """The modes a pipeline (its class names) can be split in, or why none."""
    if names is None:
        return (), "its data set has no `transform` attribute"
    if tuple(names[-2:]) != TAIL:
        return (), (f"its transform [{', '.join(names)}] does not end in ToTensor, Normalize "
                    "(torchpace splits only torchvision pipelines that do)")  # fmt: skip
    prefix = names[:-2]
    unknown = [n for n in prefix if n not in HOST_STAGES]
    if unknown:
        return (), f"its transform has stages torchpace does not know: {', '.join(unknown)}"
    if not prefix:  # nothing but the conversion: "full" would be the same
        return ("normalize",), ""
    if all(n in DEVICE_STAGES for n in prefix):
        return ("normalize", "full"), ""
    return ("normalize",), ""


class DeviceTransforms(Knob):
    name = "device-transforms"
    value_type = str
    choices = MODES
    title = "uint8 images over the bus, converted and normalised on the device"
    answers = ("TP106",)
    row = "data"
    practices = ("P04",)
    # "normalize" is bitwise the same; "full" resizes on the tensor, not with PIL
    changes_numerics = True
    switchable = True

    def plan(self, ctx: TuneContext) -> Plan:
        loaders = training_loaders(ctx.facts)
        if not loaders:
            return not_applicable(NO_LOADER)
        reasons, found = [], None
        for lf in loaders:
            modes, why = modes_for(lf.transform)
            if modes:
                found = found or (lf, modes)
            else:
                reasons.append(f"{where(lf)}: {why}")
        if found is None:
            return not_applicable("; ".join(reasons))
        lf, modes = found
        bus = "the bus" if ctx.accelerator else "the DataLoader (no GPU: no bus to save)"
        return Plan(
            modes,
            f"{where(lf)} converts [{', '.join(lf.transform or [])}] to float32 on the host: "
            f"4x the bytes through {bus}",
        )

    def apply(self, value, runtime) -> Notes:
        user_location = runtime.user_location  # the user's line, as the capture reads it
        from torchpace.knobs import _device_images as images

        mode = str(value)
        if mode not in MODES:
            raise ValueError(f"device-transforms is one of {MODES}, not {mode!r}")
        notes = Notes(f"{mode!r}: uint8 batches, converted when moved to the device")
        parts: dict[int, tuple[object, images.DevicePart]] = {}  # id(dataset) -> its part

        def split_transform(kwargs: dict) -> dict:
            dataset = kwargs.get("dataset")
            where = user_location() or "a DataLoader"
            if dataset is None:
                return kwargs
            if id(dataset) in parts:  # another loader of a data set already split
                return latched(kwargs, getattr(dataset, "transform", None))
            transform = getattr(dataset, "transform", None)
            if transform is None:
                notes.add(f"{where}: left alone (no transform attribute)")
                return kwargs
            stages, why = images.split(transform, mode)
            if stages is None:
                notes.add(f"{where}: left alone ({why})")
                return kwargs
            host, device, normalize = stages
            import torchvision.transforms as T

            host_part = T.Compose([*host, images.ToUint8Tensor()])
            new = images.SwitchedTransform(host_part, transform, self._on)
            dataset.transform = new  # the user's data set object: its attribute, swapped
            kwargs = latched(kwargs, new)
            standard = getattr(dataset, "transforms", None)  # torchvision's VisionDataset
            if getattr(standard, "transform", None) is transform:
                standard.transform = new
            part = images.DevicePart(device, normalize)
            parts[id(dataset)] = (dataset, part)
            host_names = [type(t).__name__ for t in host]
            on_device = [*part.names, "float/255", "Normalize"]
            notes.add(f"{where}: host [{', '.join([*host_names, 'uint8'])}], "
                      f"device [{', '.join(on_device)}]")  # fmt: skip
            return kwargs

        def latched(kwargs: dict, transform) -> dict:
            """The loader's collate ends each batch, so that a switched trial's flip never
            splits one batch between the arms; only where it collates batches."""
            if not isinstance(transform, images.SwitchedTransform):
                return kwargs
            if "batch_size" in kwargs and kwargs["batch_size"] is None:
                return kwargs  # no batches: each sample reads the switch itself
            from torch.utils.data import default_collate

            collate = kwargs.get("collate_fn") or default_collate
            transform.latch = True
            return {**kwargs, "collate_fn": images.BatchLatch(collate)}

        def defer(batch):
            entry = parts.get(id(runtime.batch_dataset))
            return images.wrap_images(batch, entry[1]) if entry else batch

        def plain_inputs(args: tuple) -> tuple:
            # a batch handed to the model without a .to(): converted before the forward
            return tuple(
                a.tp_converted() if isinstance(a, images.DeferredImages) else a for a in args
            )

        # a switched trial's switch (switch()): the split data sets, and the one flag their
        # transforms read, in shared memory (import torch here: this runs in the child)
        self._parts, self._on = parts, images.switch_flag()
        runtime.filter_loader_kwargs(split_transform)
        runtime.filter_batches(defer)
        runtime.filter_model_inputs(plain_inputs)
        return notes

    def switch(self, value, runtime):
        """uint8 batches converted on the device (True), or the script's own pipeline on
        the host (False), between two steps: the data sets' switched transforms
        (``SwitchedTransform``) flip, in the workers too; the batches its workers made
        ahead under the other arm settle before a block is timed."""
        parts = getattr(self, "_parts", None)
        if parts is None:
            return "device-transforms was not applied in this process"
        transforms = [getattr(dataset, "transform", None) for dataset, _ in parts.values()]
        if not transforms:
            return "no data set's transform was split: nothing to switch"
        if not all(getattr(t, "on", None) is self._on for t in transforms):
            return "the script replaced its data set's transform after the split: not switched"

        def set_split(on: bool) -> None:
            self._on[0] = int(on)  # one flag, shared by every split transform, made or to be

        return Switch(set_split, settle_steps=1 + runtime.batches_ahead)

    def describe(self, value) -> str:
        if value == "full":
            return "uint8 batches; resize, flips, float and Normalize on the device"
        return "uint8 batches; float and Normalize on the device"

    # No edit of a kind tune writes: the transform and the training step both change (the
    # article's code, in docs/knobs.md).


KNOB = DeviceTransforms()
