"""Planted: an activation-heavy model (a deep stack of wide MLP blocks on a large batch):
activations saved for backward are most of the step's memory. ``--checkpoint`` applies
activation checkpointing to every block, to measure what it really frees."""

import argparse

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
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(width=128, depth=8, use_checkpoint=args.checkpoint).to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, 128, device=args.device)
    y = torch.randint(0, 10, (args.batch,), device=args.device)
    for _ in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
