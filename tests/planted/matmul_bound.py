"""Planted: nothing but matmuls to speak of. Two wide layers without bias or activation,
data made up front: the step's time is its FLOPs at the machine's matmul speed."""

import torch
from _common import parse_steps
from torch import nn


def main():
    steps = parse_steps()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(768, 768, bias=False), nn.Linear(768, 768, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, target = torch.randn(128, 768), torch.randn(128, 768)
    for _ in range(steps):
        loss = (model(x) * target).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
