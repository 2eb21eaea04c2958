"""The kept configuration as `torchpace run` runs it (tune/run_check.py): the script as it
is against the script with the kept knobs, alternated, beside the trials' figure."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from torchpace.tune import run_check as rc
from torchpace.tune.fidelity import plain_run
from torchpace.tune.report import render, to_dict
from torchpace.tune.result import TuneResult
from torchpace.tune.run_check import RunCheck, check_under_run
from torchpace.tune.trial import Outcome, TrialResult, TrialSettings

SETTINGS = TrialSettings("train.py", [], warmup=1, steps=3)


def scripted(monkeypatch, plain_ms, tuned_ms):
    plain, tuned, calls = iter(plain_ms), iter(tuned_ms), []

    def run(settings, out_dir, knobs=None):
        calls.append(dict(knobs or {}))
        return next(tuned) if knobs else next(plain)

    monkeypatch.setattr(rc, "plain_run", run)
    return calls


def test_pairs_alternate_the_plain_script_and_the_kept_knobs(monkeypatch, tmp_path):
    calls = scripted(monkeypatch, [10.0, 10.4, 9.8], [8.0, 8.4, 8.1])
    check = check_under_run(SETTINGS, {"num-workers": 0}, tmp_path, 1.22)
    assert sorted(map(str, calls)) == ["{'num-workers': 0}"] * 3 + ["{}"] * 3
    assert check.speedup == pytest.approx(10.4 / 8.4, abs=0.001)  # the median pair
    assert not check.disagrees
    line = check.line()
    assert "as `torchpace run` runs it: 1.24x" in line and "the trials measured 1.22x" in line


def test_trials_that_did_not_time_what_run_runs_are_said(monkeypatch, tmp_path):
    """makemore: a workers=0 trial at 12.4-13.4 ms/step, `run` at 10.1-10.7, against a plain
    14-ms step: the trials' 1.09x lies below every pair by over 10%."""
    scripted(monkeypatch, [14.0, 14.2, 13.9], [10.1, 10.7, 10.4])
    check = check_under_run(SETTINGS, {"num-workers": 0}, tmp_path, 1.09)
    assert check.disagrees and "over 10% above it" in check.line()
    assert check.to_dict()["disagrees"] is True


def test_a_failed_run_ends_the_check_and_says_why(monkeypatch, tmp_path):
    scripted(monkeypatch, [10.0, "the plain run ended timeout: "], [8.0])
    check = check_under_run(SETTINGS, {"threads": 1}, tmp_path, 1.2)
    assert check.error and check.speedup == pytest.approx(1.25)
    assert "incomplete: the plain run ended timeout" in check.line()


def test_a_new_batch_size_is_not_checked(monkeypatch, tmp_path):
    calls = scripted(monkeypatch, [], [])
    check = check_under_run(SETTINGS, {"batch-size": 64}, tmp_path, 1.5)
    assert calls == [] and check.skipped and "not checked" in check.line()


def test_the_check_is_in_the_report_the_terminal_and_the_json(tmp_path):
    check = RunCheck([10.0, 10.0, 10.0], [8.0, 8.2, 7.9], trials_speedup=1.2)
    result = TuneResult(run_check=check.to_dict())
    report = to_dict(result, ["python", "train.py"], {}, SETTINGS)
    assert report["run_check"]["speedup"] == 1.25
    assert RunCheck.from_dict(report["run_check"]).line() == check.line()
    console = Console(record=True, width=300)
    render(result, console)
    assert "as `torchpace run` runs it: 1.25x over the script as it is" in console.export_text()


@pytest.mark.slow
def test_the_plain_mode_applies_the_knobs_as_run_does(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for i in range(50):\n"
        "    model(torch.randn(2, 4)).sum().backward()\n"
        "    opt.step()\n"
        "    assert torch.get_num_threads() == 1, torch.get_num_threads()\n"
    )
    settings = TrialSettings(str(script), [], warmup=2, steps=5, timeout_s=120)
    assert isinstance(plain_run(settings, tmp_path / "with", {"threads": 1}), float)
    if torch_threads() > 1:  # without the knob the script's own assertion fails
        failed = plain_run(settings, tmp_path / "without")
        assert isinstance(failed, str) and "script-raised" in failed, failed


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _tuner(left, trial_s):
    """A tuner whose clock has --time-budget 300 leave ``left`` s (None: no time budget),
    whose trials of the kept configuration each took ``trial_s``."""
    from torchpace.tune.search import Budget, Tuner

    budget = Budget(seconds=300.0) if left is not None else Budget()
    elapsed = 300.0 - (left or 0.0)
    tuner = Tuner(SETTINGS, None, Path("/nonexistent"), None, budget=budget,
                  clock=lambda: elapsed, started=0.0)  # fmt: skip
    for label in ("baseline", "num-workers=0", "num-workers=0 (pair 1)"):
        config = {} if label == "baseline" else {"num-workers": 0}
        tuner.ledger.trials.append(TrialResult(label, config, Outcome.OK, wall_s=trial_s))
    return tuner


class _Display:
    def __init__(self):
        self.lines = []

    def line(self, text):
        self.lines.append(text)


def test_the_check_runs_only_where_the_time_budget_holds_its_runs(monkeypatch, tmp_path):
    """A search that ended at 280 s of --time-budget 300 would have ended the tune at 340."""
    from torchpace.tune import session

    calls = scripted(monkeypatch, [10.0] * 3, [8.0] * 3)
    result = TuneResult(best={"num-workers": 0}, final_speedup=1.25)
    display = _Display()
    check = session._run_check(result, SETTINGS, tmp_path, display, _tuner(20.0, 10.0))
    assert not calls
    assert check["skipped"] == "--time-budget 300 s leaves 20 s, under its 6 runs' ~60 s"
    assert "not checked (--time-budget 300 s leaves 20 s" in display.lines[-1]
    check = session._run_check(result, SETTINGS, tmp_path, display, _tuner(None, 10.0))
    assert len(calls) == 6 and check["skipped"] is None  # no time budget: it runs
