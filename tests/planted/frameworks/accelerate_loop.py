"""A small Hugging Face Accelerate loop: accelerator.prepare on the user's model, optimizer
and DataLoader (no workers, a slow dataset), accelerator.backward.
Arguments: --steps N, --accumulate K."""

import argparse
import time

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.002)
        g = torch.Generator().manual_seed(i)
        return torch.randn(128, generator=g), int(i % 10)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--accumulate", type=int, default=1)
    args = p.parse_args()
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=args.accumulate)
    model = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(), batch_size=32, shuffle=True)  # the user's line
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = 0
    while True:
        for x, y in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            batches += 1
            if batches >= args.steps * args.accumulate:
                return


if __name__ == "__main__":
    main()
