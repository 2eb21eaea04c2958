"""Planted: nothing wrong. Data made up front, no syncs, big matmuls: compute-bound."""

import torch
from _common import batches, mlp, parse_steps


def main():
    steps = parse_steps()
    model = mlp(width=512, depth=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = batches(4, batch=256, width=512)
    for step in range(steps):
        x, y = data[step % len(data)]
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
