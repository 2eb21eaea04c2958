"""A 2-rank gloo job whose rank 1 never joins rank 0's all_reduce: rank 0 must time out
and say so. Run by torchrun, not by pytest."""

import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torchpace.distributed as tpd

tpd.init(timeout=timedelta(seconds=3))
if tpd.rank() == 1:
    time.sleep(90)  # busy elsewhere: never calls the collective (torchrun ends it)
else:
    dist.all_reduce(torch.ones(1))
tpd.cleanup()
