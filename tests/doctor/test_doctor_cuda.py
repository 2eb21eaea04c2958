"""The doctor on CUDA traces this torch version writes, for loops with planted GPU problems
and their fixed versions. Skipped without a CUDA device (run on a GPU machine when at hand).
"""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from torchpace.doctor.analyze import diagnose
from torchpace.trace import load_trace

pytestmark = pytest.mark.cuda
ACTIVE = 5
BATCH = 512  # 25 MB of float32 images per step: a copy cost well above the noise floors


def gpu_loop(path, *, fixed: bool):
    """An MLP on image-shaped batches. Unfixed: pageable float32 copies, a blocking .to(),
    loss.item() every step, fp32 matmuls. Fixed: pinned uint8 copies with non_blocking,
    bf16 autocast, the loss kept on the device."""
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(3 * 64 * 64, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [torch.randint(0, 256, (BATCH, 3, 64, 64), dtype=torch.uint8) for _ in range(4)]
    # fixed: pinned uint8; planted: float32 made on the host, pageable
    batches = [b.pin_memory() if fixed else b.float().div(255) for b in batches]
    y = torch.randint(0, 10, (BATCH,), device=dev)
    total = torch.zeros((), device=dev)
    sched = schedule(wait=0, warmup=2, active=ACTIVE, repeat=1)
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts, schedule=sched, record_shapes=True) as prof:
        for i in range(ACTIVE + 2):
            x = batches[i % len(batches)]
            if fixed:
                x = x.to(dev, non_blocking=True).float().div_(255)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
            else:
                x = x.to(dev)
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if fixed:
                total += loss.detach()
            else:
                print(f"loss {loss.item():.3f}")
            prof.step()
    torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return diagnose(load_trace(path))


def test_planted_gpu_problems_are_found(tmp_path):
    d = gpu_loop(tmp_path / "slow.json", fixed=False)
    codes = {f.code for f in d.findings}
    assert {"TP102", "TP106", "TP307"} <= codes, [f.to_dict() for f in d.findings]
    assert d.profile.median.syncs >= 1
    assert d.profile.median.h2d_pageable_bytes == BATCH * 3 * 64 * 64 * 4


def test_fixed_loop_has_none_of_them(tmp_path):
    d = gpu_loop(tmp_path / "fast.json", fixed=True)
    codes = {f.code for f in d.findings}
    assert not codes & {"TP102", "TP103", "TP106", "TP201", "TP307"}, codes
    assert d.profile.median.h2d_pinned_bytes == BATCH * 3 * 64 * 64
