"""What the capture child measured about memory, as plain data (part of ``run_facts.json``).

Written by ``capture/memory.py`` inside the user's process, read by the doctor. Sizes are
bytes. Each number says how it was obtained in the field's comment; docs/doctor.md repeats
it for users. Nothing here imports torch: the doctor reads it without starting torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SiteBytes:
    """Tensors grouped by the user's source line that made them: activations saved for
    backward (the line that computed them), the model's outputs (the line that called the
    model), or copies made on the user's line (``.detach()``, ``.clone()``, ``.to()``,
    ``.cpu()``: what a list of detached outputs keeps)."""

    location: str | None  # "train.py:42"; None when no frame of the user's code was running
    bytes: int
    tensors: int
    kind: str = "activations"  # "activations", "outputs" or "copies": the largest part's


@dataclass
class UnitBytes:
    """Activations saved inside one checkpointable unit of the model (a block: a child of the
    model, or of a Sequential/ModuleList in it), and the bytes of the inputs it was called
    with: what checkpointing that unit would keep instead."""

    name: str  # the module's qualified name in the model, e.g. "layers.3"
    activation_bytes: int
    input_bytes: int


@dataclass
class MemorySplit:
    """Bytes by what holds them, at one moment (the start of backward, or the failure).

    ``parameters``, ``gradients`` and ``optimizer_state`` are summed over the distinct
    storages of the model's parameters, their ``.grad`` and the optimizers' ``state``
    tensors; ``activations`` over the distinct storages autograd holds for backward (seen
    by a saved-tensors hook), leaving out storages already counted as parameters.
    """

    device: str  # "cpu", "cuda" (the device of the model's parameters)
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    # The allocator's bytes in use at that moment: torch.cuda.memory_allocated() on CUDA;
    # None on a CPU run, whose allocator keeps no total outside the profiler.
    allocated: int | None = None
    reserved: int | None = None  # torch.cuda.memory_reserved(): allocated + cached
    # The memory there is: on CUDA the device's (times the per-process memory fraction when
    # one is set); on a CPU run the limit with the least room left among the host's RAM,
    # RLIMIT_AS, RLIMIT_DATA and the cgroup's memory limit (capture/memory_limits.py).
    capacity: int | None = None
    capacity_kind: str | None = None  # "device", "memory fraction", "host RAM", "RLIMIT_AS", ...
    # What that limit counted at that moment, tensors included: VmSize for RLIMIT_AS, VmData
    # for RLIMIT_DATA, the cgroup's working set, the host's memory in use; None on CUDA.
    capacity_used: int | None = None


@dataclass
class StepMemory:
    """One profiled step, as the saved-tensors hook and the model's tensors saw it."""

    index: int
    split: MemorySplit  # at the moment the step's saved activations were at their most
    sites: list[SiteBytes]  # the activations of that moment by source line, largest first
    units: list[UnitBytes]  # ... and by checkpointable unit
    # activations still alive at the step's end that were saved in this step or earlier,
    # by source line: in a healthy loop backward frees them all
    kept_at_end: list[SiteBytes] = field(default_factory=list)
    input_bytes: int = 0  # the step's batch (the tensors of the loader's batch)
    # the shapes of the tensors the model's first call of the step was given
    model_input_shapes: list[list[int]] = field(default_factory=list)
    grad_forwards: int = 0  # the model's calls with autograd on (and trainable parameters)
    backward_ran: bool = False  # autograd unpacked a saved tensor: a backward ran
    empty_cache_calls: int = 0  # torch.cuda.empty_cache() calls in the step
    empty_cache_ms: float = 0.0  # ... and the host time spent in them
    # torch.cuda.memory_stats()["num_alloc_retries"] during the step: the caching allocator
    # freed its cache and retried cudaMalloc (CUDA; 0 elsewhere)
    alloc_retries: int = 0
    # the split at the step's optimizer step (gradients complete, activations freed): the
    # peak of a model whose gradients outweigh its activations; None when none stepped
    optimizer_split: MemorySplit | None = None


@dataclass
class OutOfMemory:
    """The state of memory when the script died of an out-of-memory error."""

    step: int  # 0-based index of the step that was running
    capture_phase: str  # "warmup", "window", ...: where the capture was
    step_phase: str  # "forward", "backward", "optimizer step", "data loading", "loop code"
    location: str | None  # the user's line that was running
    message: str  # the error's first line, as torch wrote it
    error_type: str  # "torch.OutOfMemoryError", "MemoryError", "RuntimeError"
    requested_bytes: int | None  # the allocation that failed, read from the message
    free_bytes: int | None  # what the device had free, read from the message (CUDA)
    split: MemorySplit
    sites: list[SiteBytes]
    units: list[UnitBytes]
    input_bytes: int = 0  # the batch being processed
    autocast: bool = False  # the failure happened under torch.autocast
    param_dtype: str | None = None  # "float32", ...
    activation_dtype_bytes: dict[str, int] = field(default_factory=dict)  # dtype -> bytes


@dataclass
class MemoryFacts:
    steps: list[StepMemory] = field(default_factory=list)
    oom: OutOfMemory | None = None
    # why the saved-tensors hook was not used (torch.compile, an error); None when it was
    activations_unmeasured: str | None = None

    @classmethod
    def from_dict(cls, d: dict) -> MemoryFacts:
        def split(x: dict) -> MemorySplit:
            return MemorySplit(**x)

        def sites(xs: list) -> list[SiteBytes]:
            return [SiteBytes(**x) for x in xs]

        def units(xs: list) -> list[UnitBytes]:
            return [UnitBytes(**x) for x in xs]

        steps = [
            StepMemory(
                **{
                    **s,
                    "split": split(s["split"]),
                    "optimizer_split": split(s["optimizer_split"])
                    if s.get("optimizer_split")
                    else None,
                    "sites": sites(s["sites"]),
                    "units": units(s["units"]),
                    "kept_at_end": sites(s.get("kept_at_end", [])),
                }
            )
            for s in d.get("steps", [])
        ]
        oom = d.get("oom")
        if oom is not None:
            oom = OutOfMemory(
                **{
                    **oom,
                    "split": split(oom["split"]),
                    "sites": sites(oom["sites"]),
                    "units": units(oom["units"]),
                }
            )
        return cls(steps, oom, d.get("activations_unmeasured"))
