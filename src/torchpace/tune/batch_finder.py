"""tune's batch-size finder (--allow-batch-size): batch sizes on top of the combination
(each trial is a fresh process: a failed attempt frees its memory). Where the doctor
estimated the largest batch that fits (its batch headroom, 10% of the memory kept free),
the first size tried is the largest planned one that estimate holds, and no larger one is
tried: on an H100 each size is a decision of two or more 11-12 s processes, and doubling
from the script's batch to 8x is three decisions, one more process for a size that runs out
of memory. Without an estimate, doubling until out of memory or no gain. After an
out-of-memory failure, halfway back towards the last size that ran (BACKOFF_STEPS times).
A size that ran and is not faster ends the search (a larger batch is not tried, nor, from
the estimate, a smaller one: samples per second rise with the batch, then level off).
The sizes that ran and the one that did not bracket the memory limit: the doctor's batch
headroom estimate is checked against them (batch_check.py)."""

from __future__ import annotations

from torchpace import knobs as registry
from torchpace.knobs.base import TuneContext
from torchpace.tune import batch_check, compare
from torchpace.tune.ledger import Ledger
from torchpace.tune.noise import Decision
from torchpace.tune.result import KnobStatus
from torchpace.tune.trial import Outcome

NAME = "batch-size"
# After a batch size runs out of memory, the finder tries halfway between the largest that
# ran and the smallest that did not, this many times: the limit bracketed to an eighth of
# the last doubling, the doctor's estimate checked against it.
BACKOFF_STEPS = 2


def find_batch_size(ledger: Ledger, ctx: TuneContext, config: dict) -> tuple[dict, dict | None]:
    """Doubling on top of the combination while each size is faster; after one runs out of
    memory, backing off halfway between the largest that ran and it. Returns the
    configuration kept and the check of the doctor's estimate (None: the finder did not
    run, or the loader's batch is not known)."""
    outcome = ledger.outcome(NAME)
    if outcome is None or not ctx.allow_batch_size:
        return config, None
    knob = registry.get(NAME)
    plan = knob.plan(ctx)
    if not plan.applicable:
        outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, plan.reason
        return config, None
    base = loader_batch(ctx.facts)
    best_value = None
    reasons = []
    ran, failed = base or 0, None  # the largest batch that ran, the smallest that did not
    pending, from_estimate = first_sizes(list(plan.values), base, ctx.batch_headroom)
    backoffs, tries = 0, []
    if not pending:
        outcome.status, outcome.reason = KnobStatus.REJECTED, from_estimate
        return config, None
    while pending:
        value = pending.pop(0)
        trial_config = {**config, knob.name: value}
        name = f"+ {knob.describe(value)}"
        screened, why = compare.screen(ledger, config, trial_config, name)
        if why is None:
            pairs = compare.paired(ledger, config, trial_config, name, screened)
            why = pairs.failed
            if why is None and pairs.judgement.decision != Decision.FASTER:
                why = pairs.judgement.reason
        tried = _batch_try(ledger, value)
        tries.append(tried)
        if tried.outcome == "ok":
            ran = max(ran, value)
        elif _out_of_memory(ledger, value):
            failed = value if failed is None else min(failed, value)
        if why is None:
            best_value, config = value, trial_config
            ledger.ladder.append(ledger.rung(name, config, pairs.runs))
            if failed is None:
                continue  # doubling: the plan's next value
        else:
            reasons.append(f"{knob.describe(value)}: {why}")
            if not _out_of_memory(ledger, value):
                break  # ran but not faster (or crashed): a larger batch is not tried
        between = halfway(ran, failed) if ran else None
        if between is None or backoffs >= BACKOFF_STEPS:
            break
        pending, backoffs = [between], backoffs + 1
    if best_value is None:
        outcome.status, outcome.reason = KnobStatus.REJECTED, "; ".join(reasons)
    else:
        outcome.status, outcome.value = KnobStatus.KEPT, best_value
        outcome.reason = f"batch {best_value}; the learning rate may need scaling"
        if from_estimate:
            outcome.reason += f" ({from_estimate})"
        if reasons:
            outcome.reason += f" (larger: {reasons[-1]})"
    if not base:
        return config, None
    peaks = [r.peak_bytes for r in ledger.baseline_runs if r.peak_bytes]
    checked = batch_check.check(base, max(peaks) if peaks else None, tries, ctx.batch_headroom)
    return config, checked


def first_sizes(values: list[int], base: int | None, headroom) -> tuple[list[int], str]:
    """The sizes to try first, and where they come from in words. With the doctor's
    estimate of the largest batch that fits (``headroom``: BatchHeadroom, 10% of the memory
    kept free): the largest planned size it holds, or, where it holds none, the largest
    multiple of 8 under it above the script's batch; none where the script's batch is
    already at it (the reason is then the words). Without one: every planned size,
    doubling."""
    if headroom is None or not base:
        return values, ""
    estimate = headroom.largest_batch_estimate
    held = [v for v in values if v <= estimate]
    if held:
        return [max(held)], (
            f"the largest of {', '.join(map(str, values))} that the doctor's memory estimate "
            f"holds: {estimate:,}"
        )
    under = estimate // 8 * 8 if estimate >= 16 else estimate
    if under > base:
        return [under], f"under the doctor's memory estimate: {estimate:,}"
    return [], (
        f"not tried: the doctor's memory estimate holds no larger batch than {base} "
        f"(at most {estimate:,}, 10% of {headroom.capacity_text or 'the memory'} kept free)"
    )


def loader_batch(facts) -> int | None:
    """The batch the finder starts from: the batch of the loader that fed the steps (the
    one that fetched the most batches, as the knob's plan picks it)."""
    if not facts.loaders:
        return None
    return max(facts.loaders, key=lambda x: x.batches_seen).batch_size or None


def halfway(ran: int, failed: int) -> int | None:
    """A batch between one that ran and one that ran out of memory, where the finder backs
    off to: halfway, rounded down to a multiple of 8 where that stays above the one that
    ran; None when no whole batch lies between them."""
    mid = (ran + failed) // 2
    if mid >= 16 and mid // 8 * 8 > ran:
        mid = mid // 8 * 8
    return mid if ran < mid < failed else None


def _out_of_memory(ledger: Ledger, value: int) -> bool:
    """A run of this batch size ran out of memory, or was killed by SIGKILL (the OOM
    killer's signal: a larger batch is the likeliest reason here)."""
    return any(
        r.outcome == Outcome.OUT_OF_MEMORY
        or (r.outcome == Outcome.KILLED and "SIGKILL" in (r.error or ""))
        for r in ledger.trials
        if r.config.get(NAME) == value and not r.ok
    )


def _batch_try(ledger: Ledger, value: int) -> batch_check.BatchTry:
    """What the runs of this batch size showed: ok when all ran, else the first
    failure's outcome; the most any of them held."""
    runs = [r for r in ledger.trials if r.config.get(NAME) == value]
    failures = [r for r in runs if not r.ok]
    peaks = [r.peak_bytes for r in runs if r.ok and r.peak_bytes]
    return batch_check.BatchTry(
        batch=value,
        outcome=str(failures[0].outcome) if failures else "ok",
        peak_bytes=max(peaks) if peaks else None,
        trials=len(runs),
    )
