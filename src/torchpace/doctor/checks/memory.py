"""Memory: TP401 (growth across steps: a leak), TP403 (peak close to capacity), TP404 (the
script ran out of memory), TP405 (activations dominate: checkpointing would free them)."""

from __future__ import annotations

import itertools

from torchpace.doctor import memory
from torchpace.doctor.checks._data import _peak_and_capacity
from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Growth, Profile

KIB = 1024
MIB = 2**20
# Findings that ask a job for more memory: never given to a run that ran out of it (a
# bigger batch for a job that died of "CUDA out of memory" would be the wrong first step).
NOT_AFTER_OOM = frozenset({"TP104"})


class MemoryGrowth(Check):
    """TP401: allocated memory at the end of each step rises steadily: something keeps
    tensors (often whole autograd graphs, via ``total += loss``) alive across steps."""

    # A steady step loop allocates the same at every step end; a line this straight
    # (r^2) through a rise in most steps is growth, not noise.
    MIN_R2 = 0.9
    MIN_RISING_SHARE = 0.75
    # Allocator totals (trace [memory] events, CUDA allocated bytes) are exact: a steady
    # loop ends every step at the same byte count, so even a small steady rise is a leak.
    MIN_BYTES_PER_STEP = 512
    # A leak that fills the device within this many steps ends the job: ImageNet's 90
    # epochs at batch 256 are ~450k steps, longer than most training jobs run.
    JOB_STEPS = 450_000

    def run(self, profile: Profile) -> list[Finding]:
        if len(input_shapes(profile)) > 1:
            return []  # the model's inputs change size: growth says nothing of a leak
        for g in profile.growth:
            if (
                g.bytes_per_step >= self.MIN_BYTES_PER_STEP
                and g.r2 >= self.MIN_R2
                and g.rising_share >= self.MIN_RISING_SHARE
            ):
                return [self._finding(profile, g)]
        return []

    def _finding(self, profile: Profile, g: Growth) -> Finding:
        site = leak_site(profile)
        evidence = {
            "growth_kib_per_step": r(g.bytes_per_step / KIB, 1),
            "fit_r2": r(g.r2, 3),
            "steps_fitted": g.steps,
            "allocated_first_mib": r(g.first / 2**20),
            "allocated_last_mib": r(g.last / 2**20),
            "measured_on": g.source,
        }
        _, capacity = _peak_and_capacity(profile)
        ends_job = None
        if capacity and "cuda" in g.source:
            left = max(0, int((capacity - g.last) / g.bytes_per_step))
            evidence["steps_until_full"] = left
            ends_job = _runs_out(profile, left)
        where = ""
        if site is not None:
            location, per_step, kind = site
            if kind == "copies":
                evidence["kept_copies_kib_per_step"] = r(per_step / KIB, 1)
                where = (
                    f"; tensors made at {location} (.detach(), .clone(), .to(), .cpu()) are "
                    f"kept across steps, {per_step / KIB:.1f} KiB more each step"
                )
            else:
                evidence["kept_activations_kib_per_step"] = r(per_step / KIB, 1)
                where = (
                    f"; activations computed at {location} stay alive after backward, "
                    f"{per_step / KIB:.1f} KiB more each step"
                )
        return Finding(
            "TP401",
            evidence=evidence,
            severity="high",
            location=site[0] if site else None,
            detail=f"memory grows {g.bytes_per_step / KIB:.1f} KiB every step ({g.source})" + where,
            fix=_LEAK_FIX_COPIES if site is not None and site[2] == "copies" else _LEAK_FIX,
            ends_job=ends_job,
            notes=[
                "a leak costs no time per step until memory runs out; one that fills the "
                "device within a training job's length ends the job and comes first"
                if ends_job
                else "a leak costs no time per step until memory runs out: ranked by severity"
            ],
        )


def _runs_out(profile: Profile, steps_left: int) -> str | None:
    """How the leak ends the job ("the job runs out of device memory at step ~84"), or None
    when the device would last longer than a training job runs (MemoryGrowth.JOB_STEPS)."""
    if steps_left > MemoryGrowth.JOB_STEPS:
        return None
    window = profile.facts.window if profile.facts else []
    if window:
        # index is 0-based: the last profiled step is step index + 1
        return f"the job runs out of device memory at step ~{window[-1].index + 1 + steps_left}"
    return f"the job runs out of device memory ~{steps_left} steps after the profiled ones"


