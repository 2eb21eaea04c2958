"""Planted: every step's output is kept in a list without its graph (P22): memory still grows
by the output's bytes each step, and no saved activation is kept. ``--clone`` keeps a copy
(``out.detach().clone()``) instead of a view of the output."""

import argparse

import torch
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--clone", action="store_true")
    args = p.parse_args()
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1000))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 1000, (128,))
    kept = []
    for _ in range(args.steps):
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        kept.append(out.detach().clone() if args.clone else out.detach())  # the leak
    print(len(kept))


if __name__ == "__main__":
    main()
