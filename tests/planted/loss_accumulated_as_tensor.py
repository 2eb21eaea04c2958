"""Planted: the loss summed as a tensor across steps keeps every step's graph alive (P22)."""

import torch
from _common import parse_steps
from torch import nn


def main():
    steps = parse_steps()
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 10))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    x, y = torch.randn(256, 512), torch.randint(0, 10, (256,))
    total_loss = 0
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward(retain_graph=True)
        opt.step()
        total_loss += loss  # the leak: a tensor with its graph, not loss.item()
    print("mean loss", float(total_loss) / steps)


if __name__ == "__main__":
    main()
