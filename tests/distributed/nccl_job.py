"""One rank on one GPU through torchrun: init() picks NCCL and the rank's device, wrap()
converts BatchNorm to SyncBatchNorm before DDP, and a step runs. Writes OUT/nccl.json.
Run by torchrun, not by pytest."""

import json
import os
import sys

import torch
from torch import nn

import torchpace.distributed as tpd

device = tpd.init()
model = tpd.wrap(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()), device)
model(torch.randn(4, 3, 16, 16, device=device)).sum().backward()
result = {
    "backend": torch.distributed.get_backend(),
    "device": str(device),
    "bn": type(model.module[1]).__name__,
    "wrapped": type(model).__name__,
}
with open(os.path.join(sys.argv[1], "nccl.json"), "w") as f:
    json.dump(result, f)
tpd.cleanup()
