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
switch asks (``knobs.base.Switch``: a loader's batches prefetched under the other arm; a switch
that settles longer than a block would be timed gets fewer, longer blocks: `plan_blocks`). The same
process, the same memory layout, the same neighbours' load: each block pair's gain is
that of the setting alone.

A knob with several values to screen (loader workers 2, 4 and 8) can put them all in one
process (``Knob.switch_arms``): each round then holds one block of each value and one of the
script's setting, in an order drawn for the round, and each value's gain is read against the
script's block of the same round. One process instead of one per value: on a GPU each
process pays seconds of CUDA set-up before its first step.
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
# A switch that settles for many steps (loader workers: their batches in flight drained and
# the new ones' buffer filled) takes fewer, longer rounds rather than blocks of two timed
# steps, but never fewer than this many (two ABBA quads: drift still cancels).
MIN_SETTLING_ROUNDS = 4


def block_steps(timed_steps: int) -> int:
    """Timed steps per block: each arm gets about the trial's timed steps (the precision of
    an ordinary trial), in BLOCK_PAIRS blocks."""
    return max(MIN_BLOCK_STEPS, math.ceil(timed_steps / BLOCK_PAIRS))


class SwitchedBlocks:
    """The plan of one switched trial's timed steps, and which arm each step ran with.

    Arm 0 is the script's own setting, arm 1 the knob's value, arms 2.. its further values
    when several are screened in one process (``Knob.switch_arms``). Two arms run in ABBA
    pairs; more run in rounds of one block each, every round in its own random order (each
    value meets the script's setting and the others in every phase of the process)."""

    def __init__(self, switch: Callable[[int], None], timed_steps: int, seed: int, arms: int = 2):
        self.switch = switch
        self.arms = arms
        settle = settle_steps(switch)
        self.rounds, per_block = plan_blocks(timed_steps, settle)
        draw = random.Random(seed)
        # (arm, timed) for each step of the plan, block after block
        self.plan: list[tuple[int, bool]] = []
        for order in block_order(arms, draw, self.rounds):
            for arm in order:
                self.plan += [(arm, i >= settle) for i in range(per_block)]
        self.position = 0
        self.switch(self.plan[0][0])

    @property
    def steps(self) -> int:
        return len(self.plan)

    def current(self) -> tuple[int, bool]:
        """(the arm, the step timed) for the step that just ended."""
        return self.plan[self.position]

    def advance(self) -> bool:
        """To the next step of the plan, switching where a block starts; False when done
        (the knob's first value is left on, or every knob's where several share the
        process: the trial's last check reads each in force)."""
        self.position += 1
        if self.position >= len(self.plan):
            finish = getattr(self.switch, "finish", None)
            finish() if finish is not None else self.switch(1)
            return False
        arm = self.plan[self.position][0]
        if arm != self.plan[self.position - 1][0]:
            self.switch(arm)
        return True


def plan_blocks(timed_steps: int, settle: int) -> tuple[int, int]:
    """(rounds, steps a block, ``settle`` of them untimed) for a plan of about ``timed_steps``
    timed steps an arm. BLOCK_PAIRS rounds of blocks as long as the parent fitted to the script
    (tune/switched.py: BLOCK_PAIRS * (SETTLE_STEPS + block) steps an arm), unless ``settle``
    would leave a block fewer timed steps than settling ones: then the same steps in fewer,
    longer rounds (at least MIN_SETTLING_ROUNDS). A held-out tabular job, 1 loader worker
    against 0 in 11-step blocks (9 settling): its timed pairs of steps caught one phase of
    the worker's wait-every-other-step rhythm, 10 to 77 ms against a steady ~46, and read
    the worker +18% where by hand it was 24% slower."""
    block = block_steps(timed_steps)
    per_block = max(SETTLE_STEPS + block, settle + MIN_BLOCK_STEPS)
    if per_block - settle >= settle:
        return BLOCK_PAIRS, per_block
    planned = BLOCK_PAIRS * (SETTLE_STEPS + block)  # an arm's steps, as the parent fitted them
    rounds = min(BLOCK_PAIRS, max(MIN_SETTLING_ROUNDS, planned // (2 * settle)))
    return rounds, max(per_block, planned // rounds)


def block_order(arms: int, draw: random.Random, rounds: int = BLOCK_PAIRS) -> list[tuple[int, ...]]:
    """The arms' blocks, a round at a time. Two arms alternate which leads (AB BA AB BA
    from a side drawn at random: each two pairs cancel a linear drift); more arms take each
    round in an order drawn at random."""
    if arms == 2:
        first = draw.random() < 0.5
        return [
            (1, 0) if (first if pair % 2 == 0 else not first) else (0, 1) for pair in range(rounds)
        ]
    drawn = []
    for _ in range(rounds):
        order = list(range(arms))
        draw.shuffle(order)
        drawn.append(tuple(order))
    return drawn


def settle_steps(switch: Callable[[int], None]) -> int:
    """Untimed steps at each block's start: SETTLE_STEPS, or what the switch asks for
    (knobs/base.Switch: batches its DataLoader prefetched under the other arm). They come
    out of the block's own steps, so that the plan's length, which the parent fitted to the
    script (tune/switched.py), stays as it was; a block grows only to keep MIN_BLOCK_STEPS
    timed steps."""
    return max(SETTLE_STEPS, getattr(switch, "settle_steps", SETTLE_STEPS))


def block_gains(steps: list[tuple[int, float | None]]) -> list[float]:
    """Each block pair's gain of a two-arm plan, in % (the knob's block over the script's:
    25.0 = 1.25x faster): ``arm_gains``'s arm 1."""
    return arm_gains(steps, 2).get(1, [])


def arm_gains(
    steps: list[tuple[int, float | None]], arms: int, left_out: frozenset[int] = frozenset()
) -> dict[int, list[float]]:
    """Each round's gain of every arm over the script's own (arm 0), in %, from the plan's
    steps in order as (arm, ms), ms None for a block's untimed settling steps, which start
    it; blocks group ``arms`` by ``arms`` into rounds, as planned (`block_order`). A round
    cut short (the script ended) counts for the arms it holds beside arm 0.

    ``left_out``: positions in ``steps`` of timed steps that are not the loop's step
    (tune/trial.py `_not_the_step`: an epoch's start, a short last batch); they stay in
    their block's place and add nothing to its time. A block left with no step gives its
    round nothing to compare (the script's block) or that arm nothing (another's)."""
    blocks: list[tuple[int, list[float]]] = []
    timed = False  # the step before was timed: an untimed one after it starts a block
    for i, (arm, ms) in enumerate(steps):
        if not blocks or blocks[-1][0] != arm or (ms is None and timed):
            blocks.append((arm, []))
        if ms is not None and i not in left_out:
            blocks[-1][1].append(ms)
        timed = ms is not None
    gains: dict[int, list[float]] = {arm: [] for arm in range(1, arms)}
    for start in range(0, len(blocks), arms):
        by_arm = {arm: ms for arm, ms in blocks[start : start + arms] if ms}
        if 0 not in by_arm:  # no reference in this round (a plan cut short)
            continue
        reference = block_ms(by_arm[0])
        for arm, ms in by_arm.items():
            if arm:
                gains.setdefault(arm, []).append(100 * (reference / block_ms(ms) - 1))
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
