"""Planted: a GAN-style loop where G and D each step once per iteration: one step, not two."""

import torch
from _common import parse_steps
from torch import nn


def main():
    steps = parse_steps()
    G = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32))
    D = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
    opt_d = torch.optim.SGD(D.parameters(), lr=1e-3)
    bce = nn.BCEWithLogitsLoss()
    real = torch.randn(64, 32)
    for _ in range(steps):
        fake = G(torch.randn(64, 16))
        d_loss = bce(D(real), torch.ones(64, 1)) + bce(D(fake.detach()), torch.zeros(64, 1))
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()
        g_loss = bce(D(fake), torch.ones(64, 1))
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()


if __name__ == "__main__":
    main()
