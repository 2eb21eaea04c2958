"""The device's peak, measured: FLOP/s of a matmul per dtype and bytes/s of a copy.

The speed of light a step is compared with (doctor/speed_of_light.py) is what this machine
does at best, not a brochure's figure: a short matmul per dtype in use (fp32 everywhere;
bf16 on a CPU only where it runs natively, AVX512-BF16/AMX; tf32, bf16 and fp16 on a GPU)
and a large copy for the memory bandwidth. On a GPU the vendor's dense datasheet peak is
shown beside it (``DATASHEET``). Measured once per machine and cached in
``~/.cache/torchpace/peak.json``, keyed by the device's name, torch's version and the
thread count (a CPU's peak scales with its threads).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from torchpace.atomic import write_text_atomic

CACHE_NAME = "peak.json"
# The probe's whole budget is under 2 s; each matmul dtype and the copy get this long.
PROBE_S = 0.2
CPU_MATMUL_SIZE = 1024  # 2.1 GFLOP a call: ~10-50 ms on a few cores, big enough for BLAS peak
GPU_MATMUL_SIZE = 8192  # 1.1 TFLOP a call: a fraction of a ms is too short to time well
CPU_COPY_BYTES = 64 * 2**20  # far beyond the caches: the copy runs at memory speed
GPU_COPY_BYTES = 1 * 2**30
# The dtypes' names as reports spell them; "tf32": fp32 matmuls on tensor cores.
FLOAT32, TF32, BFLOAT16, FLOAT16 = "float32", "tf32", "bfloat16", "float16"

TERA, GIGA = 1e12, 1e9


@dataclass(frozen=True)
class Datasheet:
    """A GPU's dense (no sparsity) peak FLOP/s by dtype, and its memory bandwidth (bytes/s),
    from the vendor's datasheet."""

    flops: dict[str, float]
    bandwidth: float


def _sheet(fp32: float, tf32: float | None, half: float, bw_gb_s: float) -> Datasheet:
    flops = {FLOAT32: fp32 * TERA, FLOAT16: half * TERA}
    if tf32 is not None:
        flops[TF32] = tf32 * TERA
        flops[BFLOAT16] = half * TERA  # every part with TF32 runs bf16 at fp16's rate
    return Datasheet(flops, bw_gb_s * GIGA)


# Matched against the device name in this order (the more specific first). Dense tensor-core
# figures (the datasheets' sparse ones halved); GeForce fp16/bf16 with fp32 accumulation.
DATASHEET: list[tuple[str, Datasheet]] = [
    (r"H200", _sheet(67, 494.7, 989.4, 4800)),
    (r"H100.*NVL", _sheet(60, 417.5, 835, 3900)),
    (r"H100.*PCIe", _sheet(51, 378, 756, 2000)),
    (r"H100", _sheet(67, 494.7, 989.4, 3350)),  # SXM5
    (r"A100.*80GB.*PCIe|A100.*PCIe.*80GB", _sheet(19.5, 156, 312, 1935)),
    (r"A100.*80GB", _sheet(19.5, 156, 312, 2039)),
    (r"A100", _sheet(19.5, 156, 312, 1555)),  # 40 GB
    (r"V100.*PCIe", _sheet(14, None, 112, 900)),
    (r"V100", _sheet(15.7, None, 125, 900)),  # SXM2
    (r"L40S", _sheet(91.6, 183, 362, 864)),
    (r"\bL4\b", _sheet(30.3, 60, 121, 300)),
    (r"RTX 4090", _sheet(82.6, 82.6, 165.2, 1008)),
]


def datasheet(name: str | None) -> Datasheet | None:
    for pattern, sheet in DATASHEET:
        if name and re.search(pattern, name, re.IGNORECASE):
            return sheet
    return None


@dataclass
class DevicePeak:
    device: str  # "cpu" or "cuda:0"
    name: str  # the CPU model or the GPU's name
    threads: int | None  # the CPU threads the probe ran on (None on a GPU)
    matmul_flops: dict[str, float] = field(default_factory=dict)  # dtype -> measured FLOP/s
    bandwidth: float | None = None  # bytes/s a large copy moves (read + write), measured
    datasheet_flops: dict[str, float] = field(default_factory=dict)  # GPU: vendor's dense
    datasheet_bandwidth: float | None = None
    probe_s: float = 0.0  # what measuring took (0 when every figure came from the cache)
    cached: bool = False

    def flops_for(self, dtype: str) -> float | None:
        """The measured peak for an op of this dtype; an fp32 matmul on a GPU with TF32
        allowed runs at the TF32 rate (the caller passes "tf32" then)."""
        return self.matmul_flops.get(dtype)

    def to_dict(self) -> dict:
        return asdict(self)


def rate_text(per_s: float | None, unit: str = "FLOP/s") -> str:
    """12.7e9 -> "12.7 GFLOP/s"; the prefix that keeps three digits readable."""
    if per_s is None:
        return "unknown"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.3g} {prefix}{unit}"
    return f"{per_s:.3g} {unit}"


