"""Planted: batches that come at uneven cost (every fourth one is slow), loaded in the main
process, so that the steps swing 5x: a median of a few steps is not this loop's throughput.

``--times FILE`` appends each step's own wall time as it ends (ms, one a line, from the end
of the previous step to the end of this one): the script's own figures, written as it goes
so that they survive the capture ending the script, for the doctor's to be compared with.
"""

import argparse
import time

import torch
from _common import mlp
from torch.utils.data import DataLoader, Dataset

FAST_S, SLOW_S, SLOW_EVERY = 0.005, 0.060, 4


class UnevenDataset(Dataset):
    """Sleeps stand for decoding: their cost does not depend on how busy the CPU is."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        batch, in_batch = divmod(i, 16)
        if in_batch == 0:  # one sleep per batch, on its first sample
            time.sleep(SLOW_S if batch % SLOW_EVERY == SLOW_EVERY - 1 else FAST_S)
        return torch.full((64,), float(i % 7)), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--times", default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    model = mlp(width=64, depth=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(UnevenDataset(), batch_size=16, shuffle=False)
    out = open(args.times, "w", buffering=1) if args.times else None  # noqa: SIM115
    last = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        if out is not None:
            out.write(f"{1000 * (now - last):.3f}\n")
        last = time.perf_counter()  # the write is in no step's time


if __name__ == "__main__":
    main()
