"""Where a step's memory goes: the split at the peak, the timeline of the window, the user's
lines that fill it, what activation checkpointing would free, and the ways out of an
out-of-memory failure with what each frees.

Reads the capture's memory facts (capture/memory.py: tensors counted inside the user's
process) and the trace's [memory] samples (the allocator's totals); every number says how
it was obtained (``HOW``), and the report repeats it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchpace.facts.memory import MemorySplit, OutOfMemory, StepMemory, UnitBytes
from torchpace.report.memory_model import (
    BatchHeadroom,
    PeakSplitReport,
    Timeline,
    TimelineStep,
    WayOut,
)
from torchpace.trace.index import TimeIndex
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
    "capacity_cpu": "the limit with the least room left among the host's RAM, RLIMIT_AS, "
    "RLIMIT_DATA and the cgroup's memory limit, read in the process at that moment",
    "capacity_cuda": "the device's memory (times the per-process memory fraction when set)",
    "usable": "the capacity minus what its limit counted besides the step's tensors at that "
    "moment (libraries, the interpreter, allocator caches, data held outside the window's "
    "allocations; other processes for host RAM or a cgroup): what the step's tensors can use",
}
# Which moment of the step the split was taken at (StepMemory.split, .optimizer_split).
MOMENT_ACTIVATIONS = "the most activations saved (end of forward)"
MOMENT_OPTIMIZER = "the optimizer step (gradients complete)"


def size(nbytes: float) -> str:
    """Bytes for people: KiB below a MiB, GiB from a GiB."""
    if abs(nbytes) >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    if abs(nbytes) >= MIB:
        return f"{nbytes / MIB:.0f} MiB"
    return f"{nbytes / 1024:.1f} KiB"


# --- the timeline ------------------------------------------------------------------------


def timeline(model: TraceModel) -> Timeline | None:
    """The main device's allocated bytes over the window, as points (ms from the window's
    start, bytes): the most in each of TIMELINE_POINTS_PER_STEP slices of each step; plus
    where each step starts, ends and its backward begins."""
    if not model.memory or not model.steps:
        return None
    keys = {s.device_key for s in model.memory}
    key = next((k for k in sorted(keys) if k.startswith("cuda")), "cpu")
    samples = TimeIndex(s for s in model.memory if s.device_key == key)
    origin = model.steps[0].ts
    points: list[tuple[float, float]] = []
    steps = []
    backward = TimeIndex(op for op in model.cpu_ops if op.name.startswith(BACKWARD_PREFIX))
    for step in model.steps:
        inside = samples.starting_in(step.ts, step.end)
        width = step.dur / TIMELINE_POINTS_PER_STEP or 1.0
        for i in range(TIMELINE_POINTS_PER_STEP):
            lo, hi = step.ts + i * width, step.ts + (i + 1) * width
            in_slice = [s.total_allocated for s in inside if lo <= s.ts < hi]
            if in_slice:
                points.append((round((lo - origin) / 1000, 3), max(in_slice)))
        starts = [op.ts for op in backward.starting_in(step.ts, step.end)]
        steps.append(
            TimelineStep(
                start_ms=round((step.ts - origin) / 1000, 3),
                end_ms=round((step.end - origin) / 1000, 3),
                backward_start_ms=round((min(starts) - origin) / 1000, 3) if starts else None,
            )
        )
    if not points:
        return None
    return Timeline(key, "bytes allocated", tuple(points), tuple(steps))


# --- the split at the peak -----------------------------------------------------------------


@dataclass
class PeakSplit:
    step: int  # the step (index in the run) whose peak this is
    device: str  # "cpu", "cuda"
    peak: int
    peak_how: str
    # the memory there is: the device's, or on a CPU run the process's binding limit (host
    # RAM, RLIMIT_AS, RLIMIT_DATA, the cgroup's limit), named by capacity_kind
    capacity: int | None
    parts: dict[str, int]  # parameters, gradients, optimizer_state, activations, rest
    capacity_kind: str | None = None
    # what the limit counted besides the step's tensors at the peak (libraries, allocator
    # caches, data sets held in memory, other processes in a cgroup); 0 on CUDA
    outside: int = 0
    moment: str = MOMENT_ACTIVATIONS  # when in the step the parts were taken
    # the named parts at the step's other moment (the optimizer step, or the most
    # activations): the batch headroom must fit both
    other_parts: dict[str, int] | None = None

    @property
    def usable(self) -> int | None:
        """What the step's tensors can use: the capacity minus what is held outside them."""
        return max(self.capacity - self.outside, 0) if self.capacity else None

    def report(self) -> PeakSplitReport:
        """The split as the report shows it: with the shares, the capacity in words and how
        each number was obtained."""
        usable = self.usable
        capacity_how = HOW["capacity_cpu"] if self.device == "cpu" else HOW["capacity_cuda"]
        return PeakSplitReport(
            step=self.step,
            device=self.device,
            peak=self.peak,
            peak_how=self.peak_how,
            capacity=self.capacity,
            capacity_kind=self.capacity_kind,
            capacity_text=(
                capacity_phrase(self.capacity_kind, self.capacity, self.device)
                if self.capacity
                else None
            ),
            outside=self.outside,
            usable_bytes=usable,
            moment=self.moment,
            parts=dict(self.parts),
            other_parts=self.other_parts,
            pct_of_capacity=(
                {k: round(100 * v / self.capacity, 1) for k, v in self.parts.items()}
                if self.capacity
                else None
            ),
            pct_of_usable=(
                {k: round(100 * v / usable, 1) for k, v in self.parts.items()} if usable else None
            ),
            how={k: HOW[k] for k in self.parts}
            | {"peak": self.peak_how, "capacity": capacity_how, "usable": HOW["usable"]},
        )


