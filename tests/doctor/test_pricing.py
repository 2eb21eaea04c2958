"""Findings priced on the unprofiled step (doctor/pricing.py, issue 35 item 5): host time
scaled with the step, device idle and device time kept in ms, probe figures as measured; the
ranking rule (severity from the share, then the saving) on the priced figures."""

import pytest
from doctor_fakes import ProbeResult, StepPhase, StepRecord, facts, profile

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.checks import compute, syncs
from torchpace.doctor.finding import Finding, rank
from torchpace.doctor.pricing import PROFILED, Basis, basis_of, price, priced_ms
from torchpace.facts.run import OptimizerFacts
from torchpace.trace import load_trace

H100 = {"has_gpu": True, "capability": (9, 0)}
# a profiled step of 50 ms in which the device is busy 5 (idle 45): the job's own is 10 ms
BASIS = Basis(profiled_step_ms=50.0, unprofiled_step_ms=10.0, device_time_ms=5.0)


def test_host_time_scales_with_the_step_and_keeps_its_share():
    assert priced_ms(20.0, "host", 50.0, BASIS) == pytest.approx(4.0)
    f = price([Finding("TP313", {}, "fix", saving_ms=20.0, step_ms=50.0)], BASIS)[0]
    assert (f.saving_ms, f.step_ms) == (pytest.approx(4.0), 10.0)
    assert f.saving_share == pytest.approx(0.4) and f.severity == "high"
    assert "scaled by 0.20" in f.basis and f.notes[-1].endswith(f.basis)


def test_device_idle_is_kept_and_capped_at_the_unprofiled_idle():
    # the unprofiled step leaves 10 - 5 = 5 ms of device idle
    assert BASIS.unprofiled_idle_ms == pytest.approx(5.0)
    assert priced_ms(3.0, "idle", 50.0, BASIS) == 3.0
    assert priced_ms(8.0, "idle", 50.0, BASIS) == pytest.approx(5.0)
    # a sync finding low on the profiled step (6%) is high on the job's (30%)
    f = price([Finding("TP201", {}, "fix", saving_ms=3.0, step_ms=50.0, cost="idle")], BASIS)[0]
    assert f.saving_ms == 3.0 and f.severity == "high" and "device idle" in f.basis


def test_device_time_is_kept_up_to_the_step_and_probe_figures_as_measured():
    assert priced_ms(4.0, "device", 50.0, BASIS) == 4.0
    assert priced_ms(14.0, "device", 50.0, BASIS) == 10.0
    probed = Finding("TP304", {}, "fix", saving_ms=2.0, step_ms=9.0, cost="unprofiled")
    (f,) = price([probed], BASIS)
    assert (f.saving_ms, f.step_ms, f.basis) == (2.0, 9.0, "measured on unprofiled steps")


def test_an_explicit_severity_stays_and_what_has_no_saving_is_left_alone():
    fixed = Finding("TP307", {}, "fix", saving_ms=20.0, step_ms=50.0, severity="low")
    unpriced = Finding("TP310", {}, "fix", step_ms=50.0, severity="medium")
    ends = Finding("TP401", {}, "fix", saving_ms=1.0, step_ms=50.0, ends_job="runs out")
    price([fixed, unpriced, ends], BASIS)
    assert fixed.severity == "low" and fixed.saving_ms == pytest.approx(4.0)
    assert (unpriced.step_ms, unpriced.basis, unpriced.notes) == (50.0, None, [])
    assert (ends.step_ms, ends.basis, ends.severity) == (50.0, None, "high")


def test_without_an_unprofiled_step_nothing_moves_and_the_basis_says_so():
    none = Basis(50.0, None)
    f = Finding("TP313", {}, "fix", saving_ms=20.0, step_ms=50.0)
    price([f], none)
    assert (f.saving_ms, f.step_ms, f.basis, f.notes) == (20.0, 50.0, PROFILED, [])
    assert priced_ms(20.0, "idle", 50.0, none) == 20.0


def test_a_cost_side_that_does_not_exist_is_refused():
    with pytest.raises(ValueError, match="cost 'kernels' is not one of"):
        Finding("TP313", {}, "fix", cost="kernels")


def _unprofiled(step_ms: float) -> list[StepRecord]:
    window = [StepRecord(i, 50.0, 0.0, True, phase=StepPhase.WINDOW) for i in range(5)]
    after = [StepRecord(5 + i, step_ms, 0.0, False, phase=StepPhase.REFERENCE) for i in range(10)]
    return window + after


def test_the_basis_is_the_capture_unprofiled_median_unless_one_is_given():
    p = profile({"wall_ms": 50.0, "gpu_idle_ms": 45.0}, facts(steps=_unprofiled(10.0)), **H100)
    b = basis_of(p)
    assert (b.profiled_step_ms, b.unprofiled_step_ms, b.device_time_ms) == (50.0, 10.0, 5.0)
    assert "unprofiled steps" in b.source
    p.unprofiled_step_ms = 12.0
    assert basis_of(p).unprofiled_step_ms == 12.0 and basis_of(p).source == "given"
    p.unprofiled_step_ms = -1.0
    with pytest.raises(ValueError, match="positive time"):
        basis_of(p)
    assert basis_of(profile({"wall_ms": 50.0})).unprofiled_step_ms is None


