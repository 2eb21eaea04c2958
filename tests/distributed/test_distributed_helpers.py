"""torchpace.distributed: one real 2-rank gloo job (helpers_job.py, started by torchrun)
checked from every side, and each helper's single-process behaviour."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import PYTHON, ROOT
from torch import nn

import torchpace.distributed as tpd

JOB = Path(__file__).with_name("helpers_job.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """The job runs once for all the tests that read it (a torchrun start costs seconds)."""
    out = tmp_path_factory.mktemp("helpers")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.pop("TORCHPACE_LAUNCH_PLAN", None)
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(JOB),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.distributed
@pytest.mark.slow
def test_accumulation_all_reduces_once_per_step_with_one_big_batch_gradients(ranks):
    for r in ranks:
        assert r["world"] == 2
        assert r["accumulate_allreduces"] == 1 and r["optimizer_steps"] == 1
        assert r["no_no_sync_allreduces"] == 4  # one per micro-step without no_sync
        assert r["grad_max_diff"] < 1e-6


@pytest.mark.distributed
@pytest.mark.slow
def test_wrap_makes_ddp_and_keeps_batchnorm_on_cpu_with_a_warning(ranks):
    for r in ranks:
        assert r["wrap_type"] == "DistributedDataParallel"
        assert r["wrap_bn"] == "BatchNorm1d" and "SyncBatchNorm runs only on" in r["wrap_warning"]
        assert r["find_unused"] is False


@pytest.mark.distributed
@pytest.mark.slow
def test_exact_evaluation_sees_every_sample_once(ranks):
    single = [2.0 * i for i in range(11)]  # what one process computes over the dataset
    for r in ranks:
        assert r["eval_gathered"] == single
        assert sorted(r["iterable_gathered"]) == list(range(11))


@pytest.mark.distributed
@pytest.mark.slow
def test_seeds_differ_per_rank_and_per_worker(ranks):
    assert [r["seed"] for r in ranks] == [5, 6]
    assert ranks[0]["rand"] != ranks[1]["rand"]
    assert ranks[0]["worker_draws"] != ranks[1]["worker_draws"]


@pytest.mark.distributed
@pytest.mark.slow
def test_rank_zero_work_and_the_atomic_checkpoint(ranks):
    assert [r["rank_zero_only"] for r in ranks] == ["ran", None]
    assert all(r["found_prepared"] for r in ranks)
    assert [r["wrote_checkpoint"] for r in ranks] == [True, False]
    assert all(r["checkpoint"] == [0, 1, 2, 3] for r in ranks)


@pytest.mark.distributed
@pytest.mark.slow
def test_bucketed_batches_are_disjoint_and_in_step_across_ranks(ranks):
    a, b = (r["bucket_batches"] for r in ranks)
    assert len(a) == len(b) > 0
    seen = [i for batch in a + b for i in batch]
    assert len(seen) == len(set(seen))


# -- single process: the same calls, no process group --------------------------------------


def test_single_process_init_wrap_and_gather_are_no_ops(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    device = tpd.init()
    assert not tpd.is_distributed() and tpd.rank() == 0 and tpd.world_size() == 1
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    assert tpd.wrap(model, device) is model
    assert tpd.gather_for_eval(torch.arange(5), 3).tolist() == [0, 1, 2]
    tpd.cleanup()


def test_accumulator_steps_on_the_last_micro_step_of_each_group_and_of_the_epoch():
    model = nn.Linear(2, 1)
    acc = tpd.accumulate(model, micro_steps=3, total=7)
    flags = []
    for _ in range(7):
        with acc:
            acc.backward(model(torch.ones(1, 2)).sum())
        flags.append(acc.should_step)
    assert flags == [False, False, True, False, False, True, True]
    assert model.weight.grad.flatten().tolist() == pytest.approx([7 / 3, 7 / 3])
    with pytest.raises(ValueError, match="micro_steps must be at least 1"):
        tpd.accumulate(model, 0)


def test_sequential_sampler_gives_contiguous_shards_padded_at_the_end():
    data = list(range(10))
    shards = [list(tpd.SequentialDistributedSampler(data, 3, r)) for r in range(3)]
    assert shards == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 9, 9]]
    with pytest.raises(ValueError, match="rank 3 is not in a world of 3"):
        tpd.SequentialDistributedSampler(data, 3, 3)
    with pytest.raises(ValueError, match="fewer than the 10 samples"):
        tpd.gather_for_eval(torch.arange(4), 10)


def test_a_crash_mid_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    assert tpd.save_checkpoint({"step": 1}, path)

    def dies_half_way(obj, f):
        f.write(b"partial bytes")
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(RuntimeError, match="disk full"):
        tpd.save_checkpoint({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary left


def test_seed_everything_repeats_and_states_determinism(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    before = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    try:
        assert tpd.seed_everything(3) == 3
        first = torch.rand(2)
        tpd.seed_everything(3)
        assert torch.equal(first, torch.rand(2))
        assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = before


def _padded_token_spread(per_rank_batches, lengths):
    """Mean over steps of (max - min) padded tokens across ranks, over the mean."""
    spreads, totals = [], []
    for step in zip(*per_rank_batches, strict=False):
        tokens = [max(lengths[i] for i in b) * len(b) for b in step]
        spreads.append(max(tokens) - min(tokens))
        totals.append(sum(tokens) / len(tokens))
    return sum(spreads) / sum(totals)


def test_length_buckets_even_out_the_work_per_rank_against_random_batches():
    g = torch.Generator().manual_seed(0)
    lengths = (torch.randint(1, 512, (4000,), generator=g)).tolist()
    world = 4
    bucketed = [
        list(tpd.LengthBucketBatchSampler(lengths, 4096, num_replicas=world, rank_=r, seed=1))
        for r in range(world)
    ]
    order = torch.randperm(len(lengths), generator=g).tolist()
    size = 16  # about the same tokens per batch: 4096 / mean length 256
    random_batches = [
        [order[r::world][i : i + size] for i in range(0, len(order) // world, size)]
        for r in range(world)
    ]
    spread_bucketed = _padded_token_spread(bucketed, lengths)
    spread_random = _padded_token_spread(random_batches, lengths)
    assert spread_bucketed < spread_random / 3, (spread_bucketed, spread_random)
    for batches in bucketed:
        assert all(max(lengths[i] for i in b) * len(b) <= 4096 for b in batches)
    assert len({len(b) for b in bucketed}) == 1


@pytest.mark.distributed
@pytest.mark.slow
def test_a_hung_collective_times_out_naming_the_rank_the_collective_and_the_line(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    job = JOB.with_name("hang_job.py")
    started = time.monotonic()
    proc = subprocess.run(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(job)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0
    assert time.monotonic() - started < 75  # ended by the 3 s timeout, not by rank 1 (90 s)
    said = " ".join(proc.stderr.split())
    assert "rank 0 of 2 waited for 3 s in all_reduce" in said, proc.stderr
    assert f"at {job}:" in said and "rank(s) 1 did not all join this all_reduce" in said


def test_only_collective_timeouts_are_explained():
    from torchpace.distributed.timeouts import describe

    def raised(exc):
        try:
            raise exc
        except Exception as e:
            return e

    assert describe(raised(RuntimeError("timed out")), 0, 2, 3.0) is None  # not in c10d
    assert describe(raised(ValueError("bad value")), 0, 2, 3.0) is None
