"""Is channels_last's switched reading inflated where a DataLoader's workers share the cores?
Blocks as short as tune's switched trials on pytorch/examples' imagenet (--dummy, -b 16): one
settling step and two timed, ResNet-18 (weights=None) under bf16 autocast, SGD with
momentum, batches from FakeData through `workers` loader workers (0: one batch reused).
Each step's time by its place in the block (median over 10 blocks) and the timed steps' mean.

    python THIS_FILE plain|switch WORKERS [image size, 224]

Results beside this file (_2026-11-28.txt)."""

import statistics
import sys
import time

import torch
import torchvision
from torchvision import datasets, transforms

from torchpace.knobs.channels_last import _relayout

torch.manual_seed(0)
mode, workers = sys.argv[1], int(sys.argv[2])
size = int(sys.argv[3]) if len(sys.argv) > 3 else 224
model = torchvision.models.resnet18(weights=None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
convs = [p for p in model.parameters() if p.dim() == 4]
x0 = torch.randn(16, 3, size, size)
y0 = torch.randint(0, 1000, (16,))
if workers:
    data = datasets.FakeData(100000, (3, size, size), 1000, transforms.ToTensor())
    loader = iter(
        torch.utils.data.DataLoader(data, batch_size=16, shuffle=True, num_workers=workers)
    )


def batch():
    return next(loader) if workers else (x0, y0)


def step(cl):
    x, y = batch()
    x = x.to(memory_format=torch.channels_last) if cl else x
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    loss = torch.nn.functional.cross_entropy(out.float(), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def t(cl):
    s = time.perf_counter()
    step(cl)
    return 1000 * (time.perf_counter() - s)


for _ in range(4):
    step(False)
res = {}
for _ in range(10):
    for cl in (True, False) if mode == "switch" else (False, False):
        if mode == "switch":
            _relayout(
                torch, convs, [optimizer], torch.channels_last if cl else torch.contiguous_format
            )
        res.setdefault(cl, []).append([round(t(cl)) for _ in range(3)])
for cl, blocks in res.items():
    print(
        mode,
        "workers",
        workers,
        "cl" if cl else "off",
        "by place:",
        [round(statistics.median(b[i] for b in blocks)) for i in range(3)],
        "timed mean",
        round(statistics.mean(v for b in blocks for v in b[1:])),
    )
