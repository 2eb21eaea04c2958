"""What a tune knob is: one practice that can be switched on an unmodified script at run time.

A knob lives in its own module under ``knobs/`` and declares:
- which finding codes it answers and which practices (``PRACTICES.md``) it implements;
- when it applies (``plan``: from what the doctor's capture saw and the machine's facts),
  and the values worth trying, or why it does not apply;
- whether it can change what the program computes (``changes_numerics``);
- how it is applied inside the child, before the user's script runs (``apply``);
- the edit that would make it permanent in the user's source (``source_edits``), where one
  can be written.

Knob modules import torch only inside ``apply``: the parent (tune's search, the doctor's
findings, the catalog test) reads their declarations without paying for torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from torchpace.env.cpu import CpuFacts
    from torchpace.facts.run import RunFacts
    from torchpace.knobs.notes import Notes
    from torchpace.knobs.runtime import KnobRuntime
    from torchpace.report.memory_model import BatchHeadroom


@dataclass(frozen=True)
class TuneContext:
    """What the parent knows when it plans the trials: the doctor's capture and the machine."""

    facts: RunFacts  # the doctor's capture of the unmodified script
    cpu: CpuFacts
    device: str  # "cuda" or "cpu": where the model's parameters live
    cuda_capability: tuple[int, int] | None  # (8, 0) for an A100, (9, 0) for an H100
    cuda_bf16: bool  # the GPU runs bf16 on tensor cores
    torch_version: tuple[int, int]
    try_all: bool = False  # --try-all: also knobs this machine is known to run slowly
    allow_batch_size: bool = False  # --allow-batch-size: knobs that change training
    finding_codes: frozenset[str] = frozenset()  # codes the doctor reported on this script
    # the code of the doctor's top-ranked finding: tune screens its knob first (tune/suspect.py)
    first_finding: str | None = None
    # the doctor's estimate of the largest batch that fits (the report's memory.batch_headroom),
    # which the batch-size finder checks; None when it made none
    batch_headroom: BatchHeadroom | None = None
    nproc_per_node: int = 1  # tune --nproc-per-node: every trial is the whole job on N ranks

    @property
    def accelerator(self) -> bool:
        return self.device == "cuda"


@dataclass(frozen=True)
class Plan:
    """The values of a knob worth a trial, or why the knob does not apply (``values`` empty)."""

    values: tuple = ()
    reason: str = ""  # why these values, or why none

    @property
    def applicable(self) -> bool:
        return bool(self.values)


def not_applicable(reason: str) -> Plan:
    return Plan((), reason)


@dataclass(frozen=True)
class SourceEdit:
    """A change to the user's source that makes a knob permanent.

    ``kind`` says which libcst transformer writes it (see tune/diff.py):
    "loader-kwargs": set keyword arguments of the DataLoader(...) call at ``location``;
    "statement-after-imports": insert ``code`` after the module's imports;
    "optimizer-kwargs": set keyword arguments of the optimizer constructor at ``location``;
    "wrap-assignment": rebind the target of the assignment at ``location`` as ``code``
    formats it (``{}`` is the target's name), e.g. ``{} = torch.compile({})``.
    """

    kind: str
    location: str | None = None  # "train.py:42"
    kwargs: dict = field(default_factory=dict)
    code: str = ""
    note: str = ""  # said beside the diff where the edit is not exactly what the knob does


