"""A 2-rank gloo DDP job that profiles three phases, one trace per rank and phase
(OUT/<phase>/rank<r>.json), for the doctor's cross-rank view. Each optimizer step
accumulates 4 micro-batches:
  clean      with torchpace.distributed.accumulate (no_sync on all but the last)
  straggler  the same, and rank 1 sleeps 80 ms per step (a slow input pipeline on one rank)
  no_sync    every micro-step's backward all-reduces (accumulation without no_sync, P29)
Run by torchrun, not by pytest."""

import os
import sys
import time

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

import torchpace.distributed as tpd

OUT = sys.argv[1]
MICRO = 4
tpd.init()
rank = tpd.rank()
torch.manual_seed(0)
model = tpd.wrap(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))


def step(phase: str) -> None:
    acc = tpd.accumulate(model, MICRO)
    for _ in range(MICRO):
        if phase == "no_sync":
            (nn.functional.cross_entropy(model(x), y) / MICRO).backward()
            continue
        with acc:
            loss = nn.functional.cross_entropy(model(x), y)
            if phase == "straggler" and rank == 1 and acc.should_step:
                time.sleep(0.08)
            acc.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


for phase in ("clean", "straggler", "no_sync"):
    folder = os.path.join(OUT, phase)
    os.makedirs(folder, exist_ok=True)

    def export(prof, folder=folder):
        prof.export_chrome_trace(os.path.join(folder, f"rank{rank}.json"))

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=export) as prof:  # fmt: skip
        for _ in range(4):
            step(phase)
            prof.step()
tpd.cleanup()