_LEAK_FIX = (
    "accumulate plain numbers: total += loss.item() (or loss.detach()); do not keep outputs, "
    "losses or hidden states of past steps in lists or attributes"
)
_LEAK_FIX_COPIES = (
    "keep the numbers you need, not a tensor per step (.item(), a running sum, a metric "
    "object), or write the tensors out and drop them: .detach() lets the graph go, not the "
    "tensor's own memory"
)


class LowHeadroom(Check):
    """TP403: the step's peak memory is close to the memory there is: the device's on a GPU
    run; on a CPU run what the step's tensors can use under the process's binding limit
    (host RAM, RLIMIT_AS, RLIMIT_DATA, a cgroup's limit)."""

    # Above this share, allocator fragmentation or one longer batch ends in OOM.
    MAX_PEAK_SHARE = 0.90

    def run(self, profile: Profile) -> list[Finding]:
        of = "of the device"
        if gpu_run(profile):
            peak, capacity = _peak_and_capacity(profile)
        else:
            split = peak_split(profile)
            if split is None or not split.usable:
                return []
            peak, capacity = split.peak, split.usable
            of = "of the memory the step can use under " + memory.capacity_phrase(
                split.capacity_kind, split.capacity or 0
            )
        if peak is None or not capacity or peak / capacity < self.MAX_PEAK_SHARE:
            return []
        return [
            Finding(
                "TP403",
                evidence={
                    "peak_gib": r(peak / 2**30),
                    "capacity_gib": r(capacity / 2**30),
                    "peak_pct": r(100 * peak / capacity, 1),
                },
                severity="medium",
                detail=f"peak memory is {100 * peak / capacity:.0f}% {of}",
                fix="activation checkpointing, a smaller micro-batch with gradient accumulation, "
                "or bf16 autocast; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
                "fragmentation",
            )
        ]


def input_shapes(profile: Profile) -> list[list[list[int]]]:
    """The distinct shapes the model was called with in the profiled steps, in order."""
    seen: list[list[list[int]]] = []
    for step in profile.facts.memory.steps if profile.facts else []:
        if step.model_input_shapes and step.model_input_shapes not in seen:
            seen.append(step.model_input_shapes)
    return seen


def leak_site(profile: Profile) -> tuple[str, float, str] | None:
    """The user's line whose tensors, still alive at the steps' ends, grow the most per step,
    with its growth in bytes per step and what they are (SiteBytes.kind): activations of a
    graph kept across steps (`total += loss`, outputs kept in a list), or copies the line
    made (`kept.append(out.detach())`); None when no line's kept tensors grow."""
    steps = profile.facts.memory.steps if profile.facts else []
    if len(steps) < 2:
        return None
    first, last = steps[0], steps[-1]
    before = {s.location: s.bytes for s in first.kept_at_end}
    growth = {
        s.location: ((s.bytes - before.get(s.location, 0)) / (last.index - first.index), s.kind)
        for s in last.kept_at_end
        if s.location is not None
    }
    growing = [(loc, g, kind) for loc, (g, kind) in growth.items() if g > 0]
    return max(growing, key=lambda x: x[1]) if growing else None


