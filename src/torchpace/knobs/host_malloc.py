"""host-malloc: glibc's malloc keeps the host memory a step frees for the next step (P26).

glibc serves an allocation above its mmap threshold (128 KiB at start, raised as large blocks
are freed, at most 32 MiB) with a fresh mmap, and gives the top of its heap back to the
kernel past its trim threshold (128 KiB). A training loop on the host allocates and frees
the same large buffers every step (a collated batch, activations, gradients on a CPU run),
so each step maps fresh pages and pays a page fault for each 4 KiB of them: ~5,000 minor
faults a step on the bundled example at 32 px, ~1.0 million in 130 steps. With the mmap
threshold at its 32 MiB ceiling and the trim threshold at 1 GiB, freed memory stays in the
heap and the next step reuses it: 173,000 faults in the same run, 8-15% faster on this 2-core
VM, with about 9% more resident memory (the heap keeps what a step freed).

The same effect as ``LD_PRELOAD`` of jemalloc or tcmalloc (the practice's own advice:
`torchpace launch` preloads them where installed), with nothing to install. Where one is
preloaded, or the user set ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` themselves,
or the C library is not glibc, the knob does not apply.

Applied in the child before the script runs, through ``mallopt`` (what the environment
variables feed, read by glibc at start); loader workers forked later inherit it. In your
code it is the environment, set before Python starts (the diff says so).

Switched within one process (tune's switched trials): glibc's own state is not "as it
starts" but what the script's frees made of it (each large block freed raises the mmap
threshold to its size, the trim threshold to twice that), so the knob leaves the warm-up
steps to glibc, reads the threshold they reached at the first timed step (``_threshold_now``)
and switches between that state, fixed, and its own. The two match whole processes: on the
bundled example glibc as it starts faulted 4,600-6,500 pages a step at a 9.47 MB threshold,
its fixed copy 5,250-6,500 in a switched process, and the blocks read 1.05-1.11x where
whole processes read 1.10-1.18x (benchmarks/results/host_malloc_switch_fidelity*).
"""

from __future__ import annotations

import ctypes
import os

from torchpace.env.process import glibc
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable

MMAP_THRESHOLD = 32 * 2**20  # glibc's ceiling for it (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
TRIM_THRESHOLD = 2**30
ENV = {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD, "MALLOC_TRIM_THRESHOLD_": TRIM_THRESHOLD}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h
_IS_MMAPPED = 0x2  # in a chunk's size word, the machine word before malloc's pointer
_FIRST_THRESHOLD = 128 * 2**10  # glibc's mmap threshold as it starts
_PROBE_GROWTH = 1.01  # each probe 1% above the last: the threshold is read within 1%


