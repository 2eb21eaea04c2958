"""A finding's saving and share put on the unprofiled step, the step the job really takes.

The checks read the profiled window, and the profiler slows the host: every op pays for its
record and every launch for CUPTI's callback, about 5x the step on a launch-bound H100 loop
(issue 35), while the device's kernels run as fast as without it. A share of the profiled
step then misranks: a host-side cost (an optimizer's launches) looks as big as the profiler
made it, a device-side one (the idle after a sync) as small as the inflated step makes it.

So each finding says what its saving is made of (``Finding.cost``), and ``price`` puts it on
the unprofiled step the capture measured after the window (the median of those steps, as
``profile.step_ms`` is the median of the window's):

- ``host``: host time in the window (an optimizer phase above its kernels, launch gaps):
  scaled by unprofiled step / the finding's profiled step, so its share is the window's;
- ``idle``: device idle (the idle after a sync, which the device measures): kept in ms, at
  most the unprofiled step's device idle (that step less the device's busy time in the
  window, which the profiler does not change). In a launch-bound loop the idle after a sync
  waits for the host's relaunch, which the profiler slows, while the window hides the sync's
  own wait for the backlog a faster host builds: opposite errors, so it is not scaled;
- ``device``: device time (kernels): kept in ms, at most the unprofiled step;
- ``unprofiled``: measured on unprofiled steps already (an A/B probe, the data wait over
  the headline's steps): kept, with the step it is a share of.

Without an unprofiled step (a trace alone, a script that ended in the window) every finding
stays on the profiled step, and says so. The ranking rule (doctor/finding.py) is unchanged:
the severity bands come from the new shares, then the saving.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchpace.doctor.finding import Finding, severity_for_share
from torchpace.doctor.profile import Profile

PROFILED = "the profiled step (no unprofiled step was measured)"


@dataclass(frozen=True)
class Basis:
    """The steps a finding's saving can be priced on, in ms."""

    profiled_step_ms: float  # the window's median step
    unprofiled_step_ms: float | None  # the median step after the window; None: not measured
    device_time_ms: float = 0.0  # the window's step less its device idle (0 on a CPU)
    source: str = "median of the unprofiled steps after the window"

    @property
    def unprofiled_idle_ms(self) -> float:
        """The device idle the unprofiled step leaves: its busy time is the window's."""
        if self.unprofiled_step_ms is None:
            return 0.0
        return max(0.0, self.unprofiled_step_ms - self.device_time_ms)


def basis_of(profile: Profile) -> Basis:
    """The profile's basis: its ``unprofiled_step_ms`` when given (a trace whose job was
    timed apart), else the capture's unprofiled steps (doctor/throughput.py), else none."""
    unprofiled_step_ms, source = profile.unprofiled_step_ms, "given"
    if unprofiled_step_ms is None:
        t = profile.throughput
        if t is not None and t.unprofiled and t.step_ms_median:
            unprofiled_step_ms, source = t.step_ms_median, Basis.source
    if unprofiled_step_ms is not None and unprofiled_step_ms <= 0:
        raise ValueError(f"the unprofiled step must be a positive time, not {unprofiled_step_ms}")
    m = profile.median
    device_time = max(0.0, profile.step_ms - m.gpu_idle_ms) if profile.has_gpu else 0.0
    return Basis(profile.step_ms, unprofiled_step_ms, device_time, source)


def price(findings: list[Finding], basis: Basis) -> list[Finding]:
    """Each finding's saving and step on the basis (in place), its severity derived anew
    where it came from the share; the findings, for chaining."""
    for f in findings:
        if f.ends_job or f.saving_ms is None:  # its cost is the job, or not estimated
            continue
        if f.cost == "unprofiled":
            f.basis = "measured on unprofiled steps"
            continue
        step_u = basis.unprofiled_step_ms
        if step_u is None or not f.step_ms:
            f.basis = PROFILED
            continue
        profiled = f.step_ms
        f.saving_ms = priced_ms(f.saving_ms, f.cost, profiled, basis)
        f.step_ms = step_u
        f.basis = _words(f.cost, profiled, step_u)
        f.notes.append(f"priced on the unprofiled step: {f.basis}")
        if f.severity_from_share:
            f.severity = severity_for_share(f.saving_share)
    return findings


def priced_ms(saving_ms: float, cost: str, profiled_step_ms: float, basis: Basis) -> float:
    """One saving of the profiled step, on the unprofiled one (the module's docstring)."""
    step_u = basis.unprofiled_step_ms
    if step_u is None:
        return saving_ms
    if cost == "host":
        return saving_ms * step_u / profiled_step_ms
    if cost == "idle":
        return min(saving_ms, basis.unprofiled_idle_ms)
    if cost == "device":
        return min(saving_ms, step_u)
    return saving_ms


def _words(cost: str, profiled: float, step_u: float) -> str:
    head = f"{step_u:.3g} ms (the profiled step {profiled:.3g} ms)"
    if cost == "host":
        return f"{head}; host time, scaled by {step_u / profiled:.2f} with the step"
    if cost == "idle":
        return f"{head}; device idle, kept in ms (at most the unprofiled step's idle)"
    return f"{head}; device time, kept in ms"
