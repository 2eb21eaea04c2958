"""A switched trial's timed steps: one knob on and off in blocks, within one process.

tune compares a knob with the script's own setting. Between two processes of the same
configuration a shared machine adds its own difference: gpt.py's processes on a 2-core VM
ran at ~20.5 or ~25 ms/step, drawn per process, which buried fused AdamW's 4-6% under a
20% pair spread (16 process pairs could not decide it). A knob that can be switched between
two steps (``Knob.switches``) is measured inside one process instead: its timed steps are
BLOCK_PAIRS pairs of blocks, the knob on in one block of each pair and the script's own
setting in the other, in ABBA order from a side drawn at random for each trial (the parent
draws the seed: every process another order, so that a drift within the script's run, its
steps slowing toward an epoch's end, favours neither side; within one process each two pairs
cancel a linear drift); each block starts with SETTLE_STEPS untimed steps that pay for the switch
itself (a thread pool resized, the optimizer's first step on the other path), or more where the
switch asks (``knobs.base.Switch``: a loader's batches prefetched under the other arm). The same
process, the same memory layout, the same neighbours' load: each block pair's gain is
that of the setting alone.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable

from torchpace.stats import trimmed_mean

BLOCK_PAIRS = 8
SETTLE_STEPS = 1
MIN_BLOCK_STEPS = 2


def block_steps(timed_steps: int) -> int:
    """Timed steps per block: each arm gets about the trial's timed steps (the precision of
    an ordinary trial), in BLOCK_PAIRS blocks."""
    return max(MIN_BLOCK_STEPS, math.ceil(timed_steps / BLOCK_PAIRS))


class SwitchedBlocks:
    """The plan of one switched trial's timed steps, and which arm each step ran with."""

    def __init__(self, switch: Callable[[bool], None], timed_steps: int, seed: int):
        self.switch = switch
        settle = settle_steps(switch)
        per_block = max(SETTLE_STEPS + block_steps(timed_steps), settle + MIN_BLOCK_STEPS)
        first = random.Random(seed).random() < 0.5
        # (on, timed) for each step of the plan, block after block: AB BA AB BA ...
        self.plan: list[tuple[bool, bool]] = []
        for pair in range(BLOCK_PAIRS):
            leads = first if pair % 2 == 0 else not first
            for on in (leads, not leads):
                self.plan += [(on, i >= settle) for i in range(per_block)]
        self.position = 0
        self.switch(self.plan[0][0])

    @property
    def steps(self) -> int:
        return len(self.plan)

    def current(self) -> tuple[bool, bool]:
        """(the knob on, the step timed) for the step that just ended."""
        return self.plan[self.position]

    def advance(self) -> bool:
        """To the next step of the plan, switching where a block starts; False when done
        (the knob is left on: the trial's last check reads it in force)."""
        self.position += 1
        if self.position >= len(self.plan):
            self.switch(True)
            return False
        on = self.plan[self.position][0]
        if on != self.plan[self.position - 1][0]:
            self.switch(on)
        return True


def settle_steps(switch: Callable[[bool], None]) -> int:
    """Untimed steps at each block's start: SETTLE_STEPS, or what the switch asks for
    (knobs/base.Switch: batches its DataLoader prefetched under the other arm). They come
    out of the block's own steps, so that the plan's length, which the parent fitted to the
    script (tune/switched.py), stays as it was; a block grows only to keep MIN_BLOCK_STEPS
    timed steps."""
    return max(SETTLE_STEPS, getattr(switch, "settle_steps", SETTLE_STEPS))


def block_gains(steps: list[tuple[bool, float | None]]) -> list[float]:
    """Each block pair's gain, in % (the knob's block over the script's: 25.0 = 1.25x
    faster), from the plan's steps in order as (knob on, ms), ms None for a block's untimed
    settling steps, which start it; blocks pair two by two, as planned (`block_ms`)."""
    blocks: list[tuple[bool, list[float]]] = []
    timed = False  # the step before was timed: an untimed one after it starts a block
    for on, ms in steps:
        if not blocks or blocks[-1][0] != on or (ms is None and timed):
            blocks.append((on, []))
        if ms is not None:
            blocks[-1][1].append(ms)
        timed = ms is not None
    gains = []
    for a, b in zip(blocks[0::2], blocks[1::2], strict=False):
        if a[0] == b[0] or not a[1] or not b[1]:  # not a whole pair (a plan cut short)
            continue
        on_ms, off_ms = (a[1], b[1]) if a[0] else (b[1], a[1])
        gains.append(100 * (block_ms(off_ms) / block_ms(on_ms) - 1))
    return gains


def block_ms(steps: list[float]) -> float:
    """A block's time per step: the mean of its middle half (the interquartile mean), the
    median under four steps. A competing process on 2 cores stalls one step in ten or
    twenty by 100-250 ms (makemore under load: 15 ms steps beside stalls of 141, 162, 258
    ms); the mean less its slowest step let the others through, and block pairs read -22%
    to +87% for a knob worth a few percent. Steps that alternate between two speeds (a
    batch's length) still average in the middle half."""
    if len(steps) < 4:
        return statistics.median(steps)
    return trimmed_mean(steps, len(steps) // 4)
