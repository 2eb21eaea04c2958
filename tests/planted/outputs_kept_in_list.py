"""Planted: every step's output is kept in a list with its graph (P22): memory grows."""

import torch
from _common import parse_steps
from torch import nn


def main():
    steps = parse_steps()
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1000))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 1000, (128,))
    history = []
    for _ in range(steps):
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(out)  # the leak: the output and the graph it was computed by
    print(len(history))


if __name__ == "__main__":
    main()
