"""threads: the CPU's intra-op thread count (P24).

PyTorch's default is one thread per logical CPU of the machine, which oversubscribes a
process limited to fewer (a container's cpuset, taskset) and, with SMT, may lose to one
thread per physical core. The candidates are those two counts, where they differ from what
the script ran with.
"""

from __future__ import annotations

import functools

from torchpace.knobs._common import PER_CORE_BOUND, cores_here, usable_cores
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class Threads(Knob):
    name = "threads"
    value_type = int
    minimum = 1
    title = "torch.set_num_threads: compute threads on the CPU"
    answers = ("TP601",)
    practices = ("P24",)
    switchable = True
    multi_arm = True

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

    def apply(self, value, runtime) -> Notes:
        import torch

        value = int(value)
        before = torch.get_num_threads()
        original = getattr(torch.set_num_threads, "_torchpace_original", torch.set_num_threads)
        original(value)
        notes = Notes(f"torch.set_num_threads({value}) (was {before})")
        # the count the script asked for last (its default before any call), and the count
        # the knob holds (None: a switched trial's reference blocks run the script's)
        self._script_asked = before
        self._holding: int | None = value
        knob = self

        # The script's own set_num_threads runs later and would undo the knob (a loop that
        # sets 32 threads on 2 cores): the knob holds its value, and the script's line is
        # recorded, so that the source edit changes that line too.
        @functools.wraps(original)
        def set_num_threads(n, *args, **kwargs):
            knob._script_asked = n
            held = knob._holding
            if held is None:
                return original(n, *args, **kwargs)
            if n != held:
                notes.overridden(
                    f"{runtime.user_location() or '?'}: torch.set_num_threads({n}) kept at {held}"
                )
            return original(held, *args, **kwargs)

        set_num_threads._torchpace_original = original
        torch.set_num_threads = set_num_threads
        return notes

    def check(self, value, runtime) -> str | None:
        import torch

        now = torch.get_num_threads()
        if now == int(value):
            return None
        return (f"torch.get_num_threads() is {now} at the timed steps, not {value}: something "
                "other than torch.set_num_threads sets it (a library, OMP_NUM_THREADS read "
                "late)")  # fmt: skip

    def switch(self, value, runtime):
        """The knob's count (True), or the one the script asked for last (False):
        ``switch_arms`` with the one value."""
        arms = self.switch_arms((value,), runtime)
        return arms if isinstance(arms, str) else lambda on: arms(int(on))

    def switch_arms(self, values, runtime):
        """Arm i's count (``values[i - 1]``), or the one the script asked for last (arm 0).
        The first steps after a change pay for the pool's resizing: a switched trial leaves
        them untimed (capture/switching.py)."""
        import torch

        if not hasattr(self, "_script_asked"):
            return "threads was not applied in this process"
        original = getattr(torch.set_num_threads, "_torchpace_original", torch.set_num_threads)

        def set_count(arm: int) -> None:
            self._holding = int(values[arm - 1]) if arm else None
            original(self._script_asked if self._holding is None else self._holding)

        return set_count

    def describe(self, value) -> str:
        return f"threads={value}"

    def source_edits(self, value) -> list[SourceEdit]:
        # every torch.set_num_threads(...) call in the script gets the value; a script that
        # has none gets one after its imports
        return [
            SourceEdit(
                "call-argument",
                code=f"torch.set_num_threads({int(value)})",
                kwargs={"callee": "set_num_threads", "value": int(value)},
            )
        ]


KNOB = Threads()
