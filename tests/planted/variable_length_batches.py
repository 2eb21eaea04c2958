"""Planted: each batch is padded to its own longest sequence, so the model sees a new input
shape almost every step (P20)."""

import torch
from _common import parse_steps
from torch import nn


def main():
    steps = parse_steps()
    model = nn.Sequential(nn.Embedding(1000, 64), nn.Linear(64, 256), nn.ReLU(),
                          nn.Linear(256, 1000))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        length = int(torch.randint(16, 512, (1,), generator=g))
        tokens = torch.randint(0, 1000, (16, length), generator=g)
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
