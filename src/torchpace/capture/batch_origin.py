"""Did a loader's float batches come from 8-bit data? The evidence TP106 needs before it
calls them images that could travel as uint8.

Two kinds of evidence, read inside the user's process: the dataset's transform converts
8-bit images to float (torchvision's ToTensor, ConvertImageDtype, v2 ToDtype with scaling),
or its ``__getitem__`` divides by 255; or the first batch's float values lie on a grid of at
most 256 evenly spaced levels per channel, which is what k/255 looks like after any
per-channel affine map (Normalize). Float data that is not 8-bit (audio, features,
simulations) has far more levels, and gets no such claim.
"""

from __future__ import annotations

import inspect
import re

import torch

# Transforms that turn 8-bit images into floats in [0, 1].
UINT8_TO_FLOAT_TRANSFORMS = ("ToTensor", "ConvertImageDtype", "ToDtype", "ToImageTensor")
DIVIDES_BY_255 = re.compile(r"/\s*255(\.0*)?\b|div_?\(\s*255|\*\s*\(?\s*1(\.0*)?\s*/\s*255")
# Values sampled from the first batch: enough to see every level of an 8-bit image.
SAMPLE_VALUES = 65_536
LEVELS = 256
# How far from the nearest grid level a value may be, in grid steps: float32 rounding of
# (k/255 - mean) / std stays below 1e-4 of a step.
GRID_TOLERANCE = 0.01
IMAGE_CHANNELS = (1, 3, 4)


def from_dataset(dataset, transform_names: list[str] | None) -> str | None:
    """Evidence in the dataset's code: a converting transform, or a division by 255."""
    for name in transform_names or []:
        if name in UINT8_TO_FLOAT_TRANSFORMS:
            return f"transform {name}"
    getitem = getattr(type(dataset), "__getitem__", None)
    try:
        source = inspect.getsource(getitem) if getitem is not None else ""
    except (OSError, TypeError):  # built-in or compiled: no source to read
        return None
    if DIVIDES_BY_255.search(source):
        return f"/255 in {type(dataset).__name__}.__getitem__"
    return None


def from_batch(batch) -> str | None:
    """Evidence in the values: the first float (N, C, ...) tensor of the batch on a grid of
    at most 256 evenly spaced levels in each channel."""
    x = _first_float_tensor(batch)
    if x is None or x.dim() < 3 or x.shape[1] not in IMAGE_CHANNELS or x.numel() == 0:
        return None
    x = x.detach()
    for c in range(x.shape[1]):
        values = x[:, c].reshape(-1)[:SAMPLE_VALUES].to("cpu", torch.float64)
        if not _on_grid(values):
            return None
    return f"first batch: at most {LEVELS} evenly spaced levels per channel (k/255)"


def _on_grid(values: torch.Tensor) -> bool:
    levels = torch.unique(values)
    if len(levels) > LEVELS:
        return False
    if len(levels) < 3:  # a constant or two-valued channel says nothing about its origin
        return False
    steps = torch.diff(levels)
    step = float(steps.min())
    if step <= 0:
        return False
    span = float(levels[-1] - levels[0])
    if span / step > LEVELS - 1 + GRID_TOLERANCE:  # more room than 8 bits
        return False
    k = (levels - levels[0]) / step
    return bool((k - k.round()).abs().max() <= GRID_TOLERANCE)


def _first_float_tensor(batch):
    while isinstance(batch, (list, tuple, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    if isinstance(batch, torch.Tensor) and batch.is_floating_point():
        return batch
    return None
