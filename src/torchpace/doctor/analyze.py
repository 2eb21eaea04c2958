"""From a trace and/or run facts to a diagnosis: the profile and its ranked findings."""

from __future__ import annotations

from dataclasses import dataclass

from torchpace.capture.outcome import exception_line
from torchpace.doctor.checks import gpu_idle, run_all
from torchpace.doctor.checks.out_of_memory import after_out_of_memory
from torchpace.doctor.disturbance import check_window
from torchpace.doctor.finding import Finding, rank
from torchpace.doctor.frameworks import in_framework_terms
from torchpace.doctor.pricing import basis_of, price
from torchpace.doctor.profile import Profile, build_profile
from torchpace.facts.run import RunFacts, Status
from torchpace.report.model import SpeedOfLightReport
from torchpace.report.window_model import WindowCheckReport
from torchpace.trace.model import TraceModel
from torchpace.trace.steps import derive_steps


@dataclass
class Diagnosis:
    profile: Profile
    findings: list[Finding]
    trace_path: str | None = None
    # was the profiled window disturbed by other work on the machine (doctor/disturbance.py)
    window_check: WindowCheckReport | None = None
    # the trace cut into the steps the profile measured (None: run facts only)
    model: TraceModel | None = None
    # FLOPs, MFU and the roofline (doctor/speed_of_light.py), set by with_speed_of_light
    speed_of_light: SpeedOfLightReport | None = None

    @property
    def healthy(self) -> bool:
        return not self.findings


def diagnose(
    model: TraceModel | None,
    facts: RunFacts | None = None,
    rank_wait_ms: list[float] | None = None,
    unprofiled_step_ms: float | None = None,
) -> Diagnosis:
    """``rank_wait_ms``: this rank's wait for the slowest rank in each step, from every
    rank's trace (doctor/ranks.py); the breakdown shows it apart from the collectives.
    ``unprofiled_step_ms``: the job's step timed without the profiler, for a trace whose
    run facts do not hold it; the findings are priced on it (doctor/pricing.py)."""
    # was the window disturbed: the run facts alone say (doctor/disturbance.py)
    window_check = check_window(facts)
    if model is not None and facts is not None:
        # A capture window starts at a step boundary; its steps end where the capture's did.
        per_step = max(1, round(facts.optimizer_steps_per_step or 1))
        steps = derive_steps(model, facts.step_source, per_step, starts_at_boundary=True)
        model = model.with_steps(steps)
    elif model is not None:
        model = model.with_steps(derive_steps(model))
    profile = build_profile(model, facts, rank_wait_ms)
    profile.unprofiled_step_ms = unprofiled_step_ms
    findings = []
    if profile.steps:
        found = gpu_idle.explain(profile, run_all(profile))
        findings = rank(price(found, basis_of(profile)))
    findings = in_framework_terms(findings, facts.framework if facts else None)
    if not profile.steps and facts is not None:
        findings = [no_step_finding(facts)]
    if facts is not None and facts.memory.oom is not None:  # it explains the end of the run
        findings = after_out_of_memory(profile, [f for f in findings if f.code != "TP901"])
    trace = str(model.path) if model is not None and model.path else None
    return Diagnosis(
        profile,
        findings,
        trace or (facts.trace_path if facts else None),
        window_check,
        model,
    )


def with_speed_of_light(d: Diagnosis) -> Diagnosis:
    """The diagnosis with its speed of light (the peak measured here, cached: under 2 s the
    first time on a machine); a failure to measure is a note, never a lost report."""
    from torchpace.doctor.speed_of_light import analyse, device_peak

    if not d.profile.steps:
        return d
    facts = d.profile.facts
    dtypes = set(facts.flops.flops_by_dtype) if facts is not None else set()
    try:
        peak, here = device_peak(d.model, d.profile, dtypes)
        d.speed_of_light = analyse(d.model, d.profile, peak, here)
        light = d.speed_of_light
        if here and light is not None and light.mfu is not None and light.mfu > 1.0:
            # the step beat the cached peak: that probe ran beside other work and read low;
            # probe once more (the cache keeps the best reading) before saying anything
            peak, here = device_peak(d.model, d.profile, dtypes, refresh=True)
            d.speed_of_light = analyse(d.model, d.profile, peak, here)
    except (RuntimeError, OSError, ImportError):
        d.speed_of_light = analyse(d.model, d.profile, None, False)
    return d


def no_step_finding(facts: RunFacts) -> Finding:
    why = facts.error or {
        Status.TIMEOUT: "no step came before the timeout",
        Status.SCRIPT_EXITED: "the script exited before its first profiled step",
        Status.SCRIPT_RAISED: "the script raised before its first profiled step",
        Status.INTERRUPTED: "the run was interrupted before its first profiled step",
    }.get(facts.status, "no step reached the profiled window")
    return Finding(
        "TP901",
        evidence={
            "status": facts.status,
            "steps_seen": len(facts.steps),
            "warmup": facts.warmup,
            "step_source": facts.step_source,
        },
        severity="high",
        ends_job=TIMED_OUT if facts.status == Status.TIMEOUT else None,
        detail=exception_line(why),
        fix=_no_step_fix(facts),
    )


# What a window that never completed means for the job: it hangs, or its steps are so slow
# that the job will not finish.
TIMED_OUT = "no step completed before the timeout: the job hangs or will not finish"

# How to make a loop's steps visible, for a script that ran but showed none.
STEP_FIX = (
    "a loop without an optimizer (evaluation, inference): --step-on dataloader; "
    "anything else: call torchpace.step() at the end of each step (--step-on manual); "
    "a short script: lower --warmup/--steps"
)


def _no_step_fix(facts: RunFacts) -> str:
    """A script that raised before any step has an error to fix, not a step to mark (a
    missing module, a missing data file: the step options would send the user nowhere)."""
    if facts.status == Status.SCRIPT_RAISED and not facts.steps:
        return "fix the error the script raised (its traceback is above), then run again"
    return STEP_FIX