class ActivationsDominate(Check):
    """TP405: activations saved for backward are most of the step's peak and the peak is
    close to the memory there is: checkpointing each block would free most of them."""

    # Activations at least this share of the peak: what checkpointing can act on.
    MIN_ACTIVATION_SHARE = 0.5
    # ...on a job whose peak takes this share of what its tensors can use (the device's
    # memory; on CPU the binding limit, less what the process holds outside the step):
    # below it, the memory is not what limits the batch.
    MIN_PEAK_SHARE = 0.7

    def run(self, profile: Profile) -> list[Finding]:
        split = peak_split(profile)
        usable = split.usable if split is not None else None
        if split is None or not usable or not split.peak:
            return []
        act = split.parts["activations"]
        if act / split.peak < self.MIN_ACTIVATION_SHARE:
            return []
        if split.peak / usable < self.MIN_PEAK_SHARE:
            return []
        steps = profile.facts.memory.steps
        units = next(s.units for s in steps if s.index == split.step)
        saving = memory.checkpoint_saving(units)
        evidence = {
            "peak_mib": r(split.peak / MIB),
            "activations_mib": r(act / MIB),
            "activations_pct_of_peak": r(100 * act / split.peak, 1),
            "peak_pct_of_usable": r(100 * split.peak / usable, 1),
            "usable_mib": r(usable / MIB),
            "capacity": memory.capacity_phrase(split.capacity_kind, split.capacity, split.device),
        }
        notes = ["checkpointing costs about one extra forward pass per step (~30% compute)"]
        if saving is not None:
            evidence["checkpointing_frees_mib"] = r(saving / MIB)
            evidence["blocks"] = sum(1 for u in units if u.activation_bytes)
        else:
            notes.append("the model has no repeated blocks to checkpoint: use micro-batches")
        fix = (
            "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) around each "
            "block in forward (frees "
            + (f"~{saving / MIB:.0f} MiB" if saving is not None else "most activations")
            + "), or half the micro-batch with 2 accumulation steps (frees "
            f"~{act / 2 / MIB:.0f} MiB)"
        )
        return [
            Finding(
                "TP405",
                evidence=evidence,
                severity="medium",
                detail=f"activations saved for backward are {100 * act / split.peak:.0f}% of "
                f"a peak at {100 * split.peak / usable:.0f}% of the {memory.size(usable)} the "
                "step's tensors can use under "
                + memory.capacity_phrase(split.capacity_kind, split.capacity, split.device),
                fix=fix,
                notes=notes,
            )
        ]


def peak_split(profile: Profile) -> memory.PeakSplit | None:
    """The split of the profiled step with the highest peak (doctor/memory.py)."""
    if profile.facts is None or not profile.facts.memory.steps:
        return None
    peaks: dict[int, tuple[int, str]] = {}
    window = profile.facts.window
    for record, metrics in zip(window, profile.per_step, strict=False):
        cuda = [m.peak for k, m in metrics.memory.items() if k.startswith("cuda") and m.peak]
        if record.cuda_peak_bytes:
            peaks[record.index] = (record.cuda_peak_bytes, memory.HOW["peak_cuda"])
        elif cuda:
            peaks[record.index] = (int(max(cuda)), memory.HOW["peak_cpu"])
        elif "cpu" in metrics.memory and metrics.memory["cpu"].peak:
            peaks[record.index] = (int(metrics.memory["cpu"].peak), memory.HOW["peak_cpu"])
    return memory.peak_split(profile.facts.memory.steps, peaks)


def out_of_memory(profile: Profile) -> list[Finding]:
    """TP404: the script died of an out-of-memory error. Given whether or not a step reached
    the window: it is the report's first finding."""
    oom = profile.facts.memory.oom if profile.facts else None
    if oom is None:
        return []
    split = oom.split
    ways = memory.ways_out(oom)
    missing = memory.shortfall(oom)
    evidence = {
        "step": oom.step,
        "phase": oom.step_phase,
        "parameters_mib": r(split.parameters / MIB),
        "gradients_mib": r(split.gradients / MIB),
        "optimizer_state_mib": r(split.optimizer_state / MIB),
        "activations_mib": r(split.activations / MIB),
    }
    if oom.input_bytes:
        evidence["batch_mib"] = r(oom.input_bytes / MIB)
    if split.allocated is not None:
        evidence["allocated_mib"] = r(split.allocated / MIB)
        evidence["reserved_mib"] = r((split.reserved or 0) / MIB)
    if oom.requested_bytes is not None:
        evidence["requested_mib"] = r(oom.requested_bytes / MIB)
    if oom.free_bytes is not None:
        evidence["free_mib"] = r(oom.free_bytes / MIB)
    under = ""
    if split.capacity:
        evidence["capacity"] = memory.capacity_phrase(
            split.capacity_kind, split.capacity, split.device
        )
        under = f", under {evidence['capacity']}"
        if split.capacity_used is not None:
            evidence["capacity_used_mib"] = r(split.capacity_used / MIB)
            under += f" ({memory.size(split.capacity_used)} in use)"
    notes = []
    for i, way in enumerate(ways, 1):
        enough = ""
        if missing is not None and way.frees_bytes >= missing:
            enough = " (enough for the failed request)"
        notes.append(f"way out {i}: {way.name}: frees ~{memory.size(way.frees_bytes)}{enough}; "
                     f"{way.how}; cost: {way.cost}")  # fmt: skip
    sites = ", ".join(f"{s.location} {memory.size(s.bytes)}" for s in oom.sites[:3] if s.bytes)
    if sites:
        notes.append(f"activations alive at the failure, by line: {sites}")
    unmeasured = profile.facts.memory.activations_unmeasured
    if unmeasured:
        notes.append(f"activations at the failure not measured: {unmeasured}")
    phase = {"warmup": "warm-up", "window": "profiled window"}.get(oom.capture_phase)
    where = f", {phase} step" if phase else ""
    return [
        Finding(
            "TP404",
            evidence=evidence,
            severity="high",
            location=oom.location,
            ends_job=f"the job ran out of memory in step {oom.step}",
            detail=f"out of memory in step {oom.step}{where}, during the {oom.step_phase}"
            f"{under}: {oom.message}",
            fix=ways[0].name
            if ways
            else "a smaller batch (with gradient accumulation to keep the effective batch)",
            notes=notes,
        )
    ]


