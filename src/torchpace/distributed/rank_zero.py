"""Work done once per job, not once per rank (P35): logging, downloads, checkpoints."""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import torch
import torch.distributed as dist

from torchpace.atomic import atomic_file
from torchpace.distributed.process import is_distributed, local_rank, rank


def rank_zero_only(fn):
    """Decorator: ``fn`` runs on rank 0 only and returns None on the other ranks.

    Nothing waits here: use it for side effects the other ranks do not read (printing,
    logging metrics), and main_process_first() for work they need the result of."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) if rank() == 0 else None

    return wrapper


@contextlib.contextmanager
def main_process_first(local: bool = False):
    """The block runs on rank 0 first (downloading or preprocessing a dataset into a cache),
    then on the other ranks, which find the cache ready::

        with main_process_first():
            dataset = load_or_build(cache_dir)

    ``local=True``: the first process of each node instead (LOCAL_RANK 0), for a cache on
    a node's own disk. A no-op in a single process.
    """
    first = (local_rank() if local else rank()) == 0
    if is_distributed() and not first:
        dist.barrier()  # wait until the first process has done the work
    try:
        yield
    finally:
        if is_distributed() and first:
            dist.barrier()  # release the others


def setup_logging(level: int = logging.INFO, fmt: str | None = None) -> None:
    """Log at ``level`` on rank 0 and at WARNING on the other ranks (errors from every rank
    still show), each line prefixed with its rank."""
    logging.basicConfig(
        level=level if rank() == 0 else max(level, logging.WARNING),
        format=fmt or f"[rank {rank()}] %(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )


def save_checkpoint(obj, path: str | Path) -> bool:
    """``torch.save(obj, path)`` on rank 0 only, atomically: written to a temporary file
    beside ``path``, flushed to disk and renamed over it, so a crash mid-save leaves the
    previous checkpoint intact. Every rank then waits at a barrier, so no rank reads or
    overwrites the file before it is complete. Returns True on the rank that wrote it."""
    wrote = False
    if rank() == 0:
        with atomic_file(path) as f:
            torch.save(obj, f)
        wrote = True
    if is_distributed():
        dist.barrier()
    return wrote
