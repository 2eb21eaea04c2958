"""Every figure the user reads (the ladder, the final check, torchpace.toml, the JSON, the
HTML), computed once when the search ends, from the ledger's evidence."""

from __future__ import annotations

import math
import statistics

from torchpace.tune import noise as stats
from torchpace.tune.ledger import Ledger
from torchpace.tune.result import TuneResult


def settle_figures(result: TuneResult, ledger: Ledger) -> None:
    """The baseline's ms/step over all its runs; each rung's speedup against it; the last
    rung, when the final check ran, is the final check's paired speedup, and its ms/step
    (samples/s) is the baseline's divided (multiplied) by it, so that torchpace.toml's two
    numbers give its speedup."""
    decided = [gains for _, _, gains in ledger.decisions]
    sd = stats.spread_of_pairs(decided) or _spread_from_noise_runs(result)
    result.pair_sd_pct = sd
    result.detectable_pct = None if sd is None else stats.detectable_pct(sd)
    if not result.ladder:
        return
    base = result.ladder[0]
    if ledger.baseline_runs:  # every baseline run that was a reference, not only the first
        base.median_ms = round(statistics.median(r.ms_per_step for r in ledger.baseline_runs), 3)
        rates = [r.samples_per_s for r in ledger.baseline_runs if r.samples_per_s]
        base.samples_per_s = round(statistics.median(rates), 1) if rates else None
    _chain_rungs(result)
    last = result.ladder[-1]
    final = result.final_speedup
    if final and len(result.ladder) > 1 and last.config == result.best and result.best:
        last.speedup = final
        same_batch = not {"batch-size", "nproc-per-node"} & set(last.config)
        if same_batch or not base.samples_per_s:
            last.median_ms = round(base.median_ms / final, 3)
        if base.samples_per_s:
            last.samples_per_s = round(base.samples_per_s * final, 1)
    figures = {"baseline_ms_per_step": base.median_ms}
    if base.samples_per_s:
        figures["baseline_samples_per_s"] = base.samples_per_s
    if result.best and last.config == result.best:
        figures["tuned_ms_per_step"] = last.median_ms
        if last.samples_per_s:
            figures["tuned_samples_per_s"] = last.samples_per_s
        figures["speedup"] = last.speedup
    if result.noise is not None and result.noise.pct is not None:
        figures["noise_pct"] = result.noise.pct
    if result.detectable_pct is not None:
        figures["detectable_pct"] = result.detectable_pct
    result.figures = figures


def _chain_rungs(result: TuneResult) -> None:
    """Each rung's speedup against the baseline; a rung measured against the one below
    within each process takes the rung below's figures times its gain (the processes' own
    speeds cancel in it)."""
    base_cost = result.ladder[0].cost_ms
    for below, rung in zip(result.ladder, result.ladder[1:], strict=False):
        if rung.switched_gain_pct is None:
            rung.speedup = round(base_cost / rung.cost_ms, 3)
            continue
        factor = 1 + rung.switched_gain_pct / 100
        rung.speedup = round(below.speedup * factor, 3)
        rung.median_ms = round(below.median_ms / factor, 3)
        if below.samples_per_s:
            rung.samples_per_s = round(below.samples_per_s * factor, 1)


def _spread_from_noise_runs(result: TuneResult) -> float | None:
    """Before any pair: the back-to-back baselines' spread, as a pair's (sqrt 2 runs)."""
    medians = result.noise.medians_ms if result.noise else ()
    if len(medians) < 2:
        return None
    logs = [math.log(m) for m in medians]
    return round(100 * math.sqrt(2) * statistics.stdev(logs), 2)
