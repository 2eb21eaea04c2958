"""Seeds per rank and per DataLoader worker (P34).

Every rank seeded alike draws the same dropout masks and the same random augmentations:
the ranks' batches are augmented identically, which wastes part of the data's variety.
``seed_everything(seed)`` seeds each rank with ``seed + rank``; ``worker_init_fn`` seeds
Python's and NumPy's generators in each DataLoader worker from the seed torch already gives
it (different per worker, and per rank through the rank's seed).

Deterministic or fast: ``deterministic=True`` makes cuDNN pick deterministic algorithms
and turns off its autotuner (``cudnn.benchmark=False``), and torch raises on an operation
without a deterministic implementation: reruns give the same numbers, often more slowly.
``deterministic=False`` (the default) turns the autotuner on: fastest convolutions for
fixed input shapes, run-to-run differences in the last bits.
"""

from __future__ import annotations

import os
import random

import torch

from torchpace.distributed.process import rank


def seed_everything(seed: int, deterministic: bool = False) -> int:
    """Seed Python, NumPy (when installed) and torch (every device) with ``seed + rank``;
    returns that seed."""
    mine = seed + rank()
    random.seed(mine)
    try:
        import numpy as np

        np.random.seed(mine % 2**32)
    except ImportError:
        pass
    torch.manual_seed(mine)  # seeds every CUDA device too
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
    if deterministic:
        # cuBLAS needs a fixed workspace to be deterministic (CUDA >= 10.2); set only if
        # the user has not chosen one.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    return mine


def worker_init_fn(worker_id: int) -> None:
    """Pass as ``DataLoader(..., worker_init_fn=worker_init_fn)``: torch seeds each worker's
    torch generator with ``base_seed + worker_id`` (base_seed drawn from the rank's
    generator); Python's ``random`` and NumPy are seeded from it here, which torch does not
    do for NumPy."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
