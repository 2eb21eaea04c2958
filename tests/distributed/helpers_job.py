"""A 2-rank gloo job exercising torchpace.distributed; each rank writes what it saw to
OUT/rank<r>.json for test_distributed_helpers.py. Run by torchrun, not by pytest."""

import json
import os
import sys
import time
import warnings

import numpy as np
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

import torchpace.distributed as tpd

OUT = sys.argv[1]
device = tpd.init()
rank, world = tpd.rank(), tpd.world_size()
results: dict = {"world": world, "device": str(device)}


def counted(model):
    """Count the gradient all-reduces DDP makes (one call per bucket per reduction)."""
    calls = [0]

    def hook(state, bucket):
        calls[0] += 1
        return allreduce_hook(state, bucket)

    model.register_comm_hook(None, hook)
    return calls


# -- accumulation: one all-reduce per optimizer step, gradients of one big batch ----------
MICRO, MB = 4, 5
gen = torch.Generator().manual_seed(1)
X, Y = (
    torch.randn(world * MICRO * MB, 8, generator=gen),
    torch.randn(world * MICRO * MB, 3, generator=gen),
)


def micro_batch(i):
    lo = (i * world + rank) * MB  # every sample used once across ranks and micro-steps
    return X[lo : lo + MB], Y[lo : lo + MB]


for mode in ("accumulate", "no_no_sync"):
    torch.manual_seed(0)
    model = tpd.wrap(nn.Linear(8, 3))
    calls = counted(model)
    acc = tpd.accumulate(model, MICRO)
    steps = 0
    for i in range(MICRO):
        x, y = micro_batch(i)
        if mode == "accumulate":
            with acc:
                acc.backward(nn.functional.mse_loss(model(x), y))
            steps += acc.should_step
        else:  # the anti-pattern: every backward all-reduces
            (nn.functional.mse_loss(model(x), y) / MICRO).backward()
    results[f"{mode}_allreduces"] = calls[0]
    if mode == "accumulate":
        results["optimizer_steps"] = steps
        torch.manual_seed(0)
        reference = nn.Linear(8, 3)
        nn.functional.mse_loss(reference(X), Y).backward()
        results["grad_max_diff"] = max(
            (p.grad - q.grad).abs().max().item()
            for p, q in zip(model.module.parameters(), reference.parameters(), strict=True)
        )

# -- wrap: DDP, BatchNorm kept per-rank on the CPU with a warning --------------------------
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    wrapped = tpd.wrap(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
results["wrap_type"] = type(wrapped).__name__
results["wrap_bn"] = type(wrapped.module[1]).__name__
results["wrap_warning"] = " ".join(str(w.message) for w in caught)
results["find_unused"] = wrapped.find_unused_parameters

# -- exact evaluation: 11 samples on 2 ranks, and an iterable dataset -----------------------
N = 11
dataset = TensorDataset(torch.arange(N, dtype=torch.float32))
loader = DataLoader(dataset, batch_size=4, sampler=tpd.SequentialDistributedSampler(dataset))
predictions = torch.cat([batch * 2 for (batch,) in loader])
results["eval_gathered"] = tpd.gather_for_eval(predictions, len(dataset)).tolist()


class Shard(IterableDataset):
    def __iter__(self):
        return iter(torch.tensor([i]) for i in range(N) if i % world == rank)


items = torch.cat(list(DataLoader(Shard(), batch_size=None)))
results["iterable_gathered"] = tpd.gather_for_eval(items).tolist()

# -- seeds: different per rank, and per DataLoader worker ----------------------------------
results["seed"] = tpd.seed_everything(5)
results["rand"] = torch.rand(3).tolist()


class NumpyDraw(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return float(np.random.rand())


draws = DataLoader(NumpyDraw(), batch_size=None, num_workers=1, worker_init_fn=tpd.worker_init_fn)
results["worker_draws"] = [float(v) for v in draws]


# -- rank-0 work ----------------------------------------------------------------------------
@tpd.rank_zero_only
def report():
    return "ran"


results["rank_zero_only"] = report()
marker = os.path.join(OUT, "prepared")
with tpd.main_process_first():
    if rank == 0:
        time.sleep(0.5)  # a slow download: the other rank must not see a missing file
        with open(marker, "w") as f:
            f.write("ready")
    results["found_prepared"] = os.path.exists(marker)

checkpoint = os.path.join(OUT, "ckpt.pt")
results["wrote_checkpoint"] = tpd.save_checkpoint({"w": torch.arange(4)}, checkpoint)
results["checkpoint"] = torch.load(checkpoint)["w"].tolist()  # complete on every rank

# -- balanced batches: disjoint indices, the same number of steps on every rank -------------
lengths = [(i * 37) % 200 + 1 for i in range(300)]
sampler = tpd.LengthBucketBatchSampler(lengths, max_tokens=800, drop_last=True)
results["bucket_batches"] = list(sampler)

with open(os.path.join(OUT, f"rank{rank}.json"), "w") as f:
    json.dump(results, f)
tpd.cleanup()
