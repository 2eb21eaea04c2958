"""Held-out loop for a row's knobs in one process (issue 35): one compute thread on a 2-core
machine and an AdamW step over 24 tensors, no DataLoader. Its tune log is beside it."""

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
blocks = [torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()) for _ in range(12)]
model = torch.nn.Sequential(*blocks)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, 256)
for step in range(3000):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 500 == 0:
        print(step, loss.item())
