"""The nproc-per-node knob (knobs/nproc_per_node.py): planned only for a CPU job of several
local ranks with --allow-batch-size, its counts from the cores; the job's samples summed
over the ranks (capture/job.combine) so that counts compare in samples/s; `launch --config`
takes the toml's count, `run` refuses it; one real trial at 1 process of a 2-rank job."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import ROOT
from knob_fakes import CPU_2, CPU_16, ctx, facts

from torchpace import knobs
from torchpace.capture.job import combine
from torchpace.facts.run import RunFacts, Status, StepPhase, StepRecord
from torchpace.knobs.config import load_config, parse_config, write_config
from torchpace.knobs.nproc_per_node import candidate_counts, from_config

KNOB = knobs.get("nproc-per-node")
DDP_SCRIPT = ROOT / "examples" / "ddp_poor_buckets.py"


def job(nproc=2, cpu=CPU_2, **kw):
    return ctx(cpu=cpu, nproc_per_node=nproc, allow_batch_size=True, **kw)


# --- the plan ------------------------------------------------------------------------------


def test_a_cpu_job_of_two_ranks_on_two_cores_tries_one_process():
    plan = KNOB.plan(job())
    assert plan.values == (1,)
    assert "2 processes on 2 physical cores" in plan.reason and "global batch" in plan.reason


def test_counts_come_from_the_cores_never_more_processes_than_physical_cores():
    assert KNOB.plan(job(cpu=CPU_16)).values == (1, 4)  # fewer, and twice as many
    assert KNOB.plan(job(4, cpu=CPU_16)).values == (1, 2, 8)
    assert candidate_counts(6, 8) == (1, 3, 8)  # twice would not fit: one per core
    assert candidate_counts(4, 2) == (1, 2)  # an oversubscribed job: fewer only
    # 32 logical CPUs on 16 physical cores: 16 at most; a process limited to 3 CPUs of
    # them has no more than 3
    assert max(KNOB.plan(job(8, cpu=CPU_16)).values) == 16
    narrow = dataclasses.replace(CPU_16, usable_cpus=3)
    assert KNOB.plan(job(2, cpu=narrow)).values == (1, 3)


def test_not_applicable_says_why():
    one = KNOB.plan(job(1))
    assert not one.applicable and "one process" in one.reason
    gpu = KNOB.plan(job(cuda=True))
    assert not gpu.applicable and "one process per GPU" in gpu.reason
    flagless = KNOB.plan(ctx(nproc_per_node=2))
    assert not flagless.applicable
    assert "global batch" in flagless.reason and "--allow-batch-size" in flagless.reason
    no_loader = KNOB.plan(job(run_facts=facts(loaders=[])))
    assert not no_loader.applicable and "samples per second" in no_loader.reason


def test_declared_as_the_batch_size_is_and_read_from_a_toml(tmp_path):
    assert KNOB.opt_in == "--allow-batch-size" and KNOB.changes_numerics
    assert from_config(parse_config("[knobs]\nnproc-per-node = 4\n").knobs) == 4
    assert from_config({}) is None
    with pytest.raises(Exception, match="nproc-per-node = 0 is below its least value, 1"):
        parse_config("[knobs]\nnproc-per-node = 0\n")
    config = load_config(_toml(tmp_path, 2))
    write_config(tmp_path / "again.toml", config)
    assert load_config(tmp_path / "again.toml").knobs == {"nproc-per-node": 2}


def test_inside_a_rank_it_checks_the_launcher_count(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert KNOB.check(1, None) is None
    assert "1 local processes" in KNOB.apply(1, None)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert "--nproc-per-node 1" in KNOB.check(1, None)


def test_the_diff_says_it_is_a_launch_setting_and_edits_nothing(tmp_path):
    from torchpace.tune.diff import source_diff

    (tmp_path / "train.py").write_text("import torch\n")
    edits = {"nproc-per-node": KNOB.source_edits(1)}
    diff = source_diff(edits, tmp_path, default_file="train.py", facts=None)
    assert diff.text == "" and not diff.problems
    assert any("launch setting" in n and "--nproc-per-node 1" in n for n in diff.notes)


# --- the job's samples: every rank's --------------------------------------------------------


def _rank(times, samples) -> RunFacts:
    steps = [StepRecord(i, t, 0.0, False, phase=StepPhase.MEASURED, samples=n)
             for i, (t, n) in enumerate(zip(times, samples, strict=True))]  # fmt: skip
    return RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizers=["SGD"],
        optimizer_steps_per_step=1.0, warmup=0, steps_requested=len(times),
        status=Status.COMPLETE, steps=steps,
    )  # fmt: skip


def test_the_job_samples_per_step_are_every_rank_samples():
    job_facts = combine([_rank([10, 30], [32, 32]), _rank([20, 10], [32, 16])])
    assert [(s.wall_ms, s.samples) for s in job_facts.steps] == [(20, 64), (30, 48)]
    # a rank that counted none: the job's samples are unknown, not rank 0's alone
    unknown = combine([_rank([10], [32]), _rank([10], [None])])
    assert unknown.steps[0].samples is None


def test_per_sample_cost_of_same_count_configurations_keeps_its_ratio():
    """The DDP knobs compare N ranks with N ranks: summing the samples scales both sides
    alike, and their ratio (the gain) is what it was per step."""
    from torchpace.tune.ledger import cost_ms
    from torchpace.tune.trial import from_facts

    a = from_facts(combine([_rank([10] * 5, [32] * 5)] * 2), "a", {})
    b = from_facts(combine([_rank([8] * 5, [32] * 5)] * 2), "b", {})
    assert a.samples_per_step == 64
    assert cost_ms(a) / cost_ms(b) == pytest.approx(10 / 8)


# --- launch and run apply it ------------------------------------------------------------------


def _toml(folder, nproc):
    path = folder / "torchpace.toml"
    path.write_text(f"[torchpace]\nversion = 1\n[knobs]\nnproc-per-node = {nproc}\n")
    return path


def test_launch_takes_the_toml_count_unless_the_flag_is_given(tmp_path, capsys):
    from torchpace.launch.command import main

    script = tmp_path / "train.py"
    script.write_text("pass\n")
    toml = _toml(tmp_path, 2)
    assert main(["--config", str(toml), "--dry-run", str(script)]) == 0
    captured = capsys.readouterr()
    assert f"--nproc-per-node 2 from {toml}" in captured.err
    assert "local rank 1:" in captured.out
    assert main(["--nproc-per-node", "1", "--config", str(toml), "--dry-run", str(script)]) == 0
    captured = capsys.readouterr()
    assert f"--nproc-per-node 1 as given, over {toml}'s nproc-per-node = 2" in captured.err
    assert "local rank 0:" in captured.out and "local rank 1:" not in captured.out


def test_run_refuses_a_job_configuration_naming_the_launch_command(tmp_path, monkeypatch, capsys):
    from torchpace.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("pass\n")
    _toml(tmp_path, 2)
    assert main(["run", "train.py", "--lr", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "torchpace.toml sets nproc-per-node = 2" in err and "runs one process" in err
    assert "`torchpace launch --nproc-per-node 2 --config torchpace.toml train.py --lr 0.1`" in err


def test_tune_prints_the_launch_command_with_the_kept_count():
    from torchpace.tune.output import apply_command
    from torchpace.tune.trial import TrialSettings

    settings = TrialSettings("train.py", ["--lr", "0.1"], nproc_per_node=2)
    command = ["python", "train.py", "--lr", "0.1"]
    toml = Path("runs/torchpace.toml")
    kept = apply_command({"nproc-per-node": 1, "threads": 2}, settings, toml, command)
    assert (
        kept == "torchpace launch --nproc-per-node 1 --config runs/torchpace.toml train.py --lr 0.1"
    )
    assert "--nproc-per-node 2 " in apply_command({}, settings, toml, command)
    one = dataclasses.replace(settings, nproc_per_node=1)
    assert apply_command({}, one, toml, command).startswith("torchpace run --config")


# --- one real trial ----------------------------------------------------------------------------


@pytest.mark.distributed
@pytest.mark.slow
def test_a_trial_of_a_two_rank_job_at_one_process_runs_one(tmp_path, monkeypatch):
    """The knob's trial runs the job with its count, through the launcher (the script calls
    init_process_group): one rank captured, and that rank saw one local process."""
    from torchpace.tune.trial import TrialSettings, run_trial

    monkeypatch.chdir(tmp_path)
    settings = TrialSettings(str(DDP_SCRIPT), ["--steps", "6", "--bucket-cap-mb", "25"],
                             warmup=1, steps=3, timeout_s=120, nproc_per_node=2)  # fmt: skip
    result = run_trial(settings, {"nproc-per-node": 1}, "one process", tmp_path / "trial")
    assert result.ok, result.error
    assert (tmp_path / "trial" / "rank0").is_dir() and not (tmp_path / "trial" / "rank1").exists()
    assert result.not_held == {}  # its check: LOCAL_WORLD_SIZE was 1 at the timed steps
    assert any(d.startswith("1 local processes per node") for d in result.knob_details)
