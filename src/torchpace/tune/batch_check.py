"""The doctor's batch headroom estimate checked by the batch-size finder (--allow-batch-size).

The doctor estimates from one profiled step how large the batch could be before the memory
there is runs out (doctor/memory.batch_headroom: what scales with the batch and what does
not, in what the step's tensors can use under the process's binding limit). The finder
really runs larger batches, each in a fresh process: the largest planned one that estimate
holds (batch_finder.first_sizes), and, where one runs out of memory, halfway back towards
the last that ran. What it learns bounds the real limit: the largest batch that ran and the
smallest that ran out of memory, where one did. The estimate at
the limit is compared with that bracket; the trials' peak memory gives the memory per
sample measured, beside the doctor's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torchpace.report.memory_model import BatchHeadroom

# The estimate agrees with the finder when it lies within the bracket, or within this share
# of its nearer end (the finder's own batches are coarse: doublings and halvings).
TOLERANCE = 0.25
MIB = 2**20


@dataclass
class BatchTry:
    """One batch size the finder ran: all its trials ok, or the first failure's outcome."""

    batch: int
    outcome: str  # "ok", "out-of-memory", "crashed", ...
    peak_bytes: int | None  # the most any of its successful trials held (trial.peak_bytes)
    trials: int


def check(
    base: int, base_peak: int | None, tries: list[BatchTry], headroom: BatchHeadroom | None
) -> dict:
    """The finder's result beside the doctor's estimate, as plain data for the report."""
    ran = max([base] + [t.batch for t in tries if t.outcome == "ok"])
    failed = min((t.batch for t in tries if t.outcome == "out-of-memory"), default=None)
    out: dict = {
        "batch_size": base,
        "largest_ran": ran,
        "first_out_of_memory": failed,
        "tried": [asdict(t) for t in tries],
        "estimate": None,
        "estimate_at_limit": None,
        "capacity_text": None,
        "per_sample_bytes": None,
        "measured_per_sample_bytes": _per_sample(base, base_peak, tries),
        "error_pct": None,
        "agrees": None,
    }
    if headroom is None:
        out["verdict"] = (
            "not checked: the doctor made no estimate (no batch size, or no memory limit "
            "known for this run)"
        )
        return out
    estimate = headroom.largest_batch_at_limit
    out |= {
        "estimate": headroom.largest_batch_estimate,
        "estimate_at_limit": estimate,
        "capacity_text": headroom.capacity_text,
        "per_sample_bytes": headroom.per_sample_bytes,
    }
    said = f"the estimate at the limit ({estimate})"
    if failed is not None and ran <= estimate < failed:
        error = 0.0
        verdict = (f"confirmed: {said} lies between the largest batch that ran ({ran}) and "
                   f"the first that ran out of memory ({failed})")  # fmt: skip
    elif estimate < ran:
        error = estimate / ran - 1
        verdict = f"{said} is {-100 * error:.0f}% under the largest batch that ran ({ran})"
    elif failed is not None:
        error = estimate / failed - 1
        verdict = (f"{said} is {100 * error:.0f}% over the first batch that ran out of memory "
                   f"({failed})")  # fmt: skip
    else:
        out["agrees"] = True
        out["verdict"] = (
            f"not contradicted: every batch up to {ran} ran without running out of memory and "
            f"{said} is above it (the finder tries no batch above what the estimate holds, "
            "and stops at the first that is not faster, or at 8x)"
        )
        return out
    out["error_pct"] = round(100 * error, 1)
    out["agrees"] = abs(error) <= TOLERANCE
    if error:
        within = "within" if out["agrees"] else "more than"
        verdict += f": {within} {100 * TOLERANCE:.0f}%"
    out["verdict"] = verdict
    return out


def _per_sample(base: int, base_peak: int | None, tries: list[BatchTry]) -> int | None:
    """The memory per sample the trials measured: the least-squares slope of their peak over
    the batch (the baseline's and each batch's that ran), None with fewer than two sizes."""
    points = [(t.batch, t.peak_bytes) for t in tries if t.outcome == "ok" and t.peak_bytes]
    if base_peak:
        points.append((base, base_peak))
    if len({b for b, _ in points}) < 2:
        return None
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_p = sum(p for _, p in points) / n
    cov = sum((b - mean_b) * (p - mean_p) for b, p in points)
    var = sum((b - mean_b) ** 2 for b, _ in points)
    return int(cov / var)
