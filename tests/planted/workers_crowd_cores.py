"""Planted: DataLoader workers that crowd the cores (P01).

A per-item transform heavy on the CPU, loaded by 4 workers per usable core: the batches are
always ready (no data wait), but the workers' work takes the cores from the step's compute
threads, so the cost shows as slower forward and backward. ``--workers 0`` is the fix.
"""

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

ROUNDS = int(os.environ.get("CROWDED_ROUNDS", "20"))


class AugmentedDataset(Dataset):
    """Each item decoded and augmented on the CPU, as an image pipeline does."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, 48, 48, generator=g)
        for _ in range(ROUNDS):  # blur, colour jitter, ...: a few ops over the whole image
            x = torch.nn.functional.avg_pool2d(x, 3, stride=1, padding=1) * 1.01 + 0.01
            x = torch.flip(x, dims=[2]).contiguous()
        return x, i % 10


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10),
    )  # fmt: skip


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--workers", type=int, default=4 * len(os.sched_getaffinity(0)))
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    torch.manual_seed(0)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(AugmentedDataset(), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)  # fmt: skip
    start = time.perf_counter()
    times, walls, last = [], [], time.perf_counter()
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        t = time.perf_counter()
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
        walls.append(time.perf_counter() - last)
        last = time.perf_counter()
    total = time.perf_counter() - start
    if os.environ.get("CROWDED_REPORT"):  # the benchmark's own figures (benchmarks/crowded_cpu.py)

        def late_mean_ms(xs):  # after the first 5 steps: the workers started and warm
            xs = xs[5:] or xs
            return 1000 * sum(xs) / len(xs)

        print(
            f"CROWDED_REPORT total_s={total:.4f} steps={len(times)} "
            f"step_ms={late_mean_ms(walls):.2f} compute_ms={late_mean_ms(times):.2f}"
        )


if __name__ == "__main__":
    main()
