"""nproc-per-node: how many processes a data-parallel CPU job runs on this machine (P24, P27).

On a CPU, N ranks share the machine's cores (the launcher gives each cores // N threads):
fewer ranks with more threads each pay less in all-reduces and per-process overhead; more
ranks with fewer threads each may keep the cores busier where one process's threads do not
scale. Which wins depends on the model and the machine, so tune measures it.

It changes training as a bigger batch does: each rank keeps the script's batch, so the
global batch is N times it and a DistributedSampler's epoch has fewer optimizer steps with
more ranks. Tried only with --allow-batch-size, and compared on the whole job's samples per
second (every rank's samples per step, capture/job.combine), never on time per step.

It is a launch setting, not something a process can apply to itself: the trial (and
`torchpace launch --config`) starts that many ranks; inside each rank the knob only says
how many local ranks it sees and checks that it is the value. No source edit can express it.
"""

from __future__ import annotations

import os

from torchpace.knobs._common import NO_LOADER, PER_CORE_BOUND, cores_here, usable_cores
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable

NAME = "nproc-per-node"
GLOBAL_BATCH = (
    "changes training: each rank keeps the script's batch, so the global batch (and a "
    "DistributedSampler's steps per epoch) changes with the process count"
)
LAUNCH_SETTING = (
    "a launch setting, not a source edit: start the job with `torchpace launch "
    "--nproc-per-node {n} --config torchpace.toml ...` (or torchrun --nproc-per-node {n})"
)
ON_A_GPU = (
    "on a GPU the rule is one process per GPU: the process count is the GPUs', not a "
    "setting to tune"
)
ONE_PROCESS = (
    "the job runs one process: tune --nproc-per-node N (N > 1) tunes a data-parallel job's "
    "process count"
)


def from_config(knobs: dict) -> int | None:
    """The process count a configuration's knobs ask for; None when they do not say."""
    value = knobs.get(NAME)
    return int(value) if value is not None else None


def candidate_counts(now: int, cores: int) -> tuple[int, ...]:
    """Other process counts worth a trial for a job of ``now`` ranks on ``cores`` physical
    cores: one process, half of them, and where the cores allow it twice as many (else one
    per core); never more processes than cores, never ``now`` itself."""
    counts = {1, now // 2}
    if now * 2 <= cores:
        counts.add(now * 2)
    elif now < cores:
        counts.add(cores)
    return tuple(sorted(n for n in counts if 1 <= n <= cores and n != now))


def local_world_size() -> int:
    """The local ranks this process's launcher started (torchrun's LOCAL_WORLD_SIZE); a
    process started without one is a job of one."""
    try:
        return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return 1


class NprocPerNode(Knob):
    name = NAME
    title = "Processes per node of a CPU data-parallel job (changes the global batch)"
    practices = ("P24", "P27")
    changes_numerics = True
    opt_in = "--allow-batch-size"
    value_type = int
    minimum = 1

    def maximum(self) -> tuple[int, str]:
        cores = cores_here()
        return PER_CORE_BOUND * cores, f"{PER_CORE_BOUND} processes per usable core ({cores})"

    def plan(self, ctx: TuneContext) -> Plan:
        if ctx.nproc_per_node <= 1:
            return not_applicable(ONE_PROCESS)
        if ctx.accelerator:
            return not_applicable(ON_A_GPU)
        if not ctx.allow_batch_size:
            return not_applicable(f"{GLOBAL_BATCH}; tried only with --allow-batch-size")
        if not ctx.facts.loaders:  # samples per step are counted from the loaders' batches
            return not_applicable(
                f"{NO_LOADER}: the job's samples per second, which compare process counts, "
                "cannot be counted"
            )
        # physical_cores counts the whole machine: a process limited to fewer CPUs has no
        # more physical cores than it has CPUs
        known = [c for c in (usable_cores(ctx), ctx.cpu.physical_cores) if c]
        if not known:
            return not_applicable("the cores this process may use could not be read")
        cores = min(known)
        now = ctx.nproc_per_node
        values = candidate_counts(now, cores)
        if not values:
            return not_applicable(f"{now} processes on {cores} physical cores: no other count")
        return Plan(
            values,
            f"{now} processes on {cores} physical cores; trying {', '.join(map(str, values))} "
            f"(the launcher gives each cores // processes threads); {GLOBAL_BATCH}",
        )

    def apply(self, value, runtime) -> str:
        # Nothing to do inside a rank: the launcher started the processes. Said so that the
        # trial's record shows the count this rank really ran in.
        ranks = local_world_size()
        return f"{ranks} local processes per node (asked: {int(value)}; set by the launcher)"

    def check(self, value, runtime) -> str | None:
        ranks = local_world_size()
        if ranks == int(value):
            return None
        return (f"this job runs {ranks} local processes, not {value}: the process count is "
                f"set by the launcher (torchpace launch --nproc-per-node {value})")  # fmt: skip

    def describe(self, value) -> str:
        return f"processes per node={value} (changes the global batch)"

    def source_edits(self, value) -> list[SourceEdit]:
        return [SourceEdit("environment", note=LAUNCH_SETTING.format(n=int(value)))]


KNOB = NprocPerNode()
