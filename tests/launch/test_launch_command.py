"""`torchpace launch` end to end: the dry run, refusals, and real 2-process gloo jobs on
torchrun whose ranks report the environment they got."""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import PYTHON

PROBE = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if "--crash-rank" in sys.argv and rank == int(sys.argv[sys.argv.index("--crash-rank") + 1]):
    raise ValueError(f"planted crash in rank {rank}")
report = {
    "rank": rank,
    "world": dist.get_world_size(),
    "omp": os.environ.get("OMP_NUM_THREADS"),
    "threads": torch.get_num_threads(),
    "cpus": sorted(os.sched_getaffinity(0)),
    "plan_left": "TORCHPACE_LAUNCH_PLAN" in os.environ,
    "args": sys.argv[1:],
}
dist.barrier()  # a crashed rank leaves this one waiting here until torchrun ends it
with open(os.path.join(os.environ["OUT"], f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
"""


def launch(args, env, cwd, timeout=120):
    return subprocess.run(
        [PYTHON, "-m", "torchpace", "launch", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


@pytest.fixture
def probe(tmp_path, child_env):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    child_env["OUT"] = str(tmp_path)
    for name in ("OMP_NUM_THREADS", "LD_PRELOAD", "KMP_BLOCKTIME", "MALLOC_CONF"):
        child_env.pop(name, None)
    return script, child_env


def reports(folder):
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]


def test_dry_run_prints_each_rank_and_starts_nothing(probe, tmp_path):
    script, env = probe
    proc = launch(["--nproc-per-node", "2", "--dry-run", str(script), "--lr", "0.1"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "local rank 0:" in out and "local rank 1:" in out
    assert "OMP_NUM_THREADS=" in out and "LOCAL_RANK=1" in out
    assert f"{script} --lr 0.1" in out  # the script's own arguments, untouched
    assert "c10d rendezvous at 127.0.0.1:0" in out
    assert not list(tmp_path.glob("rank*.json"))


def test_no_tune_env_dry_run_sets_nothing(probe, tmp_path):
    script, env = probe
    proc = launch(["--nproc-per-node=2", "--no-tune-env", "--dry-run", str(script)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "OMP_NUM_THREADS" not in proc.stdout and "not bound" in proc.stdout


def test_a_missing_script_is_a_usage_error_in_one_line(tmp_path, child_env):
    proc = launch(["--nproc-per-node", "2", "nowhere.py"], child_env, tmp_path)
    assert proc.returncode == 2
    assert "script nowhere.py does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_shows_torchrun_flags_and_the_rendezvous_warning(child_env, tmp_path):
    proc = launch(["--help"], child_env, tmp_path)
    assert proc.returncode == 0
    assert "--nproc-per-node" in proc.stdout and "--dry-run" in proc.stdout
    assert "no authentication" in " ".join(proc.stdout.split())


@pytest.mark.distributed
@pytest.mark.slow
def test_two_ranks_get_their_threads_and_disjoint_cores(probe, tmp_path):
    script, env = probe
    proc = launch(["--nproc-per-node", "2", str(script), "--x", "1"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    a, b = reports(tmp_path)
    usable = os.sched_getaffinity(0)
    per_rank = max(1, len(usable) // 2)
    assert {a["rank"], b["rank"]} == {0, 1} and a["world"] == 2
    for r in (a, b):
        assert r["omp"] == str(per_rank) and r["threads"] == per_rank
        assert r["args"] == ["--x", "1"] and not r["plan_left"]
    if len(usable) >= 2:
        assert len(a["cpus"]) == per_rank and not set(a["cpus"]) & set(b["cpus"])


@pytest.mark.distributed
@pytest.mark.slow
def test_a_crashing_rank_ends_the_job_with_its_traceback_first(probe, tmp_path):
    script, env = probe
    started = time.monotonic()
    proc = launch(["--nproc-per-node", "2", str(script), "--crash-rank", "1"], env, tmp_path)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1
    assert elapsed < 60, f"the job took {elapsed:.0f} s to end after a rank crashed"
    err = proc.stderr
    crash = err.index("ValueError: planted crash in rank 1")
    assert "Traceback" in err[:crash]
    assert err.index("FAILED") > crash  # torchrun's summary comes after the rank's traceback
    assert f"{script} failed in rank 1 (exit code 1)" in err
    assert not (tmp_path / "rank0.json").exists()


def test_launch_is_listed_in_the_help(child_env):
    proc = subprocess.run(
        [sys.executable, "-m", "torchpace", "--help"], capture_output=True, text=True, env=child_env
    )
    assert "launch" in proc.stdout


LISTENERS = """
import json, os
import torch.distributed as dist


def listening(pids):
    \"\"\"(address hex, port) of the TCP sockets in LISTEN state that these processes hold.\"\"\"
    inodes = set()
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                out.append([address, int(port, 16)])
    return out


dist.init_process_group("gloo")
if dist.get_rank() == 0:  # while the job runs: this worker and torchrun's agent, its parent
    found = {"agent": listening([os.getppid()]), "worker": listening([os.getpid()]),
             "master": [os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])]}
    with open(os.path.join(os.environ["OUT"], "listening.json"), "w") as f:
        json.dump(found, f)
