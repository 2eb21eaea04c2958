"""The doctor's cross-rank view (`--trace DIR`): a real 2-rank gloo job's traces, planted
with a straggler and with accumulation without no_sync, and the real 2-rank NCCL traces
checked against HolisticTraceAnalysis's figures."""

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON, ROOT

from torchpace.doctor.ranks import (
    cross_rank,
    cross_rank_findings,
    rank_figures,
    rank_number,
    rank_trace_files,
)
from torchpace.doctor.skew import collective_skew, rank_collectives
from torchpace.trace import load_trace
from torchpace.trace.steps import derive_steps

JOB = Path(__file__).with_name("ranks_job.py")


def view(folder: Path):
    figures, collectives = [], []
    for i, path in enumerate(rank_trace_files(folder)):
        model = load_trace(path)
        figures.append(rank_figures(model, rank_number(path, i)))
        collectives.append(rank_collectives(model.with_steps(derive_steps(model)), i))
    return cross_rank(figures, collective_skew(collectives))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(JOB), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.mark.distributed
@pytest.mark.slow
def test_the_sleeping_rank_is_the_straggler_and_the_others_wait_for_it(job):
    cross = view(job / "straggler")
    assert cross.straggler == 1
    sleep_ms = float((job / "straggler_sleep_ms.txt").read_text())  # rank 1's, per step
    assert 0.6 * sleep_ms < cross.wait_ms_per_step < 1.6 * sleep_ms
    fast, slow = cross.ranks
    assert fast.collective_ms > 0.6 * sleep_ms and slow.collective_ms < fast.collective_ms / 4
    # gloo's all-reduce spans, aligned on their ends: rank 0 waits in them for rank 1
    [reduce] = cross.collective_skew
    assert reduce.slowest_rank == 1 and reduce.wait_ms_per_step > reduce.transfer_ms_per_step
    assert 0.6 * sleep_ms < 2 * reduce.wait_ms_per_step < 1.6 * sleep_ms  # rank 0's half
    (finding,) = cross_rank_findings(cross)
    assert finding.code == "TP505" and finding.evidence["rank"] == 1
    assert finding.severity == "high"


@pytest.mark.distributed
@pytest.mark.slow
def test_a_clean_job_has_no_straggler_and_one_all_reduce_per_step(job):
    cross = view(job / "clean")
    assert cross.straggler is None and cross.steps_compared == 6
    assert [r.allreduce_calls for r in cross.ranks] == [1, 1]
    assert [r.synced_backwards for r in cross.ranks] == [1, 1]
    assert cross_rank_findings(cross) == []


@pytest.mark.distributed
@pytest.mark.slow
def test_accumulation_without_no_sync_shows_an_all_reduce_per_micro_step(job):
    cross = view(job / "no_sync")
    assert [r.allreduce_calls for r in cross.ranks] == [4, 4]
    assert [r.synced_backwards for r in cross.ranks] == [4, 4]
    (finding,) = cross_rank_findings(cross)
    assert finding.code == "TP502" and finding.evidence["synced_backwards_per_step"] == 4