def cpu_dtypes(bf16_native: bool | None) -> list[str]:
    return [FLOAT32, BFLOAT16] if bf16_native else [FLOAT32]


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchpace" / CACHE_NAME


def measure_peak(
    device: str = "cpu",
    dtypes: list[str] | None = None,
    threads: int | None = None,
    cache: Path | None = None,
    use_cache: bool = True,
    refresh: bool = False,
) -> DevicePeak:
    """The device's peak, from the cache where this machine measured it already;
    ``refresh``: measured again and the cache's entry replaced (a probe that ran on a busy
    machine reads the peak low)."""
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        index = torch.device(device).index or 0
        name = torch.cuda.get_device_name(index)
        threads = None
        dtypes = dtypes or [FLOAT32, TF32, BFLOAT16, FLOAT16]
    else:
        from torchpace.env.cpu import read_cpu_facts

        facts = read_cpu_facts()
        name = facts.model or "unknown CPU"
        threads = threads or torch.get_num_threads()
        dtypes = dtypes or cpu_dtypes(facts.bf16_native)
    key = f"{device}|{name}|torch {torch.__version__}|threads {threads}"
    path = cache or cache_path()
    stored = _read_cache(path) if use_cache else {}
    entry = {} if refresh else stored.get(key, {})
    peak = DevicePeak(device, name, threads)
    peak.matmul_flops = {
        d: entry["matmul_flops"][d] for d in dtypes if d in entry.get("matmul_flops", {})
    }
    peak.bandwidth = entry.get("bandwidth")
    started = time.perf_counter()
    missing = [d for d in dtypes if d not in peak.matmul_flops]
    old_threads = torch.get_num_threads()
    if threads and not cuda:
        torch.set_num_threads(threads)
    try:
        for dtype in missing:
            rate = _matmul_rate(device, dtype)
            if rate is not None:
                peak.matmul_flops[dtype] = rate
        if peak.bandwidth is None:
            peak.bandwidth = _copy_rate(device)
    finally:
        if threads and not cuda:
            torch.set_num_threads(old_threads)
    peak.probe_s = round(time.perf_counter() - started, 3)
    peak.cached = not missing and entry.get("bandwidth") is not None
    sheet = datasheet(name) if cuda else None
    if sheet is not None:
        peak.datasheet_flops = {d: f for d, f in sheet.flops.items() if d in dtypes}
        peak.datasheet_bandwidth = sheet.bandwidth
    if not peak.cached and use_cache:
        # the best rate any probe here read: a probe beside other work reads low, never high
        before = stored.get(key, {})
        merged = dict(before.get("matmul_flops", {}))
        for dtype, rate in peak.matmul_flops.items():
            merged[dtype] = max(rate, merged.get(dtype, 0.0))
        peak.matmul_flops = {d: merged[d] for d in peak.matmul_flops}
        bandwidth = max(peak.bandwidth or 0.0, before.get("bandwidth") or 0.0) or None
        peak.bandwidth = bandwidth
        stored[key] = {"matmul_flops": merged, "bandwidth": bandwidth}
        _write_cache(path, stored)
    return peak


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # absent or damaged: measure again and write a good one


def _write_cache(path: Path, data: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))
    except OSError:
        pass  # a read-only home: the figures are still right, only measured again next time


def _best_rate(work: float, run, sync) -> float:
    """``work`` units per second of the fastest call within the probe's time."""
    run()  # the first call pays for allocation and kernel selection
    sync()
    best = float("inf")
    deadline = time.perf_counter() + PROBE_S
    calls = 0
    while calls < 3 or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - t0)
        calls += 1
        if calls >= 200:
            break
    return work / best


def _matmul_rate(device: str, dtype: str) -> float | None:
    import torch

    cuda = device.startswith("cuda")
    torch_dtype = {FLOAT32: torch.float32, TF32: torch.float32,
                   BFLOAT16: torch.bfloat16, FLOAT16: torch.float16}[dtype]  # fmt: skip
    n = GPU_MATMUL_SIZE if cuda else CPU_MATMUL_SIZE
    try:
        a = torch.randn(n, n, device=device).to(torch_dtype)
        b = torch.randn(n, n, device=device).to(torch_dtype)
    except (RuntimeError, TypeError):
        return None
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    tf32_before = torch.backends.cuda.matmul.allow_tf32 if cuda else None
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = dtype == TF32
    try:
        return _best_rate(2.0 * n**3, lambda: torch.mm(a, b), sync)
    except RuntimeError:  # the dtype has no matmul kernel on this device
        return None
    finally:
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = tf32_before


def _copy_rate(device: str) -> float | None:
    import torch

    cuda = device.startswith("cuda")
    nbytes = GPU_COPY_BYTES if cuda else CPU_COPY_BYTES
    try:
        src = torch.ones(nbytes // 4, device=device)
        dst = torch.empty_like(src)
    except RuntimeError:
        return None
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    return _best_rate(2.0 * nbytes, lambda: dst.copy_(src), sync)  # read + write
