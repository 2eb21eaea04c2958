"""Wrapping a model for data-parallel training, in the order that works."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from torchpace.distributed.process import is_distributed


def wrap(
    model: nn.Module,
    device: torch.device | str | None = None,
    *,
    sync_batchnorm: bool = True,
    find_unused_parameters: bool = False,
    **ddp_kwargs,
) -> nn.Module:
    """Move ``model`` to ``device`` and wrap it in DistributedDataParallel.

    - BatchNorm layers become SyncBatchNorm *before* the wrap (P32): converted after,
      DDP would keep broadcasting the old layers' buffers. Statistics are then computed
      over the global batch, which matters when the per-rank batch is small; a custom
      BN layer is converted only if it subclasses ``torch.nn.modules.batchnorm._BatchNorm``.
    - ``find_unused_parameters`` stays False unless asked (P30): True makes DDP walk the
      autograd graph after every forward to find parameters that got no gradient, which
      costs time each step; ask for it only when some parameters really go unused.
    - Other keyword arguments go to DDP unchanged (``bucket_cap_mb``,
      ``gradient_as_bucket_view``, ``static_graph``...).

    On the CPU BatchNorm stays per-rank, with a warning: torch's SyncBatchNorm only runs
    on accelerators (its forward raises on CPU tensors). In a single process (no process
    group) the model is only moved: DDP is not needed, and BatchNorm stays as it is.
    """
    if device is not None:
        model = model.to(device)
    if not is_distributed():
        return model
    if sync_batchnorm and _has_batchnorm(model):
        on = _device_type(model, device)
        if on in SYNC_BN_DEVICES:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        else:
            warnings.warn(
                f"torchpace.distributed.wrap: BatchNorm kept per-rank on {on}: SyncBatchNorm "
                "runs only on GPU/XPU/HPU/MPS (pass sync_batchnorm=False to silence this)",
                stacklevel=2,
            )
    device_ids = None
    if device is not None and torch.device(device).type == "cuda":
        device_ids = [torch.device(device)]
    return nn.parallel.DistributedDataParallel(
        model,
        device_ids=device_ids,
        find_unused_parameters=find_unused_parameters,
        **ddp_kwargs,
    )


# The device types torch's SyncBatchNorm.forward accepts (torch/nn/modules/batchnorm.py).
SYNC_BN_DEVICES = ("cuda", "xpu", "hpu", "mps")


def _has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _device_type(model: nn.Module, device) -> str:
    if device is not None:
        return torch.device(device).type
    first = next(model.parameters(), None)
    return first.device.type if first is not None else "cpu"
