"""A data-parallel job with a poor DDP setting, for `torchpace tune --nproc-per-node 2`:
``bucket_cap_mb=0.01`` puts every gradient in a bucket of its own, so each step runs one
all-reduce per parameter (96 here) instead of a few, each paying the transport's latency.

    torchpace launch --nproc-per-node 2 examples/ddp_poor_buckets.py --steps 30
    torchpace tune --nproc-per-node 2 examples/ddp_poor_buckets.py --steps 1000

Runs on CPUs (gloo) or one GPU per rank (NCCL); random data, no download.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--bucket-cap-mb", type=float, default=0.01)
args = parser.parse_args()

cuda = torch.cuda.is_available()
dist.init_process_group("nccl" if cuda else "gloo")
rank = dist.get_rank()
device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
torch.manual_seed(0)
model = nn.Sequential(*[layer for _ in range(48) for layer in (nn.Linear(128, 128), nn.Tanh())])
model = nn.parallel.DistributedDataParallel(
    model.to(device), bucket_cap_mb=args.bucket_cap_mb, device_ids=[device] if cuda else None
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
generator = torch.Generator().manual_seed(rank)
start = time.perf_counter()
for _ in range(args.steps):
    x = torch.randn(args.batch_size, 128, generator=generator).to(device)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if rank == 0:
    print(f"{args.steps} steps in {time.perf_counter() - start:.2f} s, loss {loss.item():.4f}, "
          f"buckets of {model.bucket_bytes_cap / 2**20:g} MB")  # fmt: skip
# Leave together, with DDP freed first (it holds the process group; gc: it sits in reference
# cycles) so that destroying the group joins gloo's threads now: on torch 2.14 a gloo thread
# still dropping the last collective as Python exits aborts the rank ('terminate called
# without an active exception'; 6 of 20 runs as torch's examples end, 0 of 60 like this).
dist.barrier()
del model, optimizer
gc.collect()
dist.destroy_process_group()