def peak_split(
    memory_steps: list[StepMemory], peaks: dict[int, tuple[int, str]]
) -> PeakSplit | None:
    """The split of the step with the highest peak. ``peaks``: step index -> (peak bytes,
    how it was measured), from the trace or the run facts."""
    candidates = [(peaks[s.index], s) for s in memory_steps if s.index in peaks]
    if not candidates:
        return None
    (peak, how), step = max(candidates, key=lambda c: c[0][0])
    # Of the step's two moments (most activations saved; the optimizer step, gradients
    # complete) the one holding more explains more of the peak: a ResNet at a small batch
    # peaks with its gradients, an activation-heavy model at the end of its forward.
    moments = [(MOMENT_ACTIVATIONS, step.split)]
    if step.optimizer_split is not None:
        moments.append((MOMENT_OPTIMIZER, step.optimizer_split))
    moment, split = max(moments, key=lambda m: sum(_named(m[1]).values()))
    others = [_named(s) for name, s in moments if name != moment]
    named = _named(split)
    if how == HOW["peak_cpu"]:  # the profiler's CPU total counts from the window's start
        peak += split.parameters + split.optimizer_state
    peak = max(peak, sum(named.values()))
    outside = 0
    if split.capacity_used is not None:  # what the limit counts, less the step's tensors
        outside = max(split.capacity_used - peak, 0)
    return PeakSplit(
        step=step.index,
        device=split.device,
        peak=peak,
        peak_how=how,
        capacity=split.capacity,
        parts={**named, "rest": peak - sum(named.values())},
        capacity_kind=split.capacity_kind,
        outside=outside,
        moment=moment,
        other_parts=others[0] if others else None,
    )


def _named(split: MemorySplit) -> dict[str, int]:
    return {
        "parameters": split.parameters,
        "gradients": split.gradients,
        "optimizer_state": split.optimizer_state,
        "activations": split.activations,
    }


def capacity_phrase(kind: str | None, capacity: int, device: str = "cpu") -> str:
    """How the memory there is reads in a sentence: "the 2.00 GiB RLIMIT_AS"."""
    if kind in (None, "device") and device != "cpu":
        return f"the device's {size(capacity)}"
    if kind in (None, "host RAM"):
        return f"the {size(capacity)} of host RAM"
    if kind.startswith("cgroup"):
        return f"the cgroup's {size(capacity)} limit ({kind.removeprefix('cgroup ')})"
    return f"the {size(capacity)} {kind}"


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


# --- how much larger the batch could be ----------------------------------------------------

# The share of the memory a batch may be planned to fill: the rest absorbs fragmentation and
# the odd longer batch (the same margin TP403 warns at).
USABLE_SHARE = 0.9


def batch_headroom(split: PeakSplit, batch_size: int | None) -> BatchHeadroom | None:
    """The largest batch estimated to fit: what does not scale with the batch (parameters,
    gradients, optimizer state) stays, what does (activations and the rest: inputs,
    outputs, temporaries) grows in proportion, at each of the step's moments (the most
    activations, the optimizer step: the rest assumed the same at both), in the memory the
    step's tensors can use (``PeakSplit.usable``). An estimate that `torchpace tune`'s
    batch-size finder checks (--allow-batch-size), never a promise."""
    usable = split.usable
    if not usable or not batch_size:
        return None
    rest = split.parts["rest"]
    fits = []
    for parts in [split.parts, split.other_parts or {}]:
        if not parts:
            continue
        fixed = sum(parts[k] for k in ("parameters", "gradients", "optimizer_state"))
        scaled = parts["activations"] + rest
        if scaled > 0:
            fits.append(((usable - fixed) / scaled, fixed, scaled))
    if not fits:
        return None
    scale, fixed, scaled = min(fits)
    margin = (usable * USABLE_SHARE - fixed) / scaled
    return BatchHeadroom(
        batch_size=batch_size,
        largest_batch_estimate=max(int(batch_size * margin), 0),
        largest_batch_at_limit=max(int(batch_size * scale), 0),
        fixed_bytes=fixed,
        per_sample_bytes=scaled // batch_size,
        usable_bytes=usable,
        capacity_bytes=split.capacity,
        capacity_kind=split.capacity_kind,
        capacity_text=capacity_phrase(split.capacity_kind, split.capacity, split.device),
        how=f"({USABLE_SHARE:.0%} of the memory the step's tensors can use - parameters, "
        "gradients, optimizer state) / (activations + rest) per sample, at the step's moment "
        "that allows the smaller batch; largest_batch_at_limit: with all of it",
    )