class HostMalloc(Knob):
    name = "host-malloc"
    title = "glibc malloc keeps freed host memory for the next step (no page faults per step)"
    practices = ("P26",)

    def plan(self, ctx: TuneContext) -> Plan:
        if glibc() is None:
            return not_applicable("the C library is not glibc: these are glibc's settings")
        preloaded = ctx.facts.process.allocator if ctx.facts.process else "default"
        if preloaded != "default":
            return not_applicable(f"{preloaded} is preloaded: it already caches freed memory")
        own = [k for k in ENV if k in os.environ]
        if own:
            return not_applicable(f"you set {', '.join(own)}: your setting stands")
        return Plan((True,), "glibc maps and faults in fresh pages for each step's large buffers")

    switchable = True
    switches_beside_workers = False

    def apply(self, value, runtime) -> str:
        self._held_back = False
        if not value:
            return "nothing done (host-malloc=false)"
        libc = glibc()
        if libc is None:  # a configuration tuned on Linux, run elsewhere
            return "nothing done: the C library here is not glibc"
        if self.name in runtime.switched_knobs:
            # glibc's own state comes from the script's frees: the warm-up makes it, the
            # switch reads it (below)
            self._held_back = True
            return "held back to the first timed step: the warm-up runs glibc's own state"
        _set_thresholds(libc, MMAP_THRESHOLD, TRIM_THRESHOLD)
        return (f"mallopt: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold "
                f"{TRIM_THRESHOLD >> 20} MiB (as {' and '.join(ENV)} would)")  # fmt: skip

    def switch(self, value, runtime):
        """The knob's thresholds (True), or glibc's own as the warm-up left them (False),
        fixed at what ``_threshold_now`` reads at the first timed step. Where the state
        cannot be read back (the thresholds were set at the start) or the switch cannot
        reach all of it (loader workers allocate in processes of their own), the knob is put
        in force for the whole trial and the trial is timed as an ordinary one."""
        held_back = getattr(self, "_held_back", None)
        if held_back is None:
            return "host-malloc was not applied in this process"
        if not held_back:
            return "host-malloc was set before the script ran: glibc's own state is gone"
        self._held_back = False
        libc = glibc()
        if runtime.batches_ahead:
            _set_thresholds(libc, MMAP_THRESHOLD, TRIM_THRESHOLD)
            return ("the loader's workers allocate in processes of their own, which a "
                    "switch in this one cannot reach: not switched")  # fmt: skip
        own = _threshold_now(libc)
        if own is None:
            _set_thresholds(libc, MMAP_THRESHOLD, TRIM_THRESHOLD)
            return "glibc's mmap threshold could not be read: not switched"

        def set_thresholds(on: bool) -> None:
            # glibc ties the trim threshold to twice the mmap threshold as it raises it
            _set_thresholds(libc, *((MMAP_THRESHOLD, TRIM_THRESHOLD) if on else (own, 2 * own)))

        return set_thresholds

    def describe(self, value) -> str:
        return "glibc malloc thresholds raised" if value else "glibc malloc as it starts"

    def source_edits(self, value) -> list[SourceEdit]:
        if not value:
            return []
        settings = " ".join(f"{k}={v}" for k, v in ENV.items())
        return [
            SourceEdit(
                "environment",
                note=f"set {settings} in the environment that starts training (glibc reads "
                "them when the process starts), or preload jemalloc/tcmalloc "
                "(`torchpace launch` does where one is installed), or keep "
                "`torchpace run --config`",
            )
        ]


KNOB = HostMalloc()


def _set_thresholds(libc, mmap_threshold: int, trim_threshold: int) -> None:
    done = libc.mallopt(_M_MMAP_THRESHOLD, mmap_threshold) and libc.mallopt(
        _M_TRIM_THRESHOLD, trim_threshold
    )
    if not done:
        raise RuntimeError("glibc's mallopt refused the thresholds")


def _threshold_now(libc) -> int | None:
    """glibc's mmap threshold as the process's frees have raised it: the least request size
    it serves with an mmap (the chunk's IS_MMAPPED bit). None where no request up to its
    32 MiB ceiling was mapped, or memory ran out.

    glibc maps a request only when its heap has no free chunk for it, so the requests,
    growing 1% at a time from where glibc starts, are all held until one is mapped: by the
    time they near the threshold they have taken the heap's free chunks (they add up to ~100
    times the last one), and the reading is the threshold's within 1%. None of them is
    touched beyond its header (a page each, ~550 at most), and all are freed at the end, the
    heap's freed top trimmed as glibc trims it. The one mapped raises the threshold to its
    own size when freed (glibc's dynamic rule): the switch fixes the threshold anyway."""
    malloc, free = libc.malloc, libc.free
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    held: list[int] = []
    try:
        size = _FIRST_THRESHOLD
        while size <= MMAP_THRESHOLD:
            pointer = malloc(size)
            if not pointer:
                return None
            held.append(pointer)
            word = ctypes.c_size_t.from_address(pointer - ctypes.sizeof(ctypes.c_size_t))
            if word.value & _IS_MMAPPED:
                return size
            size = int(size * _PROBE_GROWTH) + 16
        return None
    finally:
        for pointer in reversed(held):
            free(pointer)
