"""Batches of similar work on every rank (P31).

With variable-length samples (text, audio) and a fixed number of samples per batch, one
rank's batch can hold ten times the tokens of another's; every step then waits for the
rank with the longest batch (a straggler made by the data). Batching by a token budget,
over samples sorted by length, gives every batch about the same padded size, and handing
neighbouring batches to the ranks of one step gives every rank about the same work.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import Sampler

from torchpace.distributed.process import rank, world_size


class LengthBucketBatchSampler(Sampler[list[int]]):
    """Batches of indices whose padded size (longest sample x count) stays within
    ``max_tokens``, the same number on every rank, neighbours in length across the ranks
    of each step.

    ``lengths[i]`` is sample i's length. Each epoch (call ``set_epoch``) the samples are
    shuffled, split into pools of ``pool_size`` (default: the whole dataset), each pool
    sorted by length and cut into batches; each run of ``num_replicas`` consecutive batches
    is one step, rank r taking the r-th, and the steps are shuffled. The last, incomplete
    step is dropped with ``drop_last`` or completed with batches from the start.
    A sample longer than ``max_tokens`` gets a batch of its own.

    Use as ``DataLoader(dataset, batch_sampler=LengthBucketBatchSampler(lengths, 4096))``.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        max_tokens: int,
        *,
        num_replicas: int | None = None,
        rank_: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        pool_size: int | None = None,
        drop_last: bool = False,
    ):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        self.lengths = [int(n) for n in lengths]
        self.max_tokens = max_tokens
        self.num_replicas = world_size() if num_replicas is None else num_replicas
        self.rank = rank() if rank_ is None else rank_
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank {self.rank} is not in a world of {self.num_replicas}")
        self.shuffle = shuffle
        self.seed = seed
        self.pool_size = pool_size or max(len(self.lengths), 1)
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _steps(self) -> list[list[list[int]]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        n = len(self.lengths)
        order = torch.randperm(n, generator=generator).tolist() if self.shuffle else list(range(n))
        batches: list[list[int]] = []
        for start in range(0, n, self.pool_size):
            pool = sorted(order[start : start + self.pool_size], key=self.lengths.__getitem__)
            batch: list[int] = []
            for index in pool:  # ascending, so the newest sample is the batch's longest
                if batch and (len(batch) + 1) * self.lengths[index] > self.max_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(index)
            if batch:
                batches.append(batch)
        world = self.num_replicas
        steps = [batches[i : i + world] for i in range(0, len(batches), world)]
        if steps and len(steps[-1]) < world:
            if self.drop_last or len(batches) < world:
                steps.pop()
            else:
                steps[-1] = steps[-1] + batches[: world - len(steps[-1])]
        if self.shuffle:
            steps = [steps[i] for i in torch.randperm(len(steps), generator=generator).tolist()]
        return steps

    def __iter__(self):
        return iter([step[self.rank] for step in self._steps()])

    def __len__(self) -> int:
        return len(self._steps())