class Knob:
    name: ClassVar[str]
    title: ClassVar[str]  # one line, what it does
    answers: ClassVar[tuple[str, ...]] = ()  # finding codes this knob tests
    practices: ClassVar[tuple[str, ...]] = ()
    # the row of the step's breakdown it acts on (tune/rows.py): "data" (the wait for the
    # loader's batch) or "compute" (the rest of the step: copies, forward, backward, the
    # optimizer); tune screens the knobs of the biggest row first
    row: ClassVar[str] = "compute"
    changes_numerics: ClassVar[bool] = False
    # "--allow-batch-size" for knobs that change training; None: tried by default
    opt_in: ClassVar[str | None] = None
    # knobs that must already be in the configuration for this one to mean anything
    # (persistent workers need workers): tune tries it on top of the chosen values of these
    depends_on: ClassVar[tuple[str, ...]] = ()
    # What a value in torchpace.toml may be, checked when the file is read (so that a
    # hand-edited `num-workers = "four"` is an error naming its line, not a crash in the
    # child): a type or tuple of types, the allowed values, and the least number allowed.
    value_type: ClassVar[type | tuple[type, ...]] = bool
    choices: ClassVar[tuple | None] = None
    minimum: ClassVar[int | None] = None
    # True: the value may also be a table of values per location ("train.py:42" -> 0), each
    # for the object the script builds at that line (a DataLoader): docs/knobs.md
    per_location: ClassVar[bool] = False
    # True: every value of the knob can be switched on and off between two steps of one
    # process (``switch``); a knob whose values differ (amp: bf16 yes, fp16 no) says so per
    # value in ``switches``, which is what tune asks
    switchable: ClassVar[bool] = False
    # False: its switch reaches this process only, not the DataLoader's worker processes
    # (host-malloc: glibc's settings are each process's own), so a trial whose loader has
    # workers is not switched (tune/compare.switch_for); the child says so too
    switches_beside_workers: ClassVar[bool] = True
    # True: several of its values can share one switched trial, each an arm of its own
    # (``switch_arms``: loader workers, threads), so that their screens cost one process
    multi_arm: ClassVar[bool] = False
    # True: the knob costs time once, in the process's first steps (torch.compile's
    # compilation), and that time may exceed what the whole job could ever save: where the
    # job's length is known, tune stops such a trial once it has taken longer than that
    # (tune/ledger.py, `repay_cap_s`) instead of waiting out a 35 s compilation for a job
    # whose steps take 3 s in all
    pays_once: ClassVar[bool] = False
    # Why the knob does nothing on a machine without CUDA (its setting acts on the GPU
    # alone); None: it acts on the CPU too. Tune never plans it there (``plan``), and
    # `torchpace run` says so when a configuration sets it there (knobs/config.py).
    cuda_only: ClassVar[str | None] = None

    def maximum(self) -> tuple[int, str] | None:
        """The most a value may be, and why (a hand-edited ``num-workers = 100000`` would
        start processes until the machine gave out); None: no bound."""
        return None

    def plan(self, ctx: TuneContext) -> Plan:
        raise NotImplementedError

    def on_top_of(self, config: dict) -> str | None:
        """For a knob that depends on others: why it can do nothing on top of `config` (the
        values kept for its dependencies), or None. Persistent workers on num_workers=0
        keep no process alive: makemore's tune spent nine trials measuring that."""
        return None

    def apply(self, value, runtime: KnobRuntime) -> str | Notes:
        """Inside the child, before the user's script runs. Imports torch itself.

        Returns what was done, or a ``Notes`` (``_common.py``) that its patches add to as the
        script builds what they act on (the DataLoader at train.py:42).
        """
        raise NotImplementedError

    def check(self, value, runtime: KnobRuntime) -> str | None:
        """Inside the trial, at its first and last timed steps: None when the setting is in
        force (or there is nothing to check), else why it is not, naming the script's line
        where it can ("the script sets torch.set_num_threads(32) at train.py:3"). A knob
        that did not hold is reported "could not apply", never measured and rejected."""
        return None

    def switches(self, value) -> bool:
        """Whether ``value`` can be switched on and off between two steps of one process
        (``switch``), so that tune measures it against the script's own setting in the same
        process, block after block (docs/tune.md, "Switched trials"): the process-to-process
        spread of a shared machine (gpt.py's processes run at ~20.5 or ~25 ms/step) cancels.
        A switch that turns out impossible in the process (its ``switch`` returns why) makes
        that trial an ordinary one."""
        return self.switchable

    def switch(self, value, runtime: KnobRuntime) -> Callable[[bool], None] | str:
        """Inside a trial that applied ``value``, at its first timed step: a function that
        puts the knob's setting in force (True) or the script's own back (False), between
        two steps; or why it cannot be switched in this process (then the trial is timed
        with the knob on throughout, as any other). Only for values it ``switches``.
        A ``Switch`` (below) also says how many untimed steps each block needs first."""
        return f"{self.name} is not switched between steps"

    def switches_arms(self, values: tuple) -> bool:
        """Whether all of ``values`` can be switched among, and with the script's own
        setting, between two steps of one process (``switch_arms``): each screened in the
        same process, a round of blocks at a time, instead of a process for each. One value:
        ``switches``. A knob that can hold several at once says so (``multi_arm``)."""
        if len(values) == 1:
            return self.switches(values[0])
        return self.multi_arm and all(self.switches(v) for v in values)

    def settle_estimate(self, values: tuple, ctx: TuneContext) -> int:
        """The untimed steps each block of a switched trial of ``values`` will start with
        (its ``Switch``'s settle_steps), as the parent can foresee them from the doctor's
        facts: whether a round of every value's blocks fits a script that ends by itself."""
        return 1

    def switch_arms(self, values: tuple, runtime: KnobRuntime) -> Callable[[int], None] | str:
        """Inside a trial that applied ``values[0]``, at its first timed step: a function
        that puts arm ``i`` in force between two steps, 0 the script's own setting and i
        ``values[i - 1]``; or why it cannot be switched in this process. One value: the
        knob's ``switch`` (arm 1 on, arm 0 off); a ``multi_arm`` knob overrides this."""
        if len(values) != 1:
            return f"{self.name} switches one value at a time"
        switch = self.switch(values[0], runtime)
        if isinstance(switch, str):
            return switch
        return Switch(lambda arm: switch(arm == 1), getattr(switch, "settle_steps", 1))

    def describe(self, value) -> str:
        """How the value reads in a table: ``num_workers=4``."""
        return f"{self.name}={value}"

    def source_edits(self, value) -> list[SourceEdit]:
        return []


class Switch:
    """A switch (``Knob.switch``) whose blocks need more than the one untimed step every
    block starts with: batches already in flight when it flips (a DataLoader's workers
    prefetch ``num_workers * prefetch_factor`` of them) were made under the other arm, and
    a block's timed steps must not read them. ``settle_steps`` untimed steps start each
    block (capture/switching.py takes them from the block's steps)."""

    def __init__(self, set_on: Callable[[Any], None], settle_steps: int = 1):
        self.set_on = set_on  # on/off (Knob.switch) or an arm (Knob.switch_arms)
        self.settle_steps = max(1, settle_steps)

    def __call__(self, on) -> None:
        self.set_on(on)
