"""The search's processes-per-node step (tune/processes.py) on scripted
trials: the real knob's plan on a 2-rank CPU job, each count screened and paired on top of
the combination, compared on the whole job's samples per second (every rank's samples per
step), never on time per step."""

from __future__ import annotations

import dataclasses

from test_search import LOSSES, FakeKnob, Machine, context, tuner
from test_search import fake_registry as fake_registry  # the fixture

from torchpace.facts.run import LoaderFacts
from torchpace.knobs import nproc_per_node
from torchpace.tune.result import KnobStatus
from torchpace.tune.trial import Outcome, TrialResult

BATCH = 32  # each rank's batch: the job's samples per step are BATCH x processes


def job_context(**kw):
    ctx = context(nproc_per_node=2, **kw)
    loader = LoaderFacts(location="train.py:9", num_workers=0, pin_memory=False,
                         persistent_workers=False, prefetch_factor=None, drop_last=False,
                         dataset_len=10_000, dataset_type="D", batch_size=BATCH,
                         batches_seen=10)  # fmt: skip
    return dataclasses.replace(ctx, facts=dataclasses.replace(ctx.facts, loaders=[loader]))


def job_machine(ms) -> tuple[Machine, object]:
    """Scripted trials of a 2-rank job (``ms``: config -> ms/step) whose samples per step
    are every rank's: BATCH x the configuration's processes."""
    machine = Machine(ms)

    def run(settings, config, label, out_dir):
        result = machine(settings, config, label, out_dir)
        result.samples_per_step = BATCH * config.get("nproc-per-node", 2)
        return result

    return machine, run


def at_one(ms_at_one: float):
    """2 ranks at 100 ms a step, 1 process at ``ms_at_one``."""
    _, run = job_machine(lambda c: ms_at_one if c.get("nproc-per-node") == 1 else 100.0)
    return run


def test_one_process_faster_in_samples_per_second_is_kept(monkeypatch, fake_registry):
    fake_registry.add(nproc_per_node.KNOB)
    # 1 process: 45 ms for 32 samples, against 100 ms for 64: 11% more samples a second
    result = tuner(monkeypatch, at_one(45.0), ctx=job_context(allow_batch_size=True)).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.KEPT and knob.value == 1, knob.reason
    assert "samples/s" in knob.reason and "global batch" in knob.reason
    assert result.best == {"nproc-per-node": 1}
    assert result.ladder[-1].label == "+ processes per node=1 (changes the global batch)"


def test_faster_per_step_but_fewer_samples_a_second_is_refused(monkeypatch, fake_registry):
    fake_registry.add(nproc_per_node.KNOB)
    # 60 ms a step is 40% less than 100, but 32 samples in it is 0.53 a ms against 0.64
    result = tuner(monkeypatch, at_one(60.0), ctx=job_context(allow_batch_size=True)).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.REJECTED and knob.reason.startswith("1 processes: ")
    assert result.best == {}


def test_tried_on_top_of_the_combination_with_the_launcher_threads(monkeypatch, fake_registry):
    """A kept thread count was chosen for each of 2 ranks: a trial at another count leaves
    it to the launcher (cores // processes threads a rank)."""
    fake_registry.add(FakeKnob("threads", [1]))
    fake_registry.add(FakeKnob("workers", [2]))
    fake_registry.add(nproc_per_node.KNOB)

    def ms(config):
        if config.get("nproc-per-node") == 1:
            return 30.0
        return 100.0 * (0.8 if "threads" in config else 1.0) * (0.8 if "workers" in config else 1)

    machine, run = job_machine(ms)
    result = tuner(monkeypatch, run, ctx=job_context(allow_batch_size=True)).run()
    tried = [c for c in machine.configs if "nproc-per-node" in c]
    assert tried and all(c == {"workers": 2, "nproc-per-node": 1} for c in tried), tried
    by = {k.knob: k for k in result.knobs}
    assert by["nproc-per-node"].status == KnobStatus.KEPT
    assert "threads per rank from the launcher" in by["nproc-per-node"].reason
    assert result.best == {"workers": 2, "nproc-per-node": 1}


def test_without_the_flag_or_on_one_rank_it_says_why(monkeypatch, fake_registry):
    fake_registry.add(nproc_per_node.KNOB)
    flagless = tuner(monkeypatch, at_one(45.0), ctx=job_context()).run()
    (knob,) = flagless.knobs
    assert knob.status == KnobStatus.NOT_TRIED
    assert "global batch" in knob.reason and "--allow-batch-size" in knob.reason
    one_rank = dataclasses.replace(job_context(allow_batch_size=True), nproc_per_node=1)
    (knob,) = tuner(monkeypatch, at_one(45.0), ctx=one_rank).run().knobs
    assert knob.status == KnobStatus.NOT_APPLICABLE and "one process" in knob.reason
    assert all(r.config == {} for r in flagless.trials)


def test_a_count_that_fails_is_refused_with_its_error(monkeypatch, fake_registry):
    fake_registry.add(nproc_per_node.KNOB)

    def run(settings, config, label, out_dir):
        if config:
            return TrialResult(label, dict(config), Outcome.CRASHED, error="x\nRuntimeError: y")
        return TrialResult(label, {}, Outcome.OK, step_ms=[100.0] * 5, losses=LOSSES,
                           samples_per_step=2 * BATCH)  # fmt: skip

    result = tuner(monkeypatch, run, ctx=job_context(allow_batch_size=True)).run()
    (knob,) = result.knobs
    assert knob.status == KnobStatus.REJECTED and "crashed" in knob.reason
