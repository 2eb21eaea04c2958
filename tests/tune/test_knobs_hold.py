"""Knobs that hold (issue 22, item 2): a knob's setting is checked inside the trial at the
timed steps (Knob.check); where the script undoes it later (its own set_num_threads(32),
set_detect_anomaly(True)), the knob keeps its value and records the script's line, or the
verdict is "could not apply", never "measured, rejected"."""

import dataclasses

import pytest

from torchpace.capture.runner import capture_script
from torchpace.capture.spec import CaptureSpec, Mode
from torchpace.knobs import get
from torchpace.tune.diff import source_diff
from torchpace.tune.trial import from_facts

OVERRIDES = """
import torch
torch.set_num_threads(7)
torch.autograd.set_detect_anomaly(True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, foreach=False)
x = torch.randn(8, 4)
for step in range(20):
    print("threads", torch.get_num_threads(), "anomaly", torch.is_anomaly_enabled())
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def timed(tmp_path, knobs):
    script = tmp_path / "train.py"
    script.write_text(OVERRIDES)
    out = tmp_path / "run"
    out.mkdir()
    spec = CaptureSpec(str(script), [], out, mode=Mode.TIMING, knobs=knobs,
                       warmup=1, steps=2, record_loss=True, timeout_s=240)  # fmt: skip
    return capture_script(spec, output=tmp_path / "output.log").facts


@pytest.mark.slow
def test_threads_and_anomaly_hold_against_the_scripts_own_calls(tmp_path):
    facts = timed(tmp_path, {"threads": 1, "anomaly-detection-off": True})
    assert facts.status == "complete", facts.error
    records = {r.name: r for r in facts.knobs}
    assert records["threads"].holds is True
    assert records["anomaly-detection-off"].holds is True
    # the script's own lines are named: the source edit must change them
    # (the script's path is relative to the working folder when short, else absolute)
    (threads,) = records["threads"].overridden_at
    assert threads.endswith("train.py:3: torch.set_num_threads(7) kept at 1")
    (anomaly,) = records["anomaly-detection-off"].overridden_at
    assert anomaly.endswith("train.py:4: anomaly detection kept off")
    log = (tmp_path / "output.log").read_text()
    assert "threads 1 anomaly False" in log and "threads 7" not in log
    trial = from_facts(facts, "threads=1", {"threads": 1})
    assert trial.not_held == {}
    assert trial.overridden_at["threads"] == [threads]


@pytest.mark.slow
def test_a_knob_that_did_not_take_effect_could_not_apply(tmp_path):
    """The script sets foreach itself: fused is left alone, and the trial says so."""
    facts = timed(tmp_path, {"fused-optimizer": "fused"})
    assert facts.status == "complete", facts.error
    (record,) = facts.knobs
    assert record.holds is False
    assert "no optimizer runs with fused=True at the timed steps" in record.not_held
    assert "train.py:6: left alone (the script sets fused/foreach)" in record.not_held
    assert record.not_held.startswith("no optimizer runs")
    trial = from_facts(facts, "optimizer fused=True", {"fused-optimizer": "fused"})
    assert trial.not_held["fused-optimizer"] == record.not_held


def test_the_source_edit_changes_the_scripts_own_calls(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(OVERRIDES)
    edits = {
        "threads": get("threads").source_edits(2),
        "anomaly-detection-off": get("anomaly-detection-off").source_edits(True),
    }
    result = source_diff(edits, root=tmp_path, default_file="train.py")
    assert result.problems == []
    (change,) = result.files
    new = change.new.decode()
    assert "torch.set_num_threads(2)\n" in new and "set_num_threads(7)" not in new
    assert "torch.autograd.set_detect_anomaly(False)\n" in new
    assert new.count("set_num_threads") == 1  # edited in place, not added again


def test_threads_is_inserted_after_the_imports_where_the_script_sets_none(tmp_path):
    (tmp_path / "train.py").write_text("import torch\n\nprint(1)\n")
    result = source_diff({"threads": get("threads").source_edits(2)}, tmp_path, "train.py")
    (change,) = result.files
    assert change.new.decode() == "import torch\ntorch.set_num_threads(2)\n\nprint(1)\n"


LOADER_PAIR = """
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
evaluation = DataLoader(data, batch_size=16, num_workers=0)
with torch.no_grad():
    for x, y in evaluation:
        model(x)
train = DataLoader(data, batch_size=8, num_workers=4)
for epoch in range(3):
    for x, y in train:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
print("workers", {"train": train.num_workers, "evaluation": evaluation.num_workers})
"""


@pytest.mark.slow
def test_a_loader_pair_gets_candidates_for_the_train_loader_only(tmp_path):
    """Train loader with 4 workers, evaluation loader with 0, on 2 cores: the plan asks the
    train loader (0 among its candidates) and leaves the evaluation loader alone; a value
    for the train loader's line changes that loader only."""
    from knob_fakes import CPU_2, ctx

    script = tmp_path / "train.py"
    script.write_text(LOADER_PAIR)
    out = tmp_path / "run"
    out.mkdir()
    spec = CaptureSpec(str(script), [], out, mode=Mode.TIMING, warmup=1, steps=2,
                       timeout_s=240, continue_after=True)  # fmt: skip
    facts = capture_script(spec, output=tmp_path / "plain.log").facts
    assert facts.status == "complete", facts.error
    evaluation, train = facts.loaders
    assert (evaluation.batches_timed, train.num_workers) == (0, 4) and train.batches_timed > 0
    plan = get("num-workers").plan(ctx(facts, cpu=CPU_2))
    assert {train.location: 0} in plan.values
    assert all(list(v) == [train.location] for v in plan.values)

    out2 = tmp_path / "run2"
    out2.mkdir()
    spec = dataclasses.replace(spec, out_dir=out2, knobs={"num-workers": {train.location: 0}})
    capture_script(spec, output=tmp_path / "tuned.log")
    assert "workers {'train': 0, 'evaluation': 0}" in (tmp_path / "tuned.log").read_text()
    assert "workers {'train': 4, 'evaluation': 0}" in (tmp_path / "plain.log").read_text()


def test_process_wide_settings_the_script_undoes_are_named(monkeypatch):
    """cudnn.benchmark and the matmul precision: the script's own later setting is seen."""
    import torch

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    assert "the script sets it itself" in get("cudnn-benchmark").check(True, None)
    assert get("cudnn-benchmark").check(False, None) is None
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert "'highest' at the timed steps" in get("matmul-precision").check("high", None)
        torch.set_float32_matmul_precision("high")
        assert get("matmul-precision").check("high", None) is None
    finally:
        torch.set_float32_matmul_precision(before)
