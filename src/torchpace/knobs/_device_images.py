"""The torch side of device-transforms: imported only inside its ``apply`` (in the child).

A torchvision pipeline ``[host stages..., ToTensor, Normalize]`` is split in two: the data
set's transform keeps the stages that stay on the host and ends in a uint8 tensor; the rest
(the float conversion, the normalisation, and in "full" mode the recognised stages too) runs
on the whole batch, on the device, when the script moves it there. The batch's uint8 images
reach the script as ``DeferredImages``: a tensor that converts itself when it is first used.
"""

from __future__ import annotations

import numpy as np
import torch

from torchpace.knobs.image_stages import DEVICE_STAGES, HOST_STAGES, TAIL

# PIL modes whose pixels are 8-bit: ToTensor divides those by 255, the rest it does not
EIGHT_BIT_MODES = frozenset({"L", "P", "RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV", "LA", "RGBX"})


def _torchvision_name(t) -> str | None:
    cls = type(t)
    return cls.__name__ if cls.__module__.startswith("torchvision.transforms") else None


def split(transform, mode: str):
    """(host stages, device stages, Normalize) of a recognised pipeline, or (None, why)."""
    stages = getattr(transform, "transforms", None)
    if _torchvision_name(transform) != "Compose" or not isinstance(stages, (list, tuple)):
        return None, f"{type(transform).__name__} is not a torchvision Compose"
    names = [_torchvision_name(t) for t in stages]
    if tuple(names[-2:]) != TAIL:
        return None, "the pipeline does not end in ToTensor, Normalize"
    allowed = DEVICE_STAGES if mode == "full" else HOST_STAGES
    unknown = [
        type(t).__name__ for t, n in zip(stages[:-2], names[:-2], strict=True) if n not in allowed
    ]
    if unknown:
        return None, f"{', '.join(unknown)} cannot run in {mode!r} mode"
    prefix = list(stages[:-2])
    if mode == "full":
        return ([], prefix, stages[-1]), ""
    return (prefix, [], stages[-1]), ""


class ToUint8Tensor:
    """ToTensor without the float conversion: an 8-bit image as a uint8 CHW tensor.

    Picklable (workers started by spawn get it), and strict: an image ToTensor would not
    divide by 255 (16-bit, float, 1-bit) is refused, since the device side divides.
    """

    def __call__(self, pic):
        if isinstance(pic, np.ndarray):
            if pic.dtype != np.uint8:
                raise TypeError(f"device-transforms: a {pic.dtype} array is not an 8-bit image")
            array = pic[:, :, None] if pic.ndim == 2 else pic
            return torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1).contiguous()
        mode = getattr(pic, "mode", None)
        if mode not in EIGHT_BIT_MODES:
            raise TypeError(f"device-transforms: image mode {mode!r} is not an 8-bit image")
        from torchvision.transforms.functional import pil_to_tensor

        return pil_to_tensor(pic).contiguous()

    def __repr__(self) -> str:
        return "ToUint8Tensor()"


# The arm the batch being built in this process reads (SwitchedTransform.latch): None
# until its first sample, then held until the batch's collate ends it (BatchLatch).
_batch_arm: bool | None = None


class BatchLatch:
    """A loader's collate_fn that ends the batch it collates: the next sample reads the
    switch again. Runs where the batch is built (each worker, or the main process), as the
    collate does; picklable for spawned workers."""

    def __init__(self, collate):
        self.collate = collate

    def __call__(self, samples):
        global _batch_arm
        try:
            return self.collate(samples)
        finally:
            _batch_arm = None


def switch_flag() -> torch.Tensor:
    """The one byte a switched trial flips: 1, the split pipeline; 0, the script's own."""
    return torch.ones(1, dtype=torch.uint8).share_memory_()


