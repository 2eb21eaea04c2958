"""TP401 tensor-accumulated-across-steps: Memory grows across steps."""

from __future__ import annotations

from torchpace.doctor.checks._data import _peak_and_capacity
from torchpace.doctor.checks._memory import KIB, input_shapes
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding, severity_for_share
from torchpace.doctor.profile import Growth, Profile


class MemoryGrowth(Check):
    """TP401: allocated memory at the end of each step rises steadily: something keeps
    tensors (often whole autograd graphs, via ``total += loss``) alive across steps.

    ## In a profile (torchpace doctor)

    The doctor fits a least-squares line through the bytes in use at the end of each profiled
    step: the allocator's exact totals from the trace's `[memory]` events (host and each CUDA
    device), else the CUDA allocated bytes per step recorded by the capture. Host RSS is shown
    but not fitted: inside the profiled window the profiler's own buffers make it grow every
    step. A steady loop ends every step at the same byte count; TP401 is reported when the line
    rises by at least 512 B per step, with r² ≥ 0.9 and a rise in at least 75% of the steps.
    With the device's capacity known, the evidence includes the steps left until it is full. No
    time saving is estimated: a leak costs memory until the run dies. It is high severity when
    the device's capacity is unknown (host memory) or when the growth fills the device within a
    training job's length (450k steps: it then ends the job and comes first); on a device that
    would outlast any job, its severity is the share of the device that 450k steps of the growth
    would fill (`long_job_pct_of_device` in the evidence; 25% high, 10% medium, less low, the
    same bands as a saving's share of the step): the H100's planted syncs loop grew 4 KiB a
    step, 2% of 80 GiB in such a job, and its TP401 had ranked above the syncs that cost that
    loop a fifth of each step.

    The finding names the line the growth comes from. Inside the script's process
    (`capture/memory.py`) the capture notes, with the user's line that made each: the
    activations autograd holds for backward (a saved-tensors hook), the model's outputs, and the
    tensors the user's own lines make with `.detach()`, `.clone()`, `.to()` and `.cpu()` (calls
    from library code are not noted). At each profiled step's end those still alive from that
    step or earlier are grouped by line (a storage noted several ways counts once, by its most
    specific line: the copy's, then the output's); the line whose bytes grow the most per step
    is the finding's location, with `kept_activations_kib_per_step` (a graph kept across steps:
    `history.append(out)`, the activations it holds) or `kept_copies_kib_per_step` (tensors kept
    without their graph: `kept.append(out.detach())`, `logits.detach().clone()`). A detached
    copy lets the graph go, not its own memory: the fix then is to keep the numbers needed
    (`.item()`, a running sum, a metric object), or to write the tensors out and drop them.
    Tested on `tests/planted/outputs_kept_in_list.py` (the model call's line) and
    `tests/planted/detached_outputs_kept.py` (the `kept.append(...)` line, with and without
    `.clone()`). Note that `total += loss` frees the saved activations at `backward()`: what
    stays alive per step is the graph's bookkeeping, which can be too small to see in a few
    steps; the linter finds that pattern in the source.

    A graph that no backward walks is not a leak: a GAN's critic step on `G(z).detach()` builds
    the generator's graph and drops it. The capture's saved-tensors hook holds each saved
    tensor detached (a node's own saved output, held with its `grad_fn`, made a cycle that only
    backward breaks: every such graph stayed alive while the hook was on, and TP401 said "high,
    memory grows" on a two-optimizer script whose live tensors stay flat). Tested on
    `tests/planted/two_optimizers_critic.py`: no growth, no TP401.
    """

    code = "TP401"

    # A steady step loop allocates the same at every step end; a line this straight
    # (r^2) through a rise in most steps is growth, not noise.
    MIN_R2 = 0.9
    MIN_RISING_SHARE = 0.75
    # Allocator totals (trace [memory] events, CUDA allocated bytes) are exact: a steady
    # loop ends every step at the same byte count, so even a small steady rise is a leak.
    MIN_BYTES_PER_STEP = 512
    # A leak that fills the device within this many steps ends the job: ImageNet's 90
    # epochs at batch 256 are ~450k steps, longer than most training jobs run.
    JOB_STEPS = 450_000

    def run(self, profile: Profile) -> list[Finding]:
        if len(input_shapes(profile)) > 1:
            return []  # the model's inputs change size: growth says nothing of a leak
        for g in profile.growth:
            if (
                g.bytes_per_step >= self.MIN_BYTES_PER_STEP
                and g.r2 >= self.MIN_R2
                and g.rising_share >= self.MIN_RISING_SHARE
            ):
                return [self._finding(profile, g)]
        return []

    def _finding(self, profile: Profile, g: Growth) -> Finding:
        site = leak_site(profile)
        evidence = {
            "growth_kib_per_step": r(g.bytes_per_step / KIB, 1),
            "fit_r2": r(g.r2, 3),
            "steps_fitted": g.steps,
            "allocated_first_mib": r(g.first / 2**20),
            "allocated_last_mib": r(g.last / 2**20),
            "measured_on": g.source,
        }
        _, capacity = _peak_and_capacity(profile)
        ends_job = None
        # Severity: high where the capacity is unknown (host memory) or the leak ends the
        # job; on a device that would outlast any job, the share of it that a long job's
        # growth takes (an H100 loop growing 4 KiB a step fills 2% of 79 GiB in 450k
        # steps: low, after the syncs that cost the same loop a fifth of each step)
        severity = "high"
        if capacity and "cuda" in g.source:
            left = max(0, int((capacity - g.last) / g.bytes_per_step))
            evidence["steps_until_full"] = left
            ends_job = _runs_out(profile, left)
            job_share = g.bytes_per_step * self.JOB_STEPS / capacity
            evidence["long_job_pct_of_device"] = r(100 * min(1.0, job_share), 1)
            if ends_job is None:
                severity = severity_for_share(job_share)
        where = ""
        if site is not None:
            location, per_step, kind = site
            if kind == "copies":
                evidence["kept_copies_kib_per_step"] = r(per_step / KIB, 1)
                where = (
                    f"; tensors made at {location} (.detach(), .clone(), .to(), .cpu()) are "
                    f"kept across steps, {per_step / KIB:.1f} KiB more each step"
                )
            else:
                evidence["kept_activations_kib_per_step"] = r(per_step / KIB, 1)
                where = (
                    f"; activations computed at {location} stay alive after backward, "
                    f"{per_step / KIB:.1f} KiB more each step"
                )
        return Finding(
            "TP401",
            evidence=evidence,
            severity=severity,
            location=site[0] if site else None,
            detail=f"memory grows {g.bytes_per_step / KIB:.1f} KiB every step ({g.source})" + where,
            fix=_LEAK_FIX_COPIES if site is not None and site[2] == "copies" else _LEAK_FIX,
            ends_job=ends_job,
            notes=[
                "a leak costs no time per step until memory runs out; one that fills the "
                "device within a training job's length ends the job and comes first"
                if ends_job
                else "a leak costs no time per step until memory runs out: ranked by the "
                "share of the device a job of 450k steps would fill"
                if "long_job_pct_of_device" in evidence
                else "a leak costs no time per step until memory runs out: ranked by severity"
            ],
        )


