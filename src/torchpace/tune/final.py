"""tune's last phase: the final check. The ladder's top against the script as it is,
alternated, at least two new pairs, by the same paired test. Not faster: the knob of its top
rung is dropped (refused, saying why) and the rung below is checked, down the ladder; none
faster: the result is the script as it is. tune never returns a slower configuration.

gpt.py: fused AdamW kept in two clear pairs, bf16 on top of it in two pairs just past the
margin, and the pair fused + bf16 refused by the final check took fused AdamW with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchpace.tune import compare
from torchpace.tune.ledger import FINAL_PAIRS, Ledger, two_pairs
from torchpace.tune.noise import Decision, Judgement
from torchpace.tune.result import KnobStatus
from torchpace.tune.switched import MIN_SWITCHED_RUNS


@dataclass
class FinalCheck:
    best: dict = field(default_factory=dict)  # the configuration confirmed ({}: the script)
    speedup: float | None = None  # the paired estimate against the script as it is
    gains_pct: list[float] = field(default_factory=list)  # its pairs (or block pairs)
    switched_runs: int = 0  # its processes, where its one knob was switched within each
    failed: bool = False  # no run of the final check succeeded


def final_check(ledger: Ledger, config: dict) -> FinalCheck:
    """The ladder's top, then each rung below it, against the script as it is, until one
    is faster."""
    if not config:
        return FinalCheck({}, 1.0)
    first: Judgement | None = None
    while True:
        judgement, why, switched_runs = _final_pairs(ledger, config)
        if why is not None:
            return FinalCheck({}, None, failed=True)
        first = first or judgement
        if judgement.decision == Decision.FASTER:
            # the speedup, once: the paired estimate (Hodges-Lehmann over the final
            # pairs); every figure that shows it derives from this one (figures.py)
            speedup = round(1 + judgement.estimate_pct / 100, 3)
            return FinalCheck(dict(config), speedup, list(judgement.gains_pct), switched_runs)
        config = _drop_top_rung(ledger, config, judgement)
        if not config:  # never a configuration slower than (or no better than) the script
            return FinalCheck({}, round(1 + first.estimate_pct / 100, 3), list(first.gains_pct))


def final_needs(ledger: Ledger, config: dict) -> tuple[int, float]:
    """What the final check of ``config`` runs at the fewest, in trials and expected
    seconds: MIN_SWITCHED_RUNS processes where its one knob switches within each (the
    example's top, glibc malloc: two 6.8 s processes, where two pairs of processes held 29
    s of its 150 s back and starved bf16's decision), else FINAL_PAIRS pairs (ledger.py)."""
    switch = compare.switch_for(ledger, {}, config)
    if switch:
        return MIN_SWITCHED_RUNS, MIN_SWITCHED_RUNS * ledger.expected_s(config, switch)
    return two_pairs(ledger, config)


def _final_pairs(ledger: Ledger, config: dict) -> tuple[Judgement, str | None, int]:
    """The final check of one configuration: at least two new pairs; pairs already run
    of this very comparison (a single kept knob: its own decision's) count. A single
    switchable knob is checked within processes (compare.paired hands it on, with its own
    decision's block pairs): the count of those processes is returned, else 0."""
    prior = [g for ref, cand, gains in ledger.decisions if ref == {} and cand == config
             for g in gains]  # fmt: skip
    pairs = compare.paired(
        ledger, {}, config, "final configuration", min_pairs=FINAL_PAIRS, prior=prior
    )
    finals, why = pairs.runs, pairs.failed
    switched = bool(finals) and all(r.switched for r in finals)
    if why is None and (not finals or not (pairs.references or switched)):
        why = "no run of the final check succeeded"
    return pairs.judgement, why, len(finals) if switched else 0


def _drop_top_rung(ledger: Ledger, config: dict, judgement: Judgement) -> dict:
    """The final check refused ``config``, the ladder's top: the knob its rung added
    leaves the configuration (refused, saying why); the rung below is next. A stop from
    here on keeps that rung (the best so far), never the refused one."""
    ladder = ledger.ladder
    if len(ladder) < 2 or ladder[-1].config != config:
        return {}  # not a rung of the ladder: nothing below it to fall back to
    top = ladder.pop()
    below = dict(ladder[-1].config) if len(ladder) > 1 else {}
    gains = ", ".join(f"{g:+.1f}%" for g in judgement.gains_pct)
    for name in [n for n in top.config if below.get(n, None) != top.config[n]]:
        outcome = ledger.outcome(name)
        if outcome is None:
            continue
        outcome.status = KnobStatus.REJECTED
        outcome.reason = (
            f"dropped by the final check: {top.label.removeprefix('+ ')} with every knob "
            f"below it was not faster than the script as it is ({gains}); on the ladder "
            f"it had read: {outcome.reason}"
        )
    return below
