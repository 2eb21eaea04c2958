"""threads: the CPU's intra-op thread count (P24).

PyTorch's default is one thread per logical CPU of the machine, which oversubscribes a
process limited to fewer (a container's cpuset, taskset) and, with SMT, may lose to one
thread per physical core. The candidates are those two counts, where they differ from what
the script ran with.
"""

from __future__ import annotations

from torchpace.knobs._common import PER_CORE_BOUND, cores_here, usable_cores
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable


class Threads(Knob):
    name = "threads"
    value_type = int
    minimum = 1
    title = "torch.set_num_threads: compute threads on the CPU"
    answers = ("TP601",)
    practices = ("P24",)

    def maximum(self) -> tuple[int, str]:
        cores = cores_here()
        return PER_CORE_BOUND * cores, f"{PER_CORE_BOUND} threads per usable core ({cores})"

    def plan(self, ctx: TuneContext) -> Plan:
        usable = usable_cores(ctx)
        if not usable:
            return not_applicable("the cores this process may use could not be read")
        physical = ctx.cpu.physical_cores
        # physical_cores counts the whole machine; a process limited to fewer CPUs gets no
        # more physical cores than it has CPUs
        counts = {usable: "usable cores"}
        if physical and physical < usable:
            counts.setdefault(physical, "physical cores")
        current = ctx.facts.process.intra_op_threads if ctx.facts.process else None
        values = tuple(n for n in sorted(counts, reverse=True) if n != current)
        if not values:
            return not_applicable(f"the script already runs {current} threads, one per usable core")
        said = ", ".join(f"{n} ({counts[n]})" for n in values)
        return Plan(values, f"the script runs {current} threads; trying {said}")

    def apply(self, value, runtime) -> str:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(int(value))
        # a set_num_threads in the script itself runs later and wins
        return f"torch.set_num_threads({int(value)}) (was {before})"

    def describe(self, value) -> str:
        return f"threads={value}"

    def source_edits(self, value) -> list[SourceEdit]:
        return [SourceEdit("statement-after-imports", code=f"torch.set_num_threads({int(value)})")]


KNOB = Threads()
