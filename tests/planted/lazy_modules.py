"""Real code builds models with lazy layers (shapes inferred at the first forward) and
creates the optimizer before that forward: the capture must count what it can, not crash."""

import torch
from _common import batches, parse_steps
from torch import nn

steps = parse_steps()
model = nn.Sequential(nn.LazyLinear(64), nn.ReLU(), nn.LazyLinear(10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # before the lazy shapes exist
for x, y in batches(steps + 4, width=32):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