def after_out_of_memory(profile: Profile, findings: list[Finding]) -> list[Finding]:
    """A run that ran out of memory: TP404 first, and no finding that asks for more memory."""
    oom = out_of_memory(profile)
    if not oom:
        return findings
    return oom + [f for f in findings if f.code not in NOT_AFTER_OOM]


class VariableInputShapes(Check):
    """TP406: the model is called with inputs of other shapes step after step: the caching
    allocator keeps blocks of every size (fragmentation, re-allocation), cudnn.benchmark
    re-tunes each new shape, torch.compile recompiles."""

    # Shapes that change in at least this share of step-to-step transitions: one odd last
    # batch of an epoch (drop_last=False) is not it.
    MIN_CHANGE_SHARE = 0.5

    def run(self, profile: Profile) -> list[Finding]:
        steps = [s.model_input_shapes for s in profile.facts.memory.steps] if profile.facts else []
        steps = [s for s in steps if s]
        if len(steps) < 3:
            return []
        changes = sum(1 for a, b in itertools.pairwise(steps) if a != b)
        if changes / (len(steps) - 1) < self.MIN_CHANGE_SHARE:
            return []
        distinct = input_shapes(profile)
        costs = []
        calls = profile.facts.calls
        proc = profile.process
        if calls.compiled:
            costs.append("torch.compile recompiles for new shapes (or falls back to dynamic)")
        if proc is not None and proc.cudnn_benchmark and profile.has_convs:
            costs.append("cudnn.benchmark re-tunes every new convolution shape")
        if gpu_run(profile):
            costs.append("the caching allocator keeps blocks of every size (fragmentation)")
        return [
            Finding(
                "TP406",
                evidence={
                    "distinct_shapes": len(distinct),
                    "steps": len(steps),
                    "shape_changes": changes,
                    "shapes": "; ".join(str(x) for x in distinct[:4]),
                },
                severity="medium" if costs else "low",
                detail=f"the model got {len(distinct)} different input shapes in "
                f"{len(steps)} steps",
                fix="pad to a few fixed lengths (buckets), run one max-size step first so that "
                "the allocator reserves the largest blocks once, or torch.compile(dynamic=True)",
                notes=costs or ["on this CPU run the cost is re-allocation only"],
            )
        ]


