"""Bad input: the script fails after a few steps (e.g. a NaN check)."""

import torch
from _common import parse_steps

steps = parse_steps()
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == steps:
        raise RuntimeError(f"planted failure at step {step}: loss is NaN")