class SwitchedTransform:
    """The data set's transform under device-transforms: the host part of the split
    pipeline (ending in uint8) while the knob is on, the script's own pipeline (ending in
    float32) while a switched trial's reference blocks turn it off. The switch is one byte
    of shared memory: workers, forked or spawned, read the main process's setting at each
    sample (``share_memory_`` storage stays shared through both), and the batch filter
    defers only uint8 images, so a batch made under either arm reaches the script right."""

    def __init__(self, host, original, on: torch.Tensor):
        self.host = host
        self.original = original
        self.on = on  # switch_flag(): one for every data set the knob split
        # True where the loader's collate ends each batch (BatchLatch): the flag is read at
        # a batch's first sample and held to its last, so a flip while a worker builds a
        # batch never mixes uint8 and float32 samples in it (default_collate cannot stack them)
        self.latch = False

    def __call__(self, pic):
        return self.host(pic) if self._arm() else self.original(pic)

    def _arm(self) -> bool:
        global _batch_arm
        if not self.latch:
            return bool(self.on[0])
        if _batch_arm is None:
            _batch_arm = bool(self.on[0])
        return _batch_arm

    @property
    def transforms(self) -> list:
        """The stages in force, as torchvision's Compose lists them (the capture reads a
        loader's pipeline by them)."""
        return (self.host if self.on[0] else self.original).transforms

    def __repr__(self) -> str:
        return f"SwitchedTransform({self.host!r}, script's own: {self.original!r})"


class DevicePart:
    """What runs on the uint8 batch (N, C, H, W) after the copy, ending as ToTensor and
    Normalize would have: float in [0, 1] (default dtype), then (x - mean) / std."""

    def __init__(self, stages: list, normalize):
        self.stages = [_batch_stage(t) for t in stages]
        self.names = [type(t).__name__ for t in stages]
        self._sizing = [t for t in stages if type(t).__name__ in ("Resize", "CenterCrop")]
        self.mean = list(normalize.mean)
        self.std = list(normalize.std)

    @property
    def reshapes(self) -> bool:
        return bool(self._sizing)

    def out_shape(self, shape: torch.Size) -> torch.Size:
        """The converted batch's shape, without converting (Resize, CenterCrop)."""
        from torchvision.transforms.v2.functional._geometry import _compute_resized_output_size

        *lead, height, width = shape
        for t in self._sizing:
            if type(t).__name__ == "Resize":
                height, width = _compute_resized_output_size(
                    (height, width), size=t.size, max_size=t.max_size
                )
            else:
                height, width = t.size
        return torch.Size([*lead, height, width])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        x = x.to(dtype=torch.get_default_dtype()).div(255)  # ToTensor, on the whole batch
        mean = torch.as_tensor(self.mean, dtype=x.dtype, device=x.device).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=x.dtype, device=x.device).view(-1, 1, 1)
        return x.sub_(mean).div_(std)  # Normalize's own arithmetic


def _batch_stage(t):
    """A recognised PIL stage as an op on a uint8 batch (torchvision.transforms.v2)."""
    import torchvision.transforms.v2.functional as F

    name = type(t).__name__
    if name == "Resize":
        # antialiased like PIL's resize; PIL rounds differently: values differ by a few 1/255
        return lambda x: F.resize(
            x, t.size, interpolation=t.interpolation, max_size=t.max_size, antialias=True
        )
    if name == "CenterCrop":
        return lambda x: F.center_crop(x, list(t.size))
    if name in ("RandomHorizontalFlip", "RandomVerticalFlip"):
        dim = -1 if name == "RandomHorizontalFlip" else -2

        def flip(x: torch.Tensor) -> torch.Tensor:
            # one draw per image, from torch's generator on the batch's device (the host
            # pipeline drew from the worker's CPU generator): other images get flipped
            chosen = torch.rand(x.shape[0], device=x.device) < t.p
            return torch.where(chosen.view(-1, 1, 1, 1), x.flip(dim), x)

        return flip
    raise ValueError(f"device-transforms: {name} has no batch form")


def _name(func) -> str:
    if getattr(func, "__name__", "") == "__get__":  # a property: Tensor.shape.__get__
        return getattr(getattr(func, "__self__", None), "__name__", "")
    return getattr(func, "__name__", "")


# Answered from the uint8 tensor without converting it (the same for the float one).
_METADATA = frozenset(
    {"shape", "size", "dim", "ndim", "__len__", "device", "is_cuda", "is_cpu", "numel",
     "nelement", "is_pinned", "layout", "requires_grad", "is_sparse", "is_quantized",
     "is_meta", "is_nested", "get_device"}
)  # fmt: skip


# Metadata that Resize/CenterCrop change: answered from the shape the conversion will give.
_SHAPED = frozenset({"shape", "size", "numel", "nelement"})


