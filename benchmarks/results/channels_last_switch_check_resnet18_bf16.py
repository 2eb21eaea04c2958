"""Does channels-last's switch (knobs/channels_last._relayout) leave the script's own layout as
fast as a process that never converted? ResNet-18 (weights=None), batch 16, bf16 autocast on
the CPU, SGD with momentum; no DataLoader. Modes, each in its own process:

    plain   the script's layout throughout
    cl      converted to channels_last once, then timed
    switch  6 rounds: converted and timed (on), converted back and timed (off)

    python THIS_FILE plain|cl|switch [image size, 112]

Results of 2026-11-28 beside this file (_2026-11-28.txt)."""

import statistics
import sys
import time

import torch
import torchvision

from torchpace.knobs.channels_last import _relayout

torch.manual_seed(0)
mode = sys.argv[1]
size = int(sys.argv[2]) if len(sys.argv) > 2 else 112
model = torchvision.models.resnet18(weights=None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
x = torch.randn(16, 3, size, size)
y = torch.randint(0, 1000, (16,))
convs = [p for p in model.parameters() if p.dim() == 4]


def step(channels_last: bool) -> None:
    inputs = x.to(memory_format=torch.channels_last) if channels_last else x
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(inputs)
    loss = torch.nn.functional.cross_entropy(out.float(), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def timed(n: int, channels_last: bool) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        step(channels_last)
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def layout(channels_last: bool) -> None:
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    _relayout(torch, convs, [optimizer], memory_format)
    step(channels_last)  # the switch's settling step, untimed


for _ in range(3):
    step(False)
if mode == "plain":
    print("plain", [round(timed(6, False)) for _ in range(6)])
elif mode == "cl":
    layout(True)
    print("cl", [round(timed(6, True)) for _ in range(6)])
else:
    on, off = [], []
    for _ in range(6):
        layout(True)
        on.append(round(timed(6, True)))
        layout(False)
        off.append(round(timed(6, False)))
    print("switch on", on, "off", off)
