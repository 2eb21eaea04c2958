"""Planted: an activation-heavy model (a deep stack of wide MLP blocks on a large batch):
activations saved for backward are most of the step's memory. ``--checkpoint`` applies
activation checkpointing to every block, to measure what it really frees.

``--cap-room-mib M`` puts the job near a memory cap: after two steps the process's data
segment is capped (RLIMIT_DATA, as ``ulimit -d`` would) at the most it held in them (read
after forward and after each block's backward) plus M MiB. From the start, glibc's malloc
then serves every block of 128 KiB or more with its own mapping, returned when freed, so
that what the cap counts is what the tensors hold: glibc's heap otherwise keeps freed
tensor blocks that small allocations pin (under torch.profiler's record_shapes its data
segment grew about 200 MiB per profiled step of this model at batch 4096, and did not
without the profiler)."""

import argparse
import ctypes
import resource

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(nn.Module):
    def __init__(self, width: int, depth: int, use_checkpoint: bool):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 10)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return self.head(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--device", default="cpu")
    p.add_argument("--cap-room-mib", type=int, default=None)
    args = p.parse_args()
    if args.cap_room_mib is not None:
        exact_malloc()
    torch.manual_seed(0)
    model = Net(width=128, depth=8, use_checkpoint=args.checkpoint).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 128, device=args.device)
    y = torch.randint(0, 10, (args.batch,), device=args.device)
    most = [0]  # the most the data segment held, read after forward and each block's backward

    def note(*_):
        most[0] = max(most[0], vm_data())

    if args.cap_room_mib is not None:
        for block in model.blocks:
            block.register_full_backward_hook(note)
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        note()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 and args.cap_room_mib is not None:
            cap = most[0] + args.cap_room_mib * 2**20
            resource.setrlimit(resource.RLIMIT_DATA, (cap, resource.RLIM_INFINITY))


def exact_malloc() -> None:
    """glibc: blocks from 128 KiB up get their own mapping (M_MMAP_THRESHOLD, -3)."""
    ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)


def vm_data() -> int:
    """The process's data segment now (what RLIMIT_DATA counts), in bytes."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmData:"))
    return int(line.split()[1]) * 1024


if __name__ == "__main__":
    main()
