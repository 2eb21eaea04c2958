"""Planted for tune: a Dataset that waits on I/O per sample (3 ms), loaded with
num_workers=0, feeding a tiny model. Workers overlap the waits even on 2 cores, so tune
must keep num-workers and be measurably faster.

--mode crash-in-workers: __getitem__ raises inside a worker process (a dataset that is
not safe to load in workers): the num-workers trial crashes, tune records it and goes on.
--mode loss-differs-in-workers: labels depend on whether a worker loads them, so the loss
under workers departs from the baseline's: the loss check must reject the knob.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info


class WaitingDataset(Dataset):
    def __init__(self, mode: str):
        self.mode = mode

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        in_worker = get_worker_info() is not None
        if self.mode == "crash-in-workers" and in_worker:
            raise RuntimeError("this dataset cannot be loaded in a worker process")
        time.sleep(0.003)  # reading a file, decoding: the main process waits
        g = torch.Generator().manual_seed(i)
        x = torch.randn(32, generator=g)
        label = i % 4
        if self.mode == "loss-differs-in-workers" and in_worker:
            x = x * 40.0  # a different input distribution: a different loss
        return x, label


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--mode", default="plain")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(WaitingDataset(args.mode), batch_size=16, shuffle=True)
    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
