"""Shared bits of the planted-bottleneck scripts: tiny models, a step-count flag."""

import argparse

import torch
from torch import nn


def parse_steps(default: int = 6) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=default)
    return p.parse_args().steps


def mlp(width: int = 256, depth: int = 3) -> nn.Module:
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def batches(n: int, batch: int = 64, width: int = 256):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(batch, width, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n)]  # fmt: skip
