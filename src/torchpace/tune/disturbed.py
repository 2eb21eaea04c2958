"""Which runs were disturbed by something else on the machine: far slower than their
configuration's other runs, their own steps scattered far more than theirs, or other
processes on the CPUs much more than during the tune's other runs (noise.disturbance). Such a
run is set aside in the ledger: left out of every decision and of the references, and its
pair run again (compare.py; at most MAX_RERUNS times per decision)."""

from __future__ import annotations

import statistics

from torchpace import contention
from torchpace.tune import noise as stats
from torchpace.tune.ledger import Ledger, cost_ms
from torchpace.tune.trial import TrialResult

# The thresholds are contention.py's, the one rule the doctor judges its window by too.
# Re-runs of disturbed pairs per decision (one run in 15 was disturbed on the shared 2-core VM;
# a decision may run 16 pairs): a machine that stays disturbed is measured as it is.
MAX_RERUNS = 4


def set_aside_if_disturbed(ledger: Ledger, result: TrialResult) -> bool:
    """Marks a disturbed run (left out of decisions and references), with its verdict."""
    why = disturbance(ledger, result)
    if why is None:
        return False
    ledger.disturbed.add(id(result))
    ledger.verdict(result, f"disturbed: {why}; pair run again")
    return True


def disturbance(ledger: Ledger, result: TrialResult) -> str | None:
    """Why this run was disturbed, or None; against its configuration's earlier runs."""
    if not result.ok:
        return None
    earlier = [
        r for r in ledger.trials
        if r is not result and ledger.usable(r) and r.config == result.config
        and ledger.reject_reason(r) is None
    ]  # fmt: skip
    return disturbance_among(ledger, result, earlier)


def disturbance_among(
    ledger: Ledger, result: TrialResult, earlier: list[TrialResult]
) -> str | None:
    """Far slower than the same configuration's other runs (a first run of a configuration
    is never: a knob may really be that slow, bf16 autocast on a CPU without bf16
    instructions is 40x slower); its steps scattered far more than theirs; or other
    processes on the CPUs much more than during the tune's other runs, and the run slower
    than its siblings beyond the noise."""
    if not result.ok:
        return None
    noise = ledger.noise
    noise_pct = (noise.pct if noise else None) or 0.0
    usual = statistics.median(cost_ms(r) for r in earlier) if earlier else None
    if usual is not None:
        limit = contention.run_slower_limit_pct(noise_pct)
        slower = 100 * (cost_ms(result) / usual - 1)
        if slower > limit:
            return (
                f"{result.ms_per_step:.1f} ms/step, {slower:.0f}% slower than this "
                f"configuration's other runs (limit {limit:.0f}%)"
            )
    siblings = [r for r in ledger.trials if r is not result and ledger.usable(r)]
    siblings_spreads = [r.spread_pct for r in siblings if r.spread_pct is not None]
    spreads = [r.spread_pct for r in earlier if r.spread_pct is not None]
    if len(spreads) < 2:
        # one earlier run of this configuration is no measure of its usual scatter (its
        # steps may have happened to be tight): the tune's other runs are
        spreads = siblings_spreads
    why = stats.disturbance(result.spread_pct, spreads, None, [])
    # a busy neighbour counts only where it visibly slowed the run: on a machine whose
    # load comes and goes all the time, re-running every run beside it would measure
    # nothing else
    threshold = noise.threshold_pct if noise else contention.RUN_MIN_SLOWED_PCT
    slowed = usual is not None and cost_ms(result) > usual * (1 + threshold / 100)
    if why is not None or not (slowed or usual is None):
        return why
    others = [r.others_cores for r in siblings if r.others_cores is not None]
    busy = stats.disturbance(None, [], result.others_cores, others, result.cores)
    if busy is None or slowed:
        return busy
    # a configuration's first run has no siblings to be slower than: a busy neighbour
    # and steps scattered far more than the tune's other runs' both have to say so (a
    # knob may scatter its steps by itself: loader workers deliver in bursts)
    scattered = stats.disturbance(result.spread_pct, siblings_spreads, None, [])
    return f"{busy}, and {scattered}" if scattered else None
