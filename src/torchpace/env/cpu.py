"""CPU facts read from /proc/cpuinfo, lscpu and sysfs.

The parsers take text so that tests can feed them other machines' output; the readers
return None when a source cannot be read, and the report says "unknown" for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The instruction sets that decide how fast PyTorch runs on a CPU, by /proc/cpuinfo flag.
# x86 flags first, then the aarch64 "Features" names for the same capabilities.
ISA_FLAGS = {
    "AVX2": ("avx2",),
    "AVX-512": ("avx512f",),
    "AVX512-VNNI": ("avx512_vnni", "avx512vnni"),
    "AVX512-BF16": ("avx512_bf16",),
    "AVX512-FP16": ("avx512_fp16",),
    "AMX-BF16": ("amx_bf16",),
    "AMX-INT8": ("amx_int8",),
    "NEON": ("asimd",),
    "SVE": ("sve",),
    "ARM-BF16": ("bf16",),
}
# Native bf16 arithmetic on the CPU; without it bf16 autocast is emulated and was measured
# 40x slower than fp32 on an AVX2-only EPYC (PRACTICES.md, P19).
BF16_NATIVE_ISAS = ("AVX512-BF16", "AMX-BF16", "ARM-BF16")


@dataclass(frozen=True)
class CpuFacts:
    model: str | None
    logical_cpus: int | None
    usable_cpus: int | None  # the affinity mask: what this process may run on
    physical_cores: int | None
    numa_nodes: int | None
    isas: tuple[str, ...] | None  # None: flags could not be read
    torch_capability: str | None  # what torch dispatches to, e.g. "AVX2"

    @property
    def bf16_native(self) -> bool | None:
        if self.isas is None:
            return None
        return any(isa in self.isas for isa in BF16_NATIVE_ISAS)


def parse_cpuinfo(text: str) -> dict:
    """Model name, flags and the physical cores counted from (physical id, core id) pairs."""
    model = None
    flags: set[str] = set()
    cores: set[tuple[str, str]] = set()
    processors = 0
    physical_id = core_id = None
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if core_id is not None:
                cores.add((physical_id or "0", core_id))
            physical_id = core_id = None
            continue
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            processors += 1
        elif key in ("model name", "cpu model") and model is None:
            model = value
        elif key in ("flags", "features"):
            flags.update(value.split())
        elif key == "physical id":
            physical_id = value
        elif key == "core id":
            core_id = value
    return {
        "model": model,
        "flags": flags,
        "logical_cpus": processors or None,
        "physical_cores": len(cores) or None,
    }


def parse_lscpu(text: str) -> dict:
    """`lscpu` key: value lines into a dict, with the counts that matter as ints."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()

    def as_int(key):
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            return None

    per_socket, sockets = as_int("Core(s) per socket"), as_int("Socket(s)")
    return {
        "model": fields.get("Model name"),
        "flags": set(fields.get("Flags", "").split()),
        "logical_cpus": as_int("CPU(s)"),
        "physical_cores": per_socket * sockets if per_socket and sockets else None,
        "numa_nodes": as_int("NUMA node(s)"),
    }


def isas_from_flags(flags: set[str]) -> tuple[str, ...]:
    return tuple(name for name, names in ISA_FLAGS.items() if flags.intersection(names))


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _lscpu() -> str | None:
    if shutil.which("lscpu") is None:
        return None
    try:
        out = subprocess.run(
            ["lscpu"], capture_output=True, text=True, timeout=10, env={**os.environ, "LC_ALL": "C"}
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _numa_nodes_from_sysfs(root: str = "/sys/devices/system/node") -> int | None:
    try:
        nodes = [p for p in os.listdir(root) if p.startswith("node") and p[4:].isdigit()]
    except OSError:
        return None
    return len(nodes) or None


def _torch_capability() -> str | None:
    try:
        import torch

        return torch.backends.cpu.get_cpu_capability()
    except Exception:  # older torch has no get_cpu_capability
        return None


def read_cpu_facts() -> CpuFacts:
    info = parse_cpuinfo(_read("/proc/cpuinfo") or "")
    lscpu_text = _lscpu()
    ls = parse_lscpu(lscpu_text) if lscpu_text else {}
    flags = info["flags"] or ls.get("flags") or set()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = None
    return CpuFacts(
        model=info["model"] or ls.get("model"),
        logical_cpus=info["logical_cpus"] or ls.get("logical_cpus") or os.cpu_count(),
        usable_cpus=usable,
        physical_cores=info["physical_cores"] or ls.get("physical_cores"),
        numa_nodes=_numa_nodes_from_sysfs() or ls.get("numa_nodes"),
        isas=isas_from_flags(flags) if flags else None,
        torch_capability=_torch_capability(),
    )
