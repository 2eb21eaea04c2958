"""tune's ladder in units of the speed of light (tune/speed_of_light.py)."""

import pytest

from torchpace.facts.flops import FlopFacts, OpWork
from torchpace.facts.run import RunFacts, Status
from torchpace.report.roofline import tune_lines
from torchpace.tune import speed_of_light as sol_module
from torchpace.tune.result import Rung, TuneResult

PEAK = 100e9


def facts(counted: bool = True, samples: int | None = 32) -> RunFacts:
    f = RunFacts([], "optimizer", [], 1.0, 1, 3, Status.COMPLETE)
    ops = [OpWork("aten::mm", 3, 1e9, 2e9, 10**6, True, "float32")]
    f.flops = FlopFacts(counted=counted, samples=samples, ops=ops if counted else [])
    return f


def rung(label, ms, samples_per_s, config=None):
    return Rung(label, config or {}, ms, samples_per_s, 1.0, None, False)


@pytest.fixture(autouse=True)
def fixed_peak(monkeypatch):
    import torchpace.doctor.speed_of_light as doctor_sol

    monkeypatch.setattr(doctor_sol, "device_peak_for_facts", lambda f: (PEAK, "measured here"))


def test_each_rung_is_a_fraction_of_the_peak_per_sample():
    result = TuneResult()
    result.ladder = [rung("baseline", 300.0, 100.0), rung("+ threads", 150.0, 200.0)]
    sol = sol_module.ladder_speed_of_light(facts(), result)
    # 3 GFLOP for 32 samples: 100 samples/s is 9.4 GFLOP/s, 9.4% of 100 GFLOP/s
    assert [r["fraction"] for r in sol["rungs"]] == [pytest.approx(0.0938, abs=1e-4),
                                                    pytest.approx(0.1875, abs=1e-4)]  # fmt: skip
    assert sol["final_fraction"] == sol["rungs"][-1]["fraction"]
    assert sol["headroom"] == pytest.approx(1 - sol["final_fraction"])
    assert sol["ideal_ms"] == pytest.approx(30.0)
    assert any("after tune" in line for line in tune_lines(sol))


def test_without_samples_a_new_batch_size_has_no_fraction():
    result = TuneResult()
    result.ladder = [
        rung("baseline", 300.0, None),
        rung("+ batch-size 64", 500.0, None, {"batch-size": 64}),
    ]
    sol = sol_module.ladder_speed_of_light(facts(samples=None), result)
    assert sol["rungs"][0]["fraction"] == pytest.approx(0.1)  # 3 GFLOP in 0.3 s
    assert sol["rungs"][1]["fraction"] is None


def test_no_counted_step_no_speed_of_light():
    result = TuneResult()
    result.ladder = [rung("baseline", 300.0, 100.0)]
    assert sol_module.ladder_speed_of_light(facts(counted=False), result) is None
    assert tune_lines(None) == []


def test_the_peak_is_measured_during_the_tune_and_writing_the_outputs_measures_nothing(
    monkeypatch, tmp_path, capsys
):
    """The session measures the peak (or reads its cache) before any output is written;
    write_outputs only shows and writes the result's speed_of_light."""
    import json

    import torchpace.doctor.speed_of_light as doctor_sol
    from torchpace.tune import session
    from torchpace.tune.options import TuneOptions
    from torchpace.tune.output import write_outputs
    from torchpace.tune.trial import TrialSettings

    result = TuneResult()
    result.ladder = [rung("baseline", 300.0, 100.0)]
    result.speed_of_light = session._speed_of_light(facts(), result)
    assert result.speed_of_light["peak_source"] == "measured here"

    def no_measuring(*args, **kw):
        raise AssertionError("writing the outputs measured the peak")

    monkeypatch.setattr(doctor_sol, "device_peak_for_facts", no_measuring)
    monkeypatch.chdir(tmp_path)
    options = TuneOptions(target="train.py", quiet=True)
    write_outputs(result, options, TrialSettings("train.py", []), tmp_path, facts())
    written = json.loads((tmp_path / "tune_report.json").read_text())
    assert written["speed_of_light"] == result.speed_of_light
    assert "speed of light" in capsys.readouterr().out


def test_a_peak_that_cannot_be_measured_leaves_the_tune_standing(monkeypatch, capsys):
    import torchpace.doctor.speed_of_light as doctor_sol
    from torchpace.tune import session

    def broken(*args, **kw):
        raise RuntimeError("no device")

    monkeypatch.setattr(doctor_sol, "device_peak_for_facts", broken)
    result = TuneResult()
    result.ladder = [rung("baseline", 300.0, 100.0)]
    assert session._speed_of_light(facts(), result) is None
    assert "the peak could not be measured (no device)" in capsys.readouterr().err
