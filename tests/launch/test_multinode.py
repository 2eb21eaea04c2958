"""Two "nodes" on one machine over loopback: two `torchpace launch --doctor` launchers
(`--nnodes 2 --node-rank 0/1`, torchrun's c10d rendezvous on 127.0.0.1) each capture their
rank into DIR/node<K>, and `torchpace doctor --trace DIR` reports the job as one."""

from __future__ import annotations

import json
import socket
import subprocess

import pytest
from conftest import PYTHON, ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_node(node: int, port: int, out, env: dict) -> subprocess.Popen:
    command = [PYTHON, "-m", "torchpace", "launch", "--nnodes", "2", "--node-rank", str(node),
               "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--doctor", "--doctor-out", str(out),
               "--doctor-warmup", "1", "--doctor-steps", "2",
               str(ROOT / "examples" / "ddp_with_helpers.py"), "--steps", "6",
               "--batch-size", "8", "--micro-steps", "2", "--val-size", "16"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, "COLUMNS": "120"})  # fmt: skip


@pytest.mark.distributed
@pytest.mark.slow
def test_two_nodes_over_loopback_give_one_cross_rank_report(tmp_path, child_env):
    out, port = tmp_path / "job", _free_port()
    launchers = [_launch_node(node, port, out, child_env) for node in (0, 1)]
    results = [p.communicate(timeout=400) for p in launchers]
    for p, (_, err) in zip(launchers, results, strict=True):
        assert p.returncode == 0, err[-3000:]
    for node in (0, 1):  # each node's own folder, its global rank inside
        assert (out / f"node{node}" / f"rank{node}" / "trace.json.gz").is_file()
    assert "torchpace doctor --trace" in results[0][1]  # how to get the whole job's report

    job = subprocess.run(
        [PYTHON, "-m", "torchpace", "doctor", "--trace", str(out), "--json",
         str(tmp_path / "job.json")],
        capture_output=True, text=True, env={**child_env, "COLUMNS": "120"}, timeout=300,
    )  # fmt: skip
    assert job.returncode in (0, 1), job.stderr[-3000:]  # 1: findings
    cross = json.loads((tmp_path / "job.json").read_text())["cross_rank"]
    assert [r["rank"] for r in cross["ranks"]] == [0, 1]
    # accumulate() over 2 micro-steps: one all-reduce per optimizer step on both nodes' ranks
    assert [r["allreduce_calls"] for r in cross["ranks"]] == [1, 1]
    assert "2 ranks" in job.stdout


def test_doctor_on_several_nodes_needs_a_shared_out_folder(child_env, tmp_path):
    proc = subprocess.run(
        [PYTHON, "-m", "torchpace", "launch", "--nnodes", "2", "--node-rank", "0",
         "--nproc-per-node", "1", "--rdzv-endpoint", "127.0.0.1:29999", "--doctor",
         str(ROOT / "examples" / "ddp_with_helpers.py")],
        capture_output=True, text=True, env=child_env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--doctor-out DIR" in proc.stderr and "node<node-rank>" in proc.stderr
