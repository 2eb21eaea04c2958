"""Planted: a WGAN-style loop whose critic steps on G(z).detach(): the generator's forward,
with autograd on, builds a graph that no backward ever walks. The script's live tensors stay
flat; the doctor must not say that memory grows (TP401) because its own hook kept that graph."""

import torch
from _common import parse_steps
from torch import nn


def main():
    steps = parse_steps(40)
    G = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 32))
    D = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-4)
    opt_d = torch.optim.Adam(D.parameters(), lr=1e-4)
    real = torch.randn(64, 32)
    for _ in range(steps):
        fake = G(torch.randn(64, 16))
        g_loss = -D(fake).mean()
        opt_g.zero_grad()
        g_loss.backward()
        opt_g.step()
        fake = G(torch.randn(64, 16)).detach()  # the critic's input: G's graph dropped
        d_loss = D(fake).mean() - D(real).mean()
        opt_d.zero_grad()
        d_loss.backward()
        opt_d.step()


if __name__ == "__main__":
    main()
