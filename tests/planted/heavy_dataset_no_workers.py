"""Planted: a Dataset doing heavy CPU work per sample, loaded with num_workers=0 (P01)."""

import torch
from _common import mlp, parse_steps
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(64, 64, generator=g)
        for _ in range(4):  # a heavy per-sample transform, done in the main process
            x = torch.linalg.matrix_exp(x * 0.01)
        return x.flatten()[:256], i % 10


def main():
    steps = parse_steps()
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=32, shuffle=True)
    for step, (x, y) in enumerate(loader):
        if step >= steps:
            break
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
