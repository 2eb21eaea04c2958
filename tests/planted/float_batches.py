"""Planted: float32 batches of shape (N, 3, H, W) whose origin differs by --kind.

- features: float data by nature (simulated fields): no claim that they were images;
- divided: 8-bit pixels divided by 255 in ``__getitem__`` (and normalised): 8-bit origin;
- grid: 8-bit pixels scaled by a helper the source check does not see, then normalised:
  only the values (a k/255 grid after an affine map) show the origin.

Runs on the CPU or, when there is one, the GPU (the copy TP106 prices is a GPU one).
"""

import argparse

import torch
from torch.utils.data import DataLoader, Dataset

MEAN, STD = 0.45, 0.226


def scale(x):
    return (x.float() * (1.0 / 255.0) - MEAN) / STD


class Features(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 32, 32, generator=g), i % 10


class Divided(Features):
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        pixels = torch.randint(0, 256, (3, 32, 32), generator=g, dtype=torch.uint8)
        return (pixels.float() / 255 - MEAN) / STD, i % 10


class Grid(Features):
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return scale(torch.randint(0, 256, (3, 32, 32), generator=g, dtype=torch.uint8)), i % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--kind", choices=["features", "divided", "grid"], required=True)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dataset = {"features": Features, "divided": Divided, "grid": Grid}[args.kind]()
    loader = DataLoader(dataset, batch_size=64)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
