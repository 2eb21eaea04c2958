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
# Steps profiled per phase: enough that the straggler rule's "every step" (doctor/ranks.py)
# cannot be met by a shared machine's scheduling noise.
ACTIVE = 6
tpd.init()
rank = tpd.rank()
torch.manual_seed(0)
# Steps of tens of ms on a quiet machine, hundreds on a loaded one. The planted straggler's
# sleep is as long as the clean phase's median step on this machine, at least 80 ms: beyond
# the straggler threshold (20% of the step) and the machine's noise, however loaded it is.
model = tpd.wrap(nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))


sleep_s = 0.08  # rank 1's, in the straggler phase: set from the clean phase's steps
clean_steps: list[float] = []


def step(phase: str) -> None:
    acc = tpd.accumulate(model, MICRO)
    for _ in range(MICRO):
        if phase == "no_sync":
            (nn.functional.cross_entropy(model(x), y) / MICRO).backward()
            continue
        with acc:
            loss = nn.functional.cross_entropy(model(x), y)
            if phase == "straggler" and rank == 1 and acc.should_step:
                time.sleep(sleep_s)
            acc.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


for phase in ("clean", "straggler", "no_sync"):
    folder = os.path.join(OUT, phase)
    os.makedirs(folder, exist_ok=True)

    def export(prof, folder=folder):
        prof.export_chrome_trace(os.path.join(folder, f"rank{rank}.json"))

    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1,
                 active=ACTIVE), on_trace_ready=export) as prof:  # fmt: skip
        for _ in range(ACTIVE + 1):
            started = time.perf_counter()
            step(phase)
            if phase == "clean":
                clean_steps.append(time.perf_counter() - started)
            prof.step()
    if phase == "clean":
        sleep_s = max(0.08, sorted(clean_steps)[len(clean_steps) // 2])
        if rank == 1:
            with open(os.path.join(OUT, "straggler_sleep_ms.txt"), "w") as f:
                f.write(f"{sleep_s * 1000:.1f}")
tpd.cleanup()
