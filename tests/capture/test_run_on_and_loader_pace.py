"""Two things a trial learns beside its timed steps: where the script ends by itself (the
cold run runs on: the job a one-time cost must repay) and how fast its loader's workers
make batches (the pace that caps the compute row: tune/rows.py)."""

from __future__ import annotations

import textwrap
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from torchpace.capture.loader_period import LoaderPeriod, period_ms
from torchpace.capture.runner import CaptureSpec, capture_script
from torchpace.capture.spec import Mode
from torchpace.facts.run import Status

LOOP = """
import sys, time
import torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(int(sys.argv[1])):
    m(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
time.sleep(float(sys.argv[2]))  # after training: an evaluation with no steps
"""


def _trial(tmp_path, steps: int, after_s: float, run_on_s: float):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(LOOP))
    out = tmp_path / "out"
    out.mkdir()
    spec = CaptureSpec(str(script), [str(steps), str(after_s)], out, mode=Mode.TIMING,
                       warmup=2, steps=5, run_on_s=run_on_s, timeout_s=60)  # fmt: skip
    started = time.perf_counter()
    captured = capture_script(spec)
    return captured.facts, time.perf_counter() - started


def test_a_script_that_ends_during_the_run_on_gives_its_length(tmp_path):
    facts, _ = _trial(tmp_path, steps=40, after_s=0, run_on_s=20)
    assert facts.status == Status.COMPLETE, facts.error
    assert facts.run_on is not None and facts.run_on.ended and facts.run_on.steps == 40
    assert len([s for s in facts.steps if s.phase == "measured"]) == 5  # only those timed


def test_a_script_that_runs_past_the_run_on_is_stopped_there(tmp_path):
    facts, _ = _trial(tmp_path, steps=10**9, after_s=0, run_on_s=1.0)
    assert facts.status == Status.COMPLETE, facts.error
    assert facts.run_on is not None and not facts.run_on.ended
    assert facts.run_on.steps > 7 and facts.run_on.seconds >= 1.0


def test_a_script_that_runs_on_without_steps_is_ended_by_the_timer(tmp_path):
    """After its last step the script sleeps 60 s (an evaluation): the run-on's timer ends
    it; the trial stands, and its length is not known (it did not end by itself)."""
    facts, took = _trial(tmp_path, steps=20, after_s=60, run_on_s=1.0)
    assert facts.status == Status.COMPLETE, facts.error
    assert facts.run_on is not None and not facts.run_on.ended and facts.run_on.steps == 20
    assert took < 30


def test_without_a_run_on_the_trial_stops_at_its_timed_steps(tmp_path):
    facts, _ = _trial(tmp_path, steps=10**9, after_s=0, run_on_s=0)
    assert facts.status == Status.COMPLETE and facts.run_on is None


class Slow(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(4)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_loader_pace_is_a_batch_s_fetch_time_over_the_workers(monkeypatch, workers):
    """Batches of 5 items at 2 ms each: about 10 ms a batch in a worker, and the pool hands
    them out every 10 / workers ms. Fetches in the main process (no workers) are in the
    step's own wait, and give no pace."""
    from torch.utils.data._utils import fetch

    for fetcher in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        monkeypatch.setattr(fetcher, "fetch", fetcher.fetch)  # put back after the test
    pace = LoaderPeriod()
    pace.install()
    loader = DataLoader(Slow(), batch_size=5, num_workers=workers, multiprocessing_context="fork")
    batches = iter(loader)
    next(batches)
    before = pace.totals()
    for _ in range(12):
        next(batches)
    ms, used = period_ms(before, pace.totals())
    assert used == workers
    assert 10 / workers <= ms < 3 * 10 / workers, ms
    batches._shutdown_workers()  # no worker prefetching beside the next check
    main = iter(DataLoader(Slow(), batch_size=5))
    before = pace.totals()
    next(main)
    assert period_ms(before, pace.totals()) == (None, 0)


SLOW_LOADER = """
import time
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.zeros(4)

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Slow(), batch_size=5, num_workers=1, multiprocessing_context="fork")
for batch in loader:
    model(batch).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_switched_trial_s_loader_pace_is_its_knob_s_arm(tmp_path):
    """Two workers switched against the script's one: ~20 ms a batch in a worker, handed out
    every ~10 ms by two. The trial's pace is the knob's blocks' alone (the rows under a rung
    decided in blocks are capped by it); read over both arms it would be ~15 ms."""
    from torchpace.tune.trial import from_facts

    script = tmp_path / "train.py"
    script.write_text(SLOW_LOADER)
    out = tmp_path / "out"
    out.mkdir()
    spec = CaptureSpec(str(script), [], out, mode=Mode.TIMING, knobs={"num-workers": 2},
                       switch="num-workers", warmup=2, steps=32, seed=0,
                       timeout_s=120)  # fmt: skip
    facts = capture_script(spec).facts
    assert facts.status == Status.COMPLETE, facts.error
    assert facts.switch_note is None, facts.switch_note
    trial = from_facts(facts, "num-workers", {"num-workers": 2})
    assert trial.switched
    assert facts.loader_workers == 2
    assert 20 / 2 <= trial.loader_period_ms < 0.75 * 20, trial.loader_period_ms


def test_each_arm_of_a_switched_trial_has_its_own_loader_pace(tmp_path):
    """Two workers and four, arms of one process beside the script's one: ~20 ms a batch in
    a worker, handed out every ~10 ms by two and ~5 by four. Each arm's trial reads its own
    blocks' pace (the rows under a further value's arm are capped by it), and the script's
    own setting reads one worker's ~20 ms."""
    from torchpace.tune.trial import from_facts

    script = tmp_path / "train.py"
    script.write_text(SLOW_LOADER)
    out = tmp_path / "out"
    out.mkdir()
    spec = CaptureSpec(str(script), [], out, mode=Mode.TIMING, knobs={"num-workers": 2},
                       switch="num-workers", arms=[["num-workers", 2], ["num-workers", 4]],
                       warmup=2, steps=48, seed=0, timeout_s=180)  # fmt: skip
    facts = capture_script(spec).facts
    assert facts.status == Status.COMPLETE, facts.error
    assert facts.switch_note is None, facts.switch_note
    two = from_facts(facts, "num-workers=2", {"num-workers": 2}, arm=1)
    four = from_facts(facts, "num-workers=4", {"num-workers": 4}, arm=2)
    assert two.switched and four.switched
    script_own = facts.loader_period_by_arm[0]
    assert script_own >= 0.75 * 20, facts.loader_period_by_arm
    assert 20 / 2 <= two.loader_period_ms < 0.75 * 20, facts.loader_period_by_arm
    assert four.loader_period_ms < 0.75 * two.loader_period_ms, facts.loader_period_by_arm
