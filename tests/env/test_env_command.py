"""`torchpace env` on this machine, checked against what the OS and torch say."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchpace.cli import main


def _env_json(capsys) -> dict:
    assert main(["env", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_env_json_matches_torch_and_os(capsys):
    d = _env_json(capsys)
    assert d["torch"]["torch"] == torch.__version__
    assert d["torch"]["cuda_available"] == torch.cuda.is_available()
    assert len(d["torch"]["devices"]) == (
        torch.cuda.device_count() if torch.cuda.is_available() else 0
    )
    assert d["process"]["intra_op_threads"] == torch.get_num_threads()
    assert d["cpu"]["usable_cpus"] == len(os.sched_getaffinity(0))
    assert d["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability()


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs /proc/cpuinfo (Linux)")
def test_env_isas_agree_with_proc_cpuinfo(capsys):
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    d = _env_json(capsys)
    assert ("AVX2" in d["cpu"]["isas"]) == ("avx2" in flags)
    assert d["cpu"]["bf16_native"] == bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def test_env_reads_ld_preload_and_omp_from_the_environment():
    env = dict(os.environ, OMP_NUM_THREADS="1", LD_PRELOAD="")
    out = subprocess.run(
        [sys.executable, "-m", "torchpace", "env", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    d = json.loads(out)
    assert d["process"]["thread_env"]["OMP_NUM_THREADS"] == "1"
    assert d["process"]["intra_op_threads"] == 1
    assert d["process"]["allocator"] == "default"


def test_env_table_prints(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "instruction sets" in out and "allocator" in out


def test_env_prints_the_measured_peak_and_no_peak_leaves_it_out(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    d = _env_json(capsys)
    cpu = d["peak"][0]
    assert cpu["device"] == "cpu" and cpu["matmul_flops"]["float32"] > 0 and cpu["bandwidth"] > 0
    assert (tmp_path / "torchpace" / "peak.json").is_file()
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "FLOP/s (cached)" in out and "memory copy" in out
    assert main(["env", "--json", "--no-peak"]) == 0
    assert json.loads(capsys.readouterr().out)["peak"] is None