# The H100 syncs loop of issue 35, by its figures: a launch-bound step that CUPTI made 5x
# longer (70 ms profiled, 14 ms by itself), its device busy 4 ms; five syncs leave 3 ms of
# device idle after them; a foreach Adam whose phase is 21 ms of host time on 1 ms of kernels.
SYNC_LOOP = {"wall_ms": 70.0, "gpu_idle_ms": 66.0, "gpu_busy_ms": 4.0, "syncs": 5.0,
             "sync_wait_ms": 0.03, "idle_sync_ms": 3.0, "optimizer_ms": 21.0,
             "optimizer_kernels": 60.0, "optimizer_kernel_ms": 1.0}  # fmt: skip


def _sync_loop(step_ms: float, probes=()):
    run = facts(steps=_unprofiled(step_ms), probes=probes)
    run.optimizer_details = [OptimizerFacts("Adam", "train.py:30", 10_000, None, None)]
    return profile(SYNC_LOOP, run, **H100)


def _ranked(p):
    found = syncs.run(p) + [f for f in compute.run(p) if f.code == "TP313"]
    return rank(price(found, basis_of(p)))


def test_the_syncs_outrank_the_optimizer_once_priced_on_the_unprofiled_step():
    # on the profiled step (no unprofiled one): TP313 20 ms (29%, high) above TP201 (4%)
    p = _sync_loop(14.0)
    p.facts.steps = p.facts.steps[:5]
    p.throughput = None
    assert [f.code for f in _ranked(p)] == ["TP313", "TP201"]
    # on the 14 ms step: TP313 keeps its 29% share, 4.0 ms; TP201 keeps its 3 ms, 21%
    sync, opt = sorted(_ranked(_sync_loop(14.0)), key=lambda f: f.code)
    assert sync.saving_ms == pytest.approx(3.0) and opt.saving_ms == pytest.approx(20 * 0.2)
    # measured by the probe: fused saves 1.67 ms of 14 (12%): the syncs (21%) come first
    probe = ProbeResult("fused-optimizer", 14.0, 12.33, 3)
    first, second = _ranked(_sync_loop(14.0, probes=[probe]))
    assert (first.code, second.code) == ("TP201", "TP313")
    assert second.saving_ms == pytest.approx(1.67) and second.basis.startswith("measured")
    assert (first.severity, second.severity) == ("medium", "medium")


def test_a_sync_cost_below_the_floors_of_the_profiled_step_is_reported_on_the_job():
    """0.9 ms of idle after the syncs: 1.3% of the 70 ms profiled step, under the 2% floor;
    6.4% of the 14 ms the job takes, a finding."""
    loop = SYNC_LOOP | {"idle_sync_ms": 0.9}
    run = facts(steps=_unprofiled(14.0))
    assert syncs.run(profile(loop, **H100)) == []
    (f,) = syncs.run(profile(loop, run, **H100))
    assert f.code == "TP201"


def test_a_probe_that_measured_no_gain_leaves_no_optimizer_finding():
    probe = ProbeResult("fused-optimizer", 14.0, 13.98, 3)
    assert [f for f in compute.run(_sync_loop(14.0, [probe])) if f.code == "TP313"] == []


def test_dcgan_five_syncs_rank_by_the_priced_figures(shared_traces):
    """pytorch/examples dcgan on an H100 (launch-bound, five .item() a step, two foreach
    Adams): on its 24.9 ms profiled step TP313 (4.15 ms, 17%) ranks above TP201 (2.3 ms,
    9%). Given an unprofiled step, TP201 keeps its ms of device idle and TP313 its share:
    at 8 ms TP201 is 29% (high) and comes first; at 24 ms (no inflation) it stays below."""
    trace = load_trace(shared_traces / "h100_dcgan.json.gz")
    before = diagnose(trace)
    codes = [f.code for f in before.findings]
    assert codes.index("TP313") < codes.index("TP201")
    sync_ms = next(f.saving_ms for f in before.findings if f.code == "TP201")
    opt_ms = next(f.saving_ms for f in before.findings if f.code == "TP313")
    after = diagnose(trace, unprofiled_step_ms=8.0)
    by_code = {f.code: f for f in after.findings}
    assert by_code["TP201"].saving_ms == pytest.approx(sync_ms)
    assert by_code["TP313"].saving_ms == pytest.approx(opt_ms * 8.0 / before.profile.step_ms)
    assert by_code["TP201"].severity == "high" and after.findings[0].code == "TP201"
    assert all(f.step_ms == 8.0 for f in after.findings if f.step_ms)
    same = [f.code for f in diagnose(trace, unprofiled_step_ms=24.0).findings]
    assert same.index("TP313") < same.index("TP201")


def test_the_report_says_which_basis_each_finding_used():
    from torchpace.doctor.result import reported
    from torchpace.report.model import ReportedFinding

    f = price([Finding("TP201", {}, "fix", saving_ms=3.0, step_ms=50.0, cost="idle")], BASIS)[0]
    d = reported(f).to_dict()
    assert d["basis"] == f.basis and "device idle" in d["basis"] and d["saving_pct"] == 30.0
    assert ReportedFinding.from_dict(d).basis == f.basis
    assert "cost" not in d and "severity_from_share" not in f.to_dict()