class DeferredImages(torch.Tensor):
    """A uint8 image batch whose conversion (``DevicePart``) is deferred to its first use.

    ``.to(device)``/``.cuda()`` to another device copy the uint8 bytes, then convert there
    and return a plain tensor. Any other op converts on the current device first (once;
    later ops, and in-place changes, see that float tensor). Shape and device queries answer
    without converting; ``dtype`` answers what the conversion gives.
    """

    _tp_convert: DevicePart
    _tp_done: torch.Tensor | None

    @staticmethod
    def wrap(images: torch.Tensor, convert: DevicePart) -> DeferredImages:
        deferred = images.as_subclass(DeferredImages)
        deferred._tp_convert = convert
        deferred._tp_done = None
        return deferred

    def _tp_raw(self) -> torch.Tensor:
        with torch._C.DisableTorchFunctionSubclass():
            return self.as_subclass(torch.Tensor)

    def tp_converted(self) -> torch.Tensor:
        if self._tp_done is None:
            self._tp_done = self._tp_convert(self._tp_raw())
        return self._tp_done

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self = args[0] if args and isinstance(args[0], DeferredImages) else None
        if self is not None and self._tp_done is None:
            name = _name(func)
            if name in _SHAPED and self._tp_convert.reshapes:  # "full": resized on the device
                shape = self._tp_convert.out_shape(self._tp_raw().shape)
                if name == "shape":
                    return shape
                if name == "size":
                    dim = args[1] if len(args) > 1 else kwargs.get("dim")
                    return shape if dim is None else shape[dim]
                return shape.numel()
            if name in _METADATA:
                with torch._C.DisableTorchFunctionSubclass():
                    return func(*args, **kwargs)
            if name == "dtype":
                return torch.get_default_dtype()
            if name == "is_floating_point":
                return True
            if name == "pin_memory":
                return cls.wrap(self._tp_raw().pin_memory(), self._tp_convert)
            if name in ("to", "cuda"):
                moved = self._tp_move(name, args[1:], kwargs)
                if moved is not None:
                    return moved
        args, kwargs = _plain((args, kwargs))
        return func(*args, **kwargs)

    def _tp_move(self, name: str, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """The copy to another device in uint8, then the conversion there; None if the call
        does not move it (it is then converted where it is)."""
        raw = self._tp_raw()
        copy = False
        if name == "cuda":
            device = args[0] if args else kwargs.get("device")
            device = torch.device("cuda", device) if isinstance(device, int) else device
            device = torch.device(device) if device is not None else torch.device("cuda")
            non_blocking = args[1] if len(args) > 1 else kwargs.get("non_blocking", False)
            dtype = memory_format = None
        else:
            parse = dict(kwargs)
            copy = parse.pop("copy", False)
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **parse)
        if device is None or device == raw.device:
            return None
        moved = raw.to(device, non_blocking=non_blocking, copy=copy)
        out = self._tp_convert(moved)
        if dtype is not None and dtype != out.dtype:
            out = out.to(dtype)
        if memory_format is not None and memory_format != torch.preserve_format:
            out = out.contiguous(memory_format=memory_format)
        return out


def _plain(tree):
    """Every DeferredImages in an op's arguments replaced by its converted tensor; other
    containers (a torch.Size, a namedtuple) returned as they are when they hold none."""
    if isinstance(tree, DeferredImages):
        return tree.tp_converted()
    if isinstance(tree, (list, tuple)):
        items = [_plain(x) for x in tree]
        if all(a is b for a, b in zip(items, tree, strict=True)):
            return tree
        return tuple(items) if isinstance(tree, tuple) else items
    if isinstance(tree, dict):
        items = {k: _plain(v) for k, v in tree.items()}
        return tree if all(items[k] is tree[k] for k in tree) else items
    return tree


def wrap_images(batch, convert: DevicePart):
    """The batch with its uint8 image tensor (4-D, the first one at the top level of a
    list, tuple or dict batch) deferred; anything else as it was."""
    if isinstance(batch, torch.Tensor):
        return DeferredImages.wrap(batch, convert) if _is_images(batch) else batch
    if isinstance(batch, dict):
        for key, value in batch.items():
            if _is_images(value):
                return {**batch, key: DeferredImages.wrap(value, convert)}
        return batch
    if isinstance(batch, (list, tuple)):
        items = list(batch)
        for i, value in enumerate(items):
            if _is_images(value):
                items[i] = DeferredImages.wrap(value, convert)
                if hasattr(batch, "_fields"):  # a namedtuple
                    return type(batch)(*items)
                return type(batch)(items)
    return batch


def _is_images(value) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and not isinstance(value, DeferredImages)
        and value.dtype == torch.uint8
        and value.dim() == 4
    )