class EvalWithAutograd(Check):
    """TP301 at run time: the model runs forward with autograd on in steps where no backward
    follows (evaluation, inference): autograd saves activations for nothing."""

    # Most of the profiled steps must be such steps: one validation batch in a training
    # window is not an evaluation loop.
    MIN_STEP_SHARE = 0.5

    def run(self, profile: Profile) -> list[Finding]:
        steps = profile.facts.memory.steps if profile.facts else []
        wasted = [s for s in steps if s.grad_forwards and not s.backward_ran]
        if not steps or len(wasted) / len(steps) < self.MIN_STEP_SHARE:
            return []
        held = max(s.split.activations for s in wasted)
        return [
            Finding(
                "TP301",
                evidence={
                    "steps_without_backward": len(wasted),
                    "steps": len(steps),
                    "forwards_with_grad_per_step": r(
                        sum(s.grad_forwards for s in wasted) / len(wasted), 1
                    ),
                    "activations_held_mib": r(held / MIB),
                },
                severity="medium",
                location=profile.facts.model.location if profile.facts.model else None,
                detail=f"the model ran forward with autograd on in {len(wasted)} of "
                f"{len(steps)} steps with no backward; autograd held "
                f"{memory.size(held)} of activations for nothing",
                fix="wrap evaluation in `with torch.inference_mode():` (or torch.no_grad()) and "
                "call model.eval()",
                notes=["the time saved (autograd bookkeeping) is not estimated; the memory is"],
            )
        ]


class EmptyCacheInLoop(Check):
    """TP402 at run time: torch.cuda.empty_cache() called inside the step on a GPU run."""

    def run(self, profile: Profile) -> list[Finding]:
        steps = profile.facts.memory.steps if profile.facts else []
        calls = [s for s in steps if s.empty_cache_calls]
        if not gpu_run(profile) or not steps or not calls:
            return []
        per_step = sum(s.empty_cache_ms for s in steps) / len(steps)
        count = sum(s.empty_cache_calls for s in steps) / len(steps)
        return [
            Finding(
                "TP402",
                evidence={"calls_per_step": r(count, 1), "host_ms_per_step": r(per_step)},
                saving_ms=per_step,
                step_ms=profile.step_ms,
                severity=None if self.worth_reporting(profile, per_step) else "low",
                detail=f"torch.cuda.empty_cache() {count:.1f} times per step, {per_step:.2f} ms "
                "in the call itself",
                fix="remove it from the loop: the caching allocator reuses freed blocks; "
                "emptying the cache makes the next steps call cudaMalloc (and synchronise) again",
                notes=["the saving counts the call only; the re-allocations after it cost more"],
            )
        ]


class Fragmentation(Check):
    """TP407: on CUDA the caching allocator holds far more than is allocated at the peak,
    or it had to free its cache and retry an allocation inside the profiled steps."""

    # Reserved this many times the allocated bytes at the peak...
    MIN_RESERVED_RATIO = 1.5
    # ...and at least this much unallocated: below it, the cache is not worth a finding.
    MIN_CACHED_BYTES = 2**30

    def run(self, profile: Profile) -> list[Finding]:
        steps = profile.facts.memory.steps if profile.facts else []
        peaks = [s for s in steps if s.split.reserved and s.split.allocated]
        retries = sum(s.alloc_retries for s in steps)
        if not peaks and not retries:
            return []
        worst = max(peaks, key=lambda s: s.split.reserved - s.split.allocated, default=None)
        cached = worst.split.reserved - worst.split.allocated if worst else 0
        ratio = worst.split.reserved / worst.split.allocated if worst else 0.0
        fragmented = cached >= self.MIN_CACHED_BYTES and ratio >= self.MIN_RESERVED_RATIO
        if not fragmented and not retries:
            return []
        evidence = {"alloc_retries_in_window": retries}
        if worst:
            evidence |= {
                "reserved_mib": r(worst.split.reserved / MIB),
                "allocated_mib": r(worst.split.allocated / MIB),
            }
        detail = f"{memory.size(cached)} reserved but not allocated at the peak ({ratio:.1f}x)"
        if retries:
            detail = f"the allocator freed its cache and retried {retries} times in the window"
        return [
            Finding(
                "TP407",
                evidence=evidence,
                severity="medium" if retries else "low",
                detail=detail,
                fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before the first "
                "CUDA allocation); fixed shapes (TP406) keep blocks reusable",
                notes=["a retry synchronises the device and calls cudaFree/cudaMalloc"],
            )
        ]


CHECKS = [
    MemoryGrowth(),
    LowHeadroom(),
    ActivationsDominate(),
    VariableInputShapes(),
    EvalWithAutograd(),
    EmptyCacheInLoop(),
    Fragmentation(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
