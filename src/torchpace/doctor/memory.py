"""Where a step's memory goes: the split at the peak, the timeline of the window, the user's
lines that fill it, what activation checkpointing would free, and the ways out of an
out-of-memory failure with what each frees.

Reads the capture's memory facts (capture/memory.py: tensors counted inside the user's
process) and the trace's [memory] samples (the allocator's totals); every number says how
it was obtained (``HOW``), and the report repeats it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torchpace.capture.memory_facts import MemorySplit, OutOfMemory, StepMemory, UnitBytes
from torchpace.trace.model import BACKWARD_PREFIX, TraceModel

MIB = 2**20
# The timeline keeps this many points per step (the most bytes in each slice of the step):
# enough to see forward rise and backward fall, small in the JSON.
TIMELINE_POINTS_PER_STEP = 24

HOW = {
    "parameters": "distinct storages of the model's and optimizers' parameters",
    "gradients": "distinct storages of the parameters' .grad at that moment",
    "optimizer_state": "distinct storages of the optimizers' state tensors",
    "activations": "distinct storages autograd held for backward at that moment (a "
    "saved-tensors hook), parameters left out",
    "rest": "the step's peak minus the four above: inputs, outputs, temporaries; on CUDA "
    "the cache and fragmentation are reserved minus allocated",
    "peak_cpu": "the most bytes allocated in the step since the profiled window began "
    "([memory] events of torch.profiler, which count only those), plus the parameters and "
    "optimizer state allocated before it; other tensors allocated before the window (a "
    "data set held in memory) are not in it",
    "peak_cuda": "torch.cuda.max_memory_allocated() over the step",
}


def size(nbytes: float) -> str:
    """Bytes for people: KiB below a MiB, GiB from a GiB."""
    if abs(nbytes) >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    if abs(nbytes) >= MIB:
        return f"{nbytes / MIB:.0f} MiB"
    return f"{nbytes / 1024:.1f} KiB"


# --- the timeline ------------------------------------------------------------------------


def timeline(model: TraceModel) -> dict | None:
    """The main device's allocated bytes over the window, as points (ms from the window's
    start, bytes): the most in each of TIMELINE_POINTS_PER_STEP slices of each step; plus
    where each step starts, ends and its backward begins."""
    if not model.memory or not model.steps:
        return None
    keys = {s.device_key for s in model.memory}
    key = next((k for k in sorted(keys) if k.startswith("cuda")), "cpu")
    samples = [s for s in model.memory if s.device_key == key]
    origin = model.steps[0].ts
    points: list[list[float]] = []
    steps = []
    backward = [op.ts for op in model.cpu_ops if op.name.startswith(BACKWARD_PREFIX)]
    for step in model.steps:
        inside = [s for s in samples if step.contains(s.ts)]
        width = step.dur / TIMELINE_POINTS_PER_STEP or 1.0
        for i in range(TIMELINE_POINTS_PER_STEP):
            lo, hi = step.ts + i * width, step.ts + (i + 1) * width
            in_slice = [s.total_allocated for s in inside if lo <= s.ts < hi]
            if in_slice:
                points.append([round((lo - origin) / 1000, 3), max(in_slice)])
        starts = [t for t in backward if step.contains(t)]
        steps.append(
            {
                "start_ms": round((step.ts - origin) / 1000, 3),
                "end_ms": round((step.end - origin) / 1000, 3),
                "backward_start_ms": round((min(starts) - origin) / 1000, 3) if starts else None,
            }
        )
    if not points:
        return None
    return {"device": key, "unit": "bytes allocated", "points": points, "steps": steps}


# --- the split at the peak -----------------------------------------------------------------


@dataclass
class PeakSplit:
    step: int  # the step (index in the run) whose peak this is
    device: str  # "cpu", "cuda"
    peak: int
    peak_how: str
    capacity: int | None  # the device's memory, or the host's RAM on a CPU run
    parts: dict[str, int]  # parameters, gradients, optimizer_state, activations, rest

    def to_dict(self) -> dict:
        d = asdict(self)
        d["pct_of_capacity"] = (
            {k: round(100 * v / self.capacity, 1) for k, v in self.parts.items()}
            if self.capacity
            else None
        )
        d["how"] = {k: HOW[k] for k in self.parts} | {"peak": self.peak_how}
        return d


def peak_split(
    memory_steps: list[StepMemory], peaks: dict[int, tuple[int, str]]
) -> PeakSplit | None:
    """The split of the step with the highest peak. ``peaks``: step index -> (peak bytes,
    how it was measured), from the trace or the run facts."""
    candidates = [(peaks[s.index], s) for s in memory_steps if s.index in peaks]
    if not candidates:
        return None
    (peak, how), step = max(candidates, key=lambda c: c[0][0])
    split = step.split
    named = {
        "parameters": split.parameters,
        "gradients": split.gradients,
        "optimizer_state": split.optimizer_state,
        "activations": split.activations,
    }
    if how == HOW["peak_cpu"]:  # the profiler's CPU total counts from the window's start
        peak += split.parameters + split.optimizer_state
    peak = max(peak, sum(named.values()))
    return PeakSplit(
        step=step.index,
        device=split.device,
        peak=peak,
        peak_how=how,
        capacity=split.capacity,
        parts={**named, "rest": peak - sum(named.values())},
    )


# --- what checkpointing frees ------------------------------------------------------------


def checkpoint_saving(units: list[UnitBytes]) -> int | None:
    """Bytes freed at the peak by checkpointing every unit (torch.utils.checkpoint on each
    block): each unit then keeps only its inputs, and during backward one unit at a time
    holds its recomputed activations. None with fewer than two units holding activations."""
    holding = [u for u in units if u.activation_bytes > 0]
    if len(holding) < 2:
        return None
    kept = sum(u.input_bytes for u in holding) + max(u.activation_bytes for u in holding)
    return max(0, sum(u.activation_bytes for u in holding) - kept)


# --- the ways out of an out-of-memory failure ----------------------------------------------


@dataclass
class WayOut:
    name: str
    frees_bytes: int
    how: str  # what the estimate assumes
    cost: str  # what it costs in time or semantics
    knob: str | None = None  # the tune knob that tries it

    def to_dict(self) -> dict:
        return asdict(self)


def ways_out(oom: OutOfMemory) -> list[WayOut]:
    """The fixes that apply to this failure, most memory freed first."""
    split = oom.split
    act = split.activations
    ways = []
    scaled = act + oom.input_bytes
    if scaled:
        ways.append(
            WayOut(
                "half the micro-batch, accumulate 2 micro-steps per optimizer step (P14)",
                scaled // 2,
                "activations and the batch scale with the micro-batch: half of "
                + size(act + oom.input_bytes),
                "the same effective batch; a little less throughput (smaller kernels)",
            )
        )
    saving = checkpoint_saving(oom.units)
    if saving:
        ways.append(
            WayOut(
                "activation checkpointing on each of the model's blocks (P12)",
                saving,
                f"{len([u for u in oom.units if u.activation_bytes])} blocks keep only their "
                "inputs; one block's activations are recomputed at a time in backward",
                "about one extra forward pass per step (~30% more compute)",
            )
        )
    float32 = oom.activation_dtype_bytes.get("float32", 0)
    if not oom.autocast and float32:
        ways.append(
            WayOut(
                "bf16 autocast (P19)",
                float32 // 2,
                f"float32 activations ({size(float32)}) saved in bf16 take half; "
                "an upper bound, as norms and softmax stay in float32",
                "changes numerics (bf16); faster on tensor-core GPUs",
                knob="amp",
            )
        )
    if split.reserved is not None and split.allocated is not None:
        cached = split.reserved - split.allocated
        if cached > 0:
            ways.append(
                WayOut(
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                    cached,
                    f"reserved but unallocated: {size(cached)} the caching allocator "
                    "holds in blocks too fragmented for the request",
                    "none measurable in most jobs",
                )
            )
    return sorted(ways, key=lambda w: -w.frees_bytes)


def shortfall(oom: OutOfMemory) -> int | None:
    """Bytes missing for the failed request: requested minus free (CUDA), else requested;
    None when unknown, or when the device had the bytes free (then fragmentation, or
    another process, refused the request)."""
    if oom.requested_bytes is None:
        return None
    missing = oom.requested_bytes - (oom.free_bytes or 0)
    return missing if missing > 0 else None


def split_dict(split: MemorySplit) -> dict:
    return asdict(split)


# --- how much larger the batch could be ----------------------------------------------------

# The share of the memory a batch may be planned to fill: the rest absorbs fragmentation and
# the odd longer batch (the same margin TP403 warns at).
USABLE_SHARE = 0.9


def batch_headroom(split: PeakSplit, batch_size: int | None) -> dict | None:
    """The largest batch estimated to fit: what does not scale with the batch (parameters,
    gradients, optimizer state) stays, what does (activations and the rest: inputs,
    outputs, temporaries) grows in proportion. An estimate for `torchpace tune`'s batch-size
    finder to check, never a promise."""
    if not split.capacity or not batch_size:
        return None
    fixed = sum(split.parts[k] for k in ("parameters", "gradients", "optimizer_state"))
    scaled = split.parts["activations"] + split.parts["rest"]
    if scaled <= 0:
        return None
    room = USABLE_SHARE * split.capacity - fixed
    largest = int(batch_size * room / scaled)
    return {
        "batch_size": batch_size,
        "largest_batch_estimate": max(largest, 0),
        "fixed_bytes": fixed,
        "per_sample_bytes": scaled // batch_size,
        "how": f"({USABLE_SHARE:.0%} of the memory - parameters, gradients, optimizer state) "
        "/ (activations + rest) per sample",
    }
