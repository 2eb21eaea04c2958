"""Process-level facts: threads, the OpenMP/MKL environment, the allocator, shared memory."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

# The variables that change how many threads PyTorch's CPU kernels use and where they run
# (PRACTICES.md, P24/P25).
THREAD_ENV_PREFIXES = ("OMP_", "KMP_", "MKL_", "GOMP_")

# Allocator libraries recognised in LD_PRELOAD, by the start of the file name.
ALLOCATORS = {"libjemalloc": "jemalloc", "libtcmalloc": "tcmalloc", "libmimalloc": "mimalloc"}
OPENMP_RUNTIMES = {"libiomp5": "Intel OpenMP (libiomp5)", "libgomp": "GNU OpenMP (libgomp)"}


@dataclass(frozen=True)
class ProcessFacts:
    intra_op_threads: int | None
    inter_op_threads: int | None
    thread_env: dict[str, str]
    allocator: str  # "default" when nothing is preloaded
    openmp_preload: str | None
    ld_preload: str
    shm_bytes: int | None  # size of /dev/shm, which DataLoader workers pass batches through
    shm_free_bytes: int | None


def thread_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(THREAD_ENV_PREFIXES)}


def _preloaded(ld_preload: str, table: dict[str, str]) -> str | None:
    # LD_PRELOAD separates entries with spaces or colons (ld.so(8)).
    for entry in ld_preload.replace(":", " ").split():
        base = os.path.basename(entry)
        for prefix, name in table.items():
            if base.startswith(prefix):
                return name
    return None


def allocator_from_ld_preload(ld_preload: str) -> str:
    return _preloaded(ld_preload, ALLOCATORS) or "default"


def openmp_from_ld_preload(ld_preload: str) -> str | None:
    return _preloaded(ld_preload, OPENMP_RUNTIMES)


def shm_size(path: str = "/dev/shm") -> tuple[int | None, int | None]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def read_process_facts(environ: dict[str, str] | None = None) -> ProcessFacts:
    import torch

    environ = dict(os.environ if environ is None else environ)
    ld_preload = environ.get("LD_PRELOAD", "")
    shm_total, shm_free = shm_size()
    return ProcessFacts(
        intra_op_threads=torch.get_num_threads(),
        inter_op_threads=torch.get_num_interop_threads(),
        thread_env=thread_env(environ),
        allocator=allocator_from_ld_preload(ld_preload),
        openmp_preload=openmp_from_ld_preload(ld_preload),
        ld_preload=ld_preload,
        shm_bytes=shm_total,
        shm_free_bytes=shm_free,
    )


def glibc():
    """This process's glibc through ctypes (for ``mallopt``, ``malloc_trim``), or None where
    the C library is another (musl, macOS): their allocators take none of glibc's settings."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None
