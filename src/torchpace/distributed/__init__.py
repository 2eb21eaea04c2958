"""The distributed-training practices of article 003 as functions to call from your own
script (PRACTICES.md P14, P28-P36). Every one also works in a single process, so the same
script runs as ``python train.py`` and under ``torchpace launch`` / ``torchrun``::

    import torchpace.distributed as tpd

    device = tpd.init()                       # joins the job torchrun started, or nothing
    tpd.seed_everything(0)
    model = tpd.wrap(Net(), device)           # SyncBatchNorm, then DDP
    acc = tpd.accumulate(model, micro_steps=4)
    for x, y in loader:
        with acc:                             # no_sync() on all micro-steps but the last
            acc.backward(loss_fn(model(x.to(device)), y.to(device)))
        if acc.should_step:
            optimizer.step()
            optimizer.zero_grad()
    tpd.save_checkpoint(model.state_dict(), "ckpt.pt")   # rank 0, atomically
    tpd.cleanup()

Modules: process.py (init, cleanup, rank facts), wrap.py, accumulate.py, evaluation.py
(exact distributed evaluation), seeding.py, rank_zero.py (rank-0 work, logging,
checkpoints), balance.py (length-bucketed batches).
"""

from torchpace.distributed.accumulate import Accumulator, accumulate
from torchpace.distributed.balance import LengthBucketBatchSampler
from torchpace.distributed.evaluation import SequentialDistributedSampler, gather_for_eval
from torchpace.distributed.process import (
    cleanup,
    init,
    is_distributed,
    local_rank,
    rank,
    world_size,
)
from torchpace.distributed.rank_zero import (
    main_process_first,
    rank_zero_only,
    save_checkpoint,
    setup_logging,
)
from torchpace.distributed.seeding import seed_everything, worker_init_fn
from torchpace.distributed.wrap import wrap

__all__ = [
    "Accumulator",
    "LengthBucketBatchSampler",
    "SequentialDistributedSampler",
    "accumulate",
    "cleanup",
    "gather_for_eval",
    "init",
    "is_distributed",
    "local_rank",
    "main_process_first",
    "rank",
    "rank_zero_only",
    "save_checkpoint",
    "seed_everything",
    "setup_logging",
    "worker_init_fn",
    "world_size",
    "wrap",
]
