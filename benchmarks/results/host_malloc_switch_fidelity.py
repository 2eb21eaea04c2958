"""Does host-malloc's switch (knobs/host_malloc.py) reproduce glibc's own state in a switched
process? The bundled example's loop at 32 px (resnet18, batch 32, 0 workers), three modes:

- default: glibc as it starts, never touched (the threshold read at the end, for the record);
- on: the knob's thresholds from the start;
- switch: glibc as it starts for 8 steps, its threshold read (``_threshold_now``), then 8
  rounds of on / off blocks, off the read threshold fixed and trim twice it.

Each block: 1 settling step, 6 timed; printed: median ms/step and minor faults per step.

    for r in 1 2 3; do for m in default on switch; do
        python benchmarks/results/host_malloc_switch_fidelity.py $m; done; done
"""

import ctypes
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch
import torchvision
import torchvision.transforms as T

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from fake_cifar_resnet import FakeCIFAR

from torchpace.knobs.host_malloc import _threshold_now

libc = ctypes.CDLL("libc.so.6")
M_TRIM, M_MMAP = -1, -3
ON = (32 * 2**20, 2**30)


def set_thresholds(mmap_threshold, trim_threshold):
    libc.mallopt(M_MMAP, mmap_threshold)
    libc.mallopt(M_TRIM, trim_threshold)


mode = sys.argv[1]
if mode == "on":
    set_thresholds(*ON)
torch.manual_seed(0)
transform = T.Compose([T.Resize(32), T.ToTensor(), T.Normalize((0.5,) * 3, (0.5,) * 3)])
loader = torch.utils.data.DataLoader(FakeCIFAR(transform, 1024), batch_size=32, shuffle=True)
model = torchvision.models.resnet18(weights=None)
criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)


def batches():
    while True:
        yield from loader


batch = batches()


def step():
    x, y = next(batch)
    loss = criterion(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def block(steps=6):
    step()  # settling
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for _ in range(steps):
        step()
    ms = (time.perf_counter() - start) / steps * 1e3
    return ms, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps


for _ in range(8):
    step()
if mode == "switch":
    own = _threshold_now(libc)
    blocks = {"on": [], "off": []}
    for r in range(8):
        for arm in ["on", "off"] if r % 2 == 0 else ["off", "on"]:
            set_thresholds(*(ON if arm == "on" else (own, 2 * own)))
            blocks[arm].append(block())
    on, off = ([ms for ms, _ in blocks[arm]] for arm in ("on", "off"))
    ratio = statistics.median(b / a for a, b in zip(on, off, strict=True))
    med = statistics.median
    said = {}
    for arm, runs in blocks.items():
        said[arm] = (round(med(ms for ms, _ in runs), 1), round(med(f for _, f in runs)))
    print(json.dumps({"mode": mode, "threshold": own, **said, "off/on": round(ratio, 3)}))
else:
    runs = [block() for _ in range(8)]
    threshold = _threshold_now(libc) if mode == "default" else None
    print(json.dumps({"mode": mode, "threshold": threshold,
                      "ms": round(statistics.median(ms for ms, _ in runs), 1),
                      "faults": round(statistics.median(f for _, f in runs))}))  # fmt: skip