def _runs_out(profile: Profile, steps_left: int) -> str | None:
    """How the leak ends the job ("the job runs out of device memory at step ~84"), or None
    when the device would last longer than a training job runs (MemoryGrowth.JOB_STEPS)."""
    if steps_left > MemoryGrowth.JOB_STEPS:
        return None
    window = profile.facts.window if profile.facts else []
    if window:
        # index is 0-based: the last profiled step is step index + 1
        return f"the job runs out of device memory at step ~{window[-1].index + 1 + steps_left}"
    return f"the job runs out of device memory ~{steps_left} steps after the profiled ones"


_LEAK_FIX = (
    "accumulate plain numbers: total += loss.item() (or loss.detach()); do not keep outputs, "
    "losses or hidden states of past steps in lists or attributes"
)
_LEAK_FIX_COPIES = (
    "keep the numbers you need, not a tensor per step (.item(), a running sum, a metric "
    "object), or write the tensors out and drop them: .detach() lets the graph go, not the "
    "tensor's own memory"
)


def leak_site(profile: Profile) -> tuple[str, float, str] | None:
    """The user's line whose tensors, still alive at the steps' ends, grow the most per step,
    with its growth in bytes per step and what they are (SiteBytes.kind): activations of a
    graph kept across steps (`total += loss`, outputs kept in a list), or copies the line
    made (`kept.append(out.detach())`); None when no line's kept tensors grow."""
    steps = profile.facts.memory.steps if profile.facts else []
    if len(steps) < 2:
        return None
    first, last = steps[0], steps[-1]
    before = {s.location: s.bytes for s in first.kept_at_end}
    growth = {
        s.location: ((s.bytes - before.get(s.location, 0)) / (last.index - first.index), s.kind)
        for s in last.kept_at_end
        if s.location is not None
    }
    growing = [(loc, g, kind) for loc, (g, kind) in growth.items() if g > 0]
    return max(growing, key=lambda x: x[1]) if growing else None
