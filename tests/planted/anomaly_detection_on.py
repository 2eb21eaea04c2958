"""Planted: autograd anomaly detection left on in a training run (P13)."""

import torch
from _common import batches, parse_steps
from torch import nn


def main():
    steps = parse_steps()
    torch.autograd.set_detect_anomaly(True)
    layers = []
    for _ in range(24):  # many small ops: anomaly mode's per-op cost shows
        layers += [nn.Linear(64, 64), nn.Tanh()]
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = batches(8, batch=16, width=64)
    for step in range(steps):
        x, _ = data[step % len(data)]
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