@pytest.mark.distributed
@pytest.mark.slow
def test_doctor_trace_dir_reports_and_writes_the_cross_rank_view(job, tmp_path, child_env):
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [PYTHON, "-m", "torchpace", "doctor", "--trace", str(job / "straggler"), "--json",
         str(report)],
        capture_output=True,
        text=True,
        env={**child_env, "COLUMNS": "120"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "straggler: rank 1" in " ".join(proc.stdout.split())
    cross = json.loads(report.read_text())["cross_rank"]
    assert cross["straggler"] == 1 and len(cross["ranks"]) == 2


def test_a_folder_without_traces_is_a_usage_error(tmp_path, child_env):
    proc = subprocess.run(
        [PYTHON, "-m", "torchpace", "doctor", "--trace", str(tmp_path)],
        capture_output=True,
        text=True,
        env=child_env,
    )
    assert proc.returncode == 2
    assert "holds no trace" in proc.stderr


def test_nccl_overlap_per_step_agrees_with_hta(shared_traces, tmp_path):
    """HolisticTraceAnalysis 0.5 `get_comm_comp_overlap` on these two ranks: 11.81% and
    20.05% (its figure is the first iteration's: it leaves the trace's last one out)."""
    for name in ("sampled_rank0.json.gz", "sampled_rank1.json.gz"):
        shutil.copy(shared_traces / name, tmp_path / name)
    cross = view(tmp_path)
    r0, r1 = cross.ranks
    assert r0.comm_overlap_per_step[0] == pytest.approx(0.1181, abs=0.001)
    assert r1.comm_overlap_per_step[0] == pytest.approx(0.2005, abs=0.001)
    assert r0.collective_on == "gpu" and r0.comm_share_of_gpu > 0.6  # NCCL-bound ranks
    assert cross.straggler is None
    (finding,) = cross_rank_findings(cross)
    assert finding.code == "TP506" and finding.evidence["overlap_pct"] == 15
    assert 150 < finding.saving_ms < 200  # the exposed NCCL time per step


@pytest.mark.distributed
@pytest.mark.slow
def test_launch_doctor_captures_every_rank_and_reports_the_job(tmp_path, child_env):
    out = tmp_path / "run"
    proc = subprocess.run(
        [PYTHON, "-m", "torchpace", "launch", "--nproc-per-node", "2", "--doctor",
         "--doctor-out", str(out), "--doctor-warmup", "1", "--doctor-steps", "2",
         str(ROOT / "examples" / "ddp_with_helpers.py"), "--steps", "6", "--batch-size", "8",
         "--micro-steps", "2", "--val-size", "16"],
        capture_output=True,
        text=True,
        env={**child_env, "COLUMNS": "120"},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        assert (out / f"rank{rank}" / "trace.json.gz").is_file()
        assert (out / f"rank{rank}" / "run_facts.json").is_file()
    cross = json.loads((out / "doctor_report.json").read_text())["cross_rank"]
    assert [r["rank"] for r in cross["ranks"]] == [0, 1] and cross["steps_compared"] == 2
    # accumulate() over 2 micro-steps: one all-reduce per optimizer step on every rank
    assert [r["allreduce_calls"] for r in cross["ranks"]] == [1, 1]
    assert "2 ranks, 2 steps compared" in proc.stdout
    if importlib.util.find_spec("plotly"):  # the job's page, as every doctor run writes one
        assert "torchpace doctor" in (out / "report.html").read_text()


def test_doctor_nproc_per_node_is_launch_doctor(tmp_path):
    from torchpace.cli import build_parser

    args = build_parser().parse_args(
        ["doctor", "--nproc-per-node", "2", "--warmup", "1", "--steps", "2", "--out",
         str(tmp_path / "r"), "train.py", "--lr", "0.1"]
    )  # fmt: skip
    from torchpace.doctor.command import check_usage, launch_argv

    assert check_usage(args) is None
    assert launch_argv(args) == [
        "--nproc-per-node", "2", "--doctor", "--doctor-warmup", "1", "--doctor-steps", "2",
        "--doctor-out", str(tmp_path / "r"), "train.py", "--lr", "0.1",
    ]  # fmt: skip
    module = build_parser().parse_args(["doctor", "--nproc-per-node", "2", "-m", "pkg.train"])
    assert launch_argv(module)[-2:] == ["-m", "pkg.train"]
    refused = build_parser().parse_args(
        ["doctor", "--nproc-per-node", "2", "--json", "x.json", "--stacks", "train.py"]
    )
    problem = check_usage(refused)
    assert "--json" in problem and "--stacks" in problem and "launch --doctor" in problem


@pytest.mark.distributed
@pytest.mark.slow
def test_doctor_nproc_per_node_reports_the_job(tmp_path, child_env):
    out = tmp_path / "run"
    proc = subprocess.run(
        [PYTHON, "-m", "torchpace", "doctor", "--nproc-per-node", "2", "--warmup", "1",
         "--steps", "2", "--out", str(out), str(ROOT / "examples" / "ddp_with_helpers.py"),
         "--steps", "6", "--batch-size", "8", "--micro-steps", "2", "--val-size", "16"],
        capture_output=True,
        text=True,
        env={**child_env, "COLUMNS": "120"},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "rank1" / "run_facts.json").is_file()
    cross = json.loads((out / "doctor_report.json").read_text())["cross_rank"]
    assert [r["rank"] for r in cross["ranks"]] == [0, 1]
    assert "2 ranks, 2 steps compared" in proc.stdout
