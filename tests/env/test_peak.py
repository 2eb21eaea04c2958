"""The measured peak (env/peak.py): cached per machine, key by key; the datasheet table."""

import json

import pytest
import torch

from torchpace.env import peak as peak_module
from torchpace.env.peak import FLOAT32, TF32, datasheet, measure_peak, rate_text


def test_the_probe_measures_once_then_reads_the_cache(tmp_path, monkeypatch):
    cache = tmp_path / "peak.json"
    first = measure_peak("cpu", [FLOAT32], threads=1, cache=cache)
    assert first.matmul_flops[FLOAT32] > 1e8 and first.bandwidth > 1e8
    assert not first.cached and first.probe_s > 0
    calls = []
    monkeypatch.setattr(peak_module, "_matmul_rate", lambda *a: calls.append(a) or 1.0)
    again = measure_peak("cpu", [FLOAT32], threads=1, cache=cache)
    assert again.cached and again.probe_s == 0 and not calls
    assert again.matmul_flops == first.matmul_flops
    # another thread count is another machine as far as the peak goes
    other = measure_peak("cpu", [FLOAT32], threads=2, cache=cache)
    assert not other.cached and other.matmul_flops[FLOAT32] == 1.0
    assert len(json.loads(cache.read_text())) == 2
    # --measure-peak: measured again; the cache keeps the best reading (a probe beside
    # other work reads low, never high), so a slow probe does not lower a good one...
    fresh = measure_peak("cpu", [FLOAT32], threads=1, cache=cache, refresh=True)
    assert not fresh.cached and fresh.matmul_flops[FLOAT32] == first.matmul_flops[FLOAT32]
    # ...and a faster one raises it
    monkeypatch.setattr(peak_module, "_matmul_rate", lambda *a: 1e15)
    measure_peak("cpu", [FLOAT32], threads=1, cache=cache, refresh=True)
    assert measure_peak("cpu", [FLOAT32], threads=1, cache=cache).matmul_flops[FLOAT32] == 1e15


def test_a_damaged_cache_is_measured_again(tmp_path):
    cache = tmp_path / "peak.json"
    cache.write_text("{not json")
    p = measure_peak("cpu", [FLOAT32], threads=1, cache=cache)
    assert not p.cached and json.loads(cache.read_text())


@pytest.mark.parametrize(
    ("name", "tf32", "bandwidth"),
    [
        ("NVIDIA H100 80GB HBM3", 494.7e12, 3350e9),
        ("NVIDIA H100 PCIe", 378e12, 2000e9),
        ("NVIDIA H200", 494.7e12, 4800e9),
        ("NVIDIA A100-SXM4-80GB", 156e12, 2039e9),
        ("NVIDIA A100-SXM4-40GB", 156e12, 1555e9),
        ("NVIDIA L4", 60e12, 300e9),
        ("NVIDIA L40S", 183e12, 864e9),
        ("NVIDIA GeForce RTX 4090", 82.6e12, 1008e9),
    ],
)
def test_the_datasheet_is_matched_by_the_device_name(name, tf32, bandwidth):
    sheet = datasheet(name)
    assert sheet.flops[TF32] == pytest.approx(tf32) and sheet.bandwidth == pytest.approx(bandwidth)


def test_parts_without_tf32_and_unknown_parts():
    v100 = datasheet("Tesla V100-SXM2-16GB")
    assert TF32 not in v100.flops and v100.flops["float16"] == 125e12
    assert datasheet("AMD EPYC") is None and datasheet(None) is None


def test_rates_read_with_their_prefix():
    assert rate_text(12.7e9) == "12.7 GFLOP/s"
    assert rate_text(2.5e12, "B/s") == "2.5 TB/s"
    assert rate_text(None) == "unknown"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpus_peak_is_measured_beside_its_datasheet(tmp_path):
    p = measure_peak("cuda:0", cache=tmp_path / "peak.json")
    assert p.matmul_flops[FLOAT32] > 1e12 and p.bandwidth > 1e11
    # tensor cores: bf16 and TF32 well above plain fp32 on every part with them
    if TF32 in p.matmul_flops:
        assert p.matmul_flops["bfloat16"] > 2 * p.matmul_flops[FLOAT32]
    if datasheet(p.name) is not None:  # a measured peak below the datasheet's, not far below
        for dtype, rate in p.datasheet_flops.items():
            assert 0.3 * rate < p.matmul_flops[dtype] < 1.1 * rate, (dtype, p)
