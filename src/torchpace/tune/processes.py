"""tune's processes-per-node step: for a CPU job of N local ranks (--nproc-per-node N,
--allow-batch-size), other process counts on top of everything kept: each screened, the
promising ones paired, the fastest confirmed kept. Compared on the whole job's samples per
second (ledger.cost_ms: every rank's samples per step, capture/job.combine): the global batch
changes with the count."""

from __future__ import annotations

import dataclasses

from torchpace import knobs as registry
from torchpace.knobs.base import TuneContext
from torchpace.tune import compare
from torchpace.tune.ledger import Ledger
from torchpace.tune.noise import Decision
from torchpace.tune.result import KnobStatus

NAME = "nproc-per-node"


def processes_per_node(ledger: Ledger, ctx: TuneContext, config: dict) -> dict:
    """The process count kept on top of ``config``, and the configuration it gives. A
    count's trials leave the threads knob out: its value was a thread count for each of N
    ranks, and the launcher gives each rank cores // count threads."""
    outcome = ledger.outcome(NAME)
    if outcome is None:
        return config
    knob = registry.get(NAME)
    plan = knob.plan(ctx)
    if not plan.applicable:
        opted_in = knob.plan(dataclasses.replace(ctx, allow_batch_size=True))
        if opted_in.applicable:  # it would apply: not tried without the flag
            outcome.reason = plan.reason
        else:
            outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, opted_in.reason
        return config
    base = {k: v for k, v in config.items() if k != "threads"}
    left_out = "; threads per rank from the launcher" if base != config else ""
    reasons, promising = [], []
    for value in plan.values:
        name = f"+ {knob.describe(value)}"
        result, why = compare.screen(ledger, config, {**base, NAME: value}, name)
        if why is None and not result.samples_per_step:
            why = "the job's samples per step were not counted: no comparable figure"
            ledger.verdict(result, why)
        if why is None:
            promising.append(result)
        else:
            reasons.append(f"{value} processes: {why}")
    confirmed = []
    for screened in sorted(promising, key=lambda r: -ledger.gains[id(r)]):
        value = screened.config[NAME]
        name = f"+ {knob.describe(value)}"
        pairs = compare.paired(ledger, config, screened.config, name, screened)
        why = pairs.failed
        if why is None and pairs.judgement.decision != Decision.FASTER:
            why = pairs.judgement.reason
        if why is None:
            confirmed.append((pairs.judgement, value, name, pairs.runs, screened.config))
        else:
            reasons.append(f"{value} processes: {why}")
    if not confirmed:
        outcome.status, outcome.reason = KnobStatus.REJECTED, "; ".join(reasons)
        return config
    judgement, value, name, runs, kept = max(confirmed, key=lambda c: c[0].estimate_pct)
    outcome.status, outcome.value = KnobStatus.KEPT, value
    outcome.gain_pct = judgement.mean_gain_pct
    outcome.reason = (
        f"{value} processes per node, in the job's samples/s: {judgement.reason}"
        f"{left_out}; the global batch changes with it"
    )
    ledger.ladder.append(ledger.rung(name, kept, runs))
    return kept
