"""Exact distributed evaluation (P33): every sample counted once.

A plain ``DistributedSampler`` pads the dataset to a multiple of the world size by
repeating samples, and interleaves ranks (rank r gets r, r+W, ...): a metric computed from
the gathered outputs counts some samples twice. Here each rank gets a contiguous shard
(SequentialDistributedSampler), the outputs are gathered in rank order, and the padding,
all at the end, is cut off (gather_for_eval).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from torchpace.distributed.process import is_distributed, rank, world_size


class SequentialDistributedSampler(Sampler[int]):
    """Rank r gets the contiguous shard ``[r*n, (r+1)*n)``, ``n = ceil(N / world)``; the last
    shard is padded by repeating the last sample so all ranks run the same number of
    batches (a collective in the loop would otherwise wait for the rank that has one less).
    Use for evaluation only, with ``gather_for_eval(outputs, len(dataset))``."""

    def __init__(self, dataset, num_replicas: int | None = None, rank_: int | None = None):
        self.total = len(dataset)
        self.num_replicas = world_size() if num_replicas is None else num_replicas
        self.rank = rank() if rank_ is None else rank_
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank {self.rank} is not in a world of {self.num_replicas}")
        self.num_samples = math.ceil(self.total / self.num_replicas)

    def __iter__(self):
        start = self.rank * self.num_samples
        indices = range(start, start + self.num_samples)
        last = max(self.total - 1, 0)
        return iter([min(i, last) for i in indices])

    def __len__(self) -> int:
        return self.num_samples


def gather_for_eval(tensor: torch.Tensor, dataset_len: int | None = None) -> torch.Tensor:
    """All ranks' ``tensor`` (same shape but the first dimension, which may differ per
    rank), concatenated in rank order on every rank; with ``dataset_len``, cut to its first
    ``dataset_len`` rows: the padding SequentialDistributedSampler added.

    Without ``dataset_len`` every row is kept: for an iterable dataset that each rank
    shards itself (no padding), each sample then appears exactly once. In a single process
    the tensor is returned (cut to ``dataset_len``).
    """
    if is_distributed():
        tensor = _all_gather_uneven(tensor.contiguous())
    if dataset_len is not None:
        if tensor.shape[0] < dataset_len:
            raise ValueError(
                f"gather_for_eval: {tensor.shape[0]} rows gathered, fewer than the "
                f"{dataset_len} samples of the dataset: was the dataset sharded with "
                "SequentialDistributedSampler on every rank?"
            )
        tensor = tensor[:dataset_len]
    return tensor


def _all_gather_uneven(tensor: torch.Tensor) -> torch.Tensor:
    """all_gather needs equal shapes: the row counts are exchanged first, every tensor is
    padded to the largest, and each rank's padding is dropped after."""
    world = dist.get_world_size()
    count = torch.tensor([tensor.shape[0]], device=tensor.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    sizes = [int(c.item()) for c in counts]
    padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    return torch.cat([g[:n] for g, n in zip(gathered, sizes, strict=True)], dim=0)
