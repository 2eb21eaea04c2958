"""Joining the job torchrun started, and the facts of this process in it.

torchrun gives every worker RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT;
``python train.py`` gives none, and then nothing is initialised: the same script runs
both ways.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from torchpace.distributed import timeouts


def launched() -> bool:
    """True when started by torchrun (or anything that sets its variables)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def is_distributed() -> bool:
    """True once a process group is initialised (init() in a launched job)."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else int(os.environ.get("RANK", 0))


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else int(os.environ.get("WORLD_SIZE", 1))


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def device_for_this_rank() -> torch.device:
    """The local rank's GPU where there are enough, else the CPU."""
    if torch.cuda.is_available() and local_rank() < torch.cuda.device_count():
        return torch.device("cuda", local_rank())
    return torch.device("cpu")


def init(backend: str | None = None, timeout: timedelta | None = None) -> torch.device:
    """Join the job and return this rank's device.

    The backend follows the device: NCCL for a GPU, gloo on the CPU (P27: gloo is the CPU
    engine; the oneCCL bindings are discontinued upstream). The local rank's GPU is made
    current *before* the process group exists, so NCCL never puts every rank's context on
    GPU 0. ``timeout`` bounds how long a collective waits for the other ranks (torch's
    default is 10 minutes); a rank that waits longer raises instead of hanging, and its
    error is preceded by a paragraph that names the rank, the collective and the line.

    In a single process (no RANK/WORLD_SIZE in the environment) nothing is initialised
    and the device is returned, so the script runs unchanged with ``python train.py``.
    """
    device = device_for_this_rank()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not launched() or is_distributed():
        return device
    chosen = backend or ("nccl" if device.type == "cuda" else "gloo")
    kwargs = {"timeout": timeout} if timeout is not None else {}
    if chosen == "nccl":
        kwargs["device_id"] = device  # connects eagerly, on the right GPU
    dist.init_process_group(backend=chosen, **kwargs)
    # A timed-out collective is then explained before its traceback (timeouts.py).
    timeouts.install(dist.get_rank(), dist.get_world_size(), _seconds(timeout))
    return device


def _seconds(timeout: timedelta | None) -> float | None:
    return timeout.total_seconds() if timeout is not None else None


def cleanup() -> None:
    """Leave the job (destroy the process group); a no-op when none was initialised.

    On gloo every rank first meets the others: on torch 2.14 a gloo thread still dropping
    the last collective as Python exits aborts the rank ('terminate called without an active
    exception'; 6 of 20 torchrun runs of a 2-rank DDP job, 1 of 40 with the barrier). Only
    freeing the DDP model before this call (``del model; gc.collect()``: DDP holds the group)
    lets the destroy join those threads (0 of 60)."""
    if is_distributed():
        if dist.get_backend() == "gloo":
            dist.barrier()
        dist.destroy_process_group()


def barrier() -> None:
    if is_distributed():
        dist.barrier()
