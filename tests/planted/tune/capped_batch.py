"""Planted for tune's batch-size finder: a job whose memory is capped, with activations that
grow with the batch.

Once its model and data are built, the process caps its data segment at ``--cap-mib`` MiB
above what it holds (RLIMIT_DATA, as ``ulimit -d`` would), so that a batch a few times the
script's own runs out of memory in the CPU allocator. The model saves a wide activation per
layer for backward (a stack of cheap tanh layers: memory grows with the batch, compute
little), and each step also waits ``--wait-ms`` (work that does not grow with the batch:
logging, I/O), so that a larger batch is clearly faster per sample until it no longer fits.
glibc's malloc serves every block of 128 KiB or more with its own mapping, returned when
freed (mallopt M_MMAP_THRESHOLD): what the cap counts is then what the tensors hold, and not
freed blocks glibc's heap keeps (see tests/planted/activation_heavy.py)."""

import argparse
import ctypes
import resource
import time

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        self.inp = nn.Linear(64, width)
        self.depth = depth
        self.out = nn.Linear(width, 10)

    def forward(self, x):
        h = self.inp(x)
        for _ in range(self.depth):
            h = torch.tanh(h)  # saves its (batch, width) output for backward
        return self.out(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--cap-mib", type=int, default=None)
    p.add_argument("--wait-ms", type=float, default=150.0)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=8)
    args = p.parse_args()
    ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = Net(args.width, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.cap_mib is not None:
        cap = vm_data() + args.cap_mib * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (cap, resource.RLIM_INFINITY))
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(args.wait_ms / 1000)
            step += 1
            if step >= args.steps:
                break


def vm_data() -> int:
    """The process's data segment now (what RLIMIT_DATA counts), in bytes."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmData:"))
    return int(line.split()[1]) * 1024


if __name__ == "__main__":
    main()
