"""tune's ladder in the units of the speed of light: each rung's FLOP/s as a fraction of the
device's peak (doctor/speed_of_light.py's MFU), and the headroom left after tune.

The work is the doctor's counted step (``facts.flops``, from tune's own doctor capture);
per sample where the loader's batches give the samples, so that a rung that changed the
batch size is held to its own work; per step otherwise (and then a rung with a new batch
size has no figure). The peak is this machine's (env/peak.py, cached), for the baseline's
mix of dtypes: a rung that changed the precision (autocast) is still held to it, so its
fraction says how much faster than the baseline's ceiling it runs.
"""

from __future__ import annotations

from torchpace.facts.run import RunFacts

BATCH_SIZE_KNOB = "batch-size"


def ladder_speed_of_light(facts: RunFacts | None, result) -> dict | None:
    """The fractions of the ladder's rungs and of the final result; None where the doctor's
    capture counted no step or the peak cannot be measured here."""
    if facts is None or not facts.flops.counted or facts.flops.flops <= 0:
        return None
    from torchpace.doctor.speed_of_light import device_peak_for_facts

    peak_rate, source = device_peak_for_facts(facts)
    if not peak_rate:
        return None
    flops_step = float(facts.flops.flops)
    per_sample = flops_step / facts.flops.samples if facts.flops.samples else None
    fastest = min((r.median_ms for r in result.ladder if r.median_ms), default=None)
    if fastest is not None and flops_step / (fastest / 1000) > peak_rate:
        # a rung beat the cached peak: that probe read low beside other work; once more
        peak_rate, source = device_peak_for_facts(facts, refresh=True)
        if not peak_rate:
            return None
    rungs = []
    for rung in result.ladder:
        if per_sample is not None and rung.samples_per_s:
            achieved = per_sample * rung.samples_per_s
        elif BATCH_SIZE_KNOB not in rung.config and rung.median_ms:
            achieved = flops_step / (rung.median_ms / 1000)
        else:
            achieved = None
        rungs.append(
            {
                "label": rung.label,
                "achieved_flop_per_s": achieved,
                # four significant digits: a loader-bound toy runs at 1e-5 of the peak
                "fraction": float(f"{achieved / peak_rate:.4g}") if achieved else None,
            }
        )
    final = rungs[-1]["fraction"] if rungs else None
    return {
        "flops_per_step": flops_step,
        "flops_per_sample": per_sample,
        "peak_flop_per_s": peak_rate,
        "peak_source": source,
        "ideal_ms": float(f"{1000 * flops_step / peak_rate:.4g}"),
        "rungs": rungs,
        "final_fraction": final,
        "headroom": round(1 - final, 4) if final is not None else None,
    }
