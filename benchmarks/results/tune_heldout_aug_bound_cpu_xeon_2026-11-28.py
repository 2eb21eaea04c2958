"""Held-out: a loader whose CPU-bound augmentation (no sleep) runs in the main process,
beside a model whose Adam steps parameter by parameter. 3 epochs over generated data."""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __init__(self, n, dim):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 5, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i]
        for _ in range(12):  # an "augmentation": small ops, CPU-bound in Python
            x = torch.tanh(x * 1.01 + 0.01).roll(1)
        return x, self.y[i]


p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--workers", type=int, default=0)
a = p.parse_args()
data = Augmented(2400, 256)
loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=a.workers)
layers = []
for _ in range(24):
    layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(256, 5))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
t0 = time.perf_counter()
for epoch in range(a.epochs):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f} {time.perf_counter() - t0:.1f}s")
