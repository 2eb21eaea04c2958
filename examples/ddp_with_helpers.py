"""Data-parallel training written with torchpace.distributed: the practices of article 003
(SyncBatchNorm before DDP, accumulation with no_sync, exact evaluation, per-rank seeds,
rank-0 work and an atomic checkpoint) in a short script that runs both ways:

    python examples/ddp_with_helpers.py                                  # one process
    torchpace launch --nproc-per-node 2 examples/ddp_with_helpers.py     # two, CPU (gloo)
    torchpace launch --nproc-per-node gpu examples/ddp_with_helpers.py   # a GPU each (NCCL)

A small conv model on random 32x32 images (no download). Rank 0 logs the throughput of
the timed steps and the exact accuracy over a validation set whose size does not divide
by the number of processes; --report FILE writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import torchpace.distributed as tpd

log = logging.getLogger("ddp_with_helpers")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="optimizer steps (after warm-up)")
    p.add_argument("--warmup", type=int, default=3, help="optimizer steps not timed")
    p.add_argument("--batch-size", type=int, default=32, help="samples per micro-step per rank")
    p.add_argument("--micro-steps", type=int, default=2, help="micro-steps per optimizer step")
    p.add_argument("--val-size", type=int, default=1001)
    p.add_argument("--checkpoint", default=None, help="save the model here at the end")
    p.add_argument("--report", default=None, help="write the figures to this JSON file")
    return p.parse_args()


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


def fake_images(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    return TensorDataset(
        torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    )


def main() -> None:
    args = parse_args()
    device = tpd.init()  # joins torchrun's job; nothing to join under plain python
    tpd.setup_logging()  # INFO on rank 0, warnings only elsewhere
    tpd.seed_everything(0)  # seed + rank: each rank its own augmentations and dropout
    world = tpd.world_size()

    # SyncBatchNorm before the DDP wrap; torch runs it only on GPUs, so not asked on the CPU
    model = tpd.wrap(make_model(), device, sync_batchnorm=device.type == "cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    micro_total = (args.warmup + args.steps) * args.micro_steps
    train = fake_images(micro_total * args.batch_size * world, seed=1)
    sampler = DistributedSampler(train, world, tpd.rank(), shuffle=True) if world > 1 else None
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler,
                        shuffle=sampler is None, drop_last=True,
                        worker_init_fn=tpd.worker_init_fn)  # fmt: skip

    acc = tpd.accumulate(model, args.micro_steps)  # one all-reduce per optimizer step
    model.train()
    steps, started = 0, time.perf_counter()  # restarted after the warm-up steps
    for x, y in loader:
        with acc:
            acc.backward(loss_fn(model(x.to(device)), y.to(device)))
        if acc.should_step:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps += 1
            if steps == args.warmup:
                started = time.perf_counter()  # DDP's all-reduce keeps the ranks in step
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    samples = args.steps * args.micro_steps * args.batch_size * world
    log.info("%d processes: %.1f samples/s over %d steps", world, samples / elapsed, args.steps)

    # Exact evaluation: contiguous shards, gathered in order, the padding cut off.
    val = fake_images(args.val_size, seed=2)
    val_loader = DataLoader(val, batch_size=64, sampler=tpd.SequentialDistributedSampler(val))
    model.eval()
    with torch.no_grad():
        correct = torch.cat(
            [(model(x.to(device)).argmax(1) == y.to(device)) for x, y in val_loader]
        )
    correct = tpd.gather_for_eval(correct, len(val))
    log.info("accuracy %.3f over exactly %d samples", correct.float().mean().item(), len(correct))

    if args.checkpoint:
        state = getattr(model, "module", model).state_dict()
        tpd.save_checkpoint(state, args.checkpoint)  # rank 0, temp file + rename
    if args.report:
        write_report(args.report, world, samples / elapsed, len(correct))
    tpd.cleanup()


@tpd.rank_zero_only
def write_report(path: str, world: int, samples_per_s: float, evaluated: int) -> None:
    with open(path, "w") as f:
        json.dump({"processes": world, "samples_per_s": samples_per_s, "evaluated": evaluated}, f)


if __name__ == "__main__":
    main()
