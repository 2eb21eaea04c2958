"""Planted: far more intra-op threads than cores (P24)."""

import os

import torch
from _common import batches, mlp, parse_steps


def main():
    steps = parse_steps()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(8 * cores)  # e.g. a value copied from a 64-core machine
    model = mlp(width=384, depth=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = batches(8, batch=128, width=384)
    for step in range(steps):
        x, y = data[step % len(data)]
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