dist.barrier()
dist.destroy_process_group()
"""
# 127.0.0.1 in /proc/net/tcp, and ::1 or ::ffff:127.0.0.1 in /proc/net/tcp6
LOOPBACK = {"0100007F", "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--standalone"]])
def test_a_single_node_job_listens_on_loopback_only(tmp_path, child_env, flags):
    script = tmp_path / "listeners.py"
    script.write_text(LISTENERS)
    child_env["OUT"] = str(tmp_path)
    proc = launch([*flags, "--nproc-per-node", "2", str(script)], child_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = json.loads((tmp_path / "listening.json").read_text())
    # the agent holds the rendezvous store and the workers' store (MASTER_PORT)
    assert len(found["agent"]) >= 2, found
    assert found["master"][0] == "127.0.0.1"
    assert found["master"][1] in [port for _, port in found["agent"]], found
    exposed = [x for x in found["agent"] + found["worker"] if x[0] not in LOOPBACK]
    assert not exposed, f"listening beyond loopback: {exposed}"
    assert "open to the network" not in proc.stderr


def test_the_loopback_names_and_the_others():
    from torchpace.launch.loopback import bound_listener, loopback_bind_address

    assert loopback_bind_address("127.0.0.1")[1] == "127.0.0.1"
    assert loopback_bind_address("127.0.0.2")[1] == "127.0.0.2"
    assert loopback_bind_address("::1")[1] == "::1"
    assert loopback_bind_address("10.1.2.3") is None
    assert loopback_bind_address("no such host.invalid") is None
    assert bound_listener("10.1.2.3", 0) is None
    fd, port = bound_listener("127.0.0.1", 0)
    os.close(fd)
    assert port > 0


@pytest.mark.parametrize("nodes", ["2", "1:2"])
def test_a_job_open_to_the_network_says_so_with_the_flags(probe, tmp_path, nodes):
    script, env = probe
    args = ["--nnodes", nodes, "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.1.2.3:29400"]
    proc = launch([*args, "--dry-run", str(script)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "the rendezvous on 10.1.2.3 is open to the network" in out
    assert "no authentication" in out and "--rdzv-endpoint ADDR:PORT" in out


@pytest.mark.parametrize(
    "flag, words",
    [
        ("--nproc-per-node=0", "--nproc-per-node must be at least 1 process (got 0)"),
        ("--nproc-per-node=-1", "--nproc-per-node must be at least 1 process (got -1)"),
        ("--nnodes=0", "--nnodes 0: give N or MIN:MAX"),
        ("--nnodes=3:2", "--nnodes 3:2: give N or MIN:MAX"),
    ],
)
def test_impossible_process_counts_are_refused_in_one_line(probe, tmp_path, flag, words):
    script, env = probe
    proc = launch([flag, "--dry-run", str(script)], env, tmp_path)
    assert proc.returncode == 2 and words in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture
def held_port(tmp_path):
    """A port on 127.0.0.1 held by a program that is not torch's (a bare listening socket)."""
    ready = tmp_path / "port"
    code = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "open(sys.argv[1], 'w').write(str(s.getsockname()[1])); time.sleep(120)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(ready)])
    try:
        for _ in range(200):
            if ready.exists() and ready.read_text():
                break
            time.sleep(0.05)
        yield int(ready.read_text())
    finally:
        holder.kill()
        holder.wait()


def test_a_rendezvous_port_another_program_holds_fails_fast(probe, tmp_path, held_port):
    script, env = probe
    endpoint = f"127.0.0.1:{held_port}"
    args = ["--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint]
    proc = launch([*args, str(script)], env, tmp_path, timeout=60)  # it used to hang
    assert proc.returncode == 2
    assert f"--rdzv-endpoint {endpoint}: port {held_port} is already held" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_master_port_in_use_is_one_line_without_a_traceback(probe, tmp_path, held_port):
    script, env = probe
    args = ["--nproc-per-node", "1", "--master-port", str(held_port), str(script)]
    proc = launch(args, env, tmp_path, timeout=60)
    assert proc.returncode == 2
    assert f"127.0.0.1:{held_port}: address already in use: another program" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_rank_ended_by_a_signal_is_named_without_promising_a_traceback():
    from torchpace.launch.command import rank_failure

    raised = rank_failure("train.py", 1, 1)
    assert "train.py failed in rank 1 (exit code 1)" in raised and "traceback is above" in raised
    aborted = rank_failure("train.py", 1, -6)
    assert "ended by SIGABRT in rank 1 (exit code -6): no traceback" in aborted
    assert "dist.barrier(); del model; gc.collect(); dist.destroy_process_group()" in aborted
    assert "out-of-memory" in rank_failure("train.py", 0, -9)
    assert "ended by signal 99" in rank_failure("train.py", 0, -99)
