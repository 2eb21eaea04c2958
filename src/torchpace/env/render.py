"""The `torchpace env` table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from torchpace.env.facts import EnvFacts

UNKNOWN = "unknown"


def _v(value) -> str:
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (tuple, list)):
        return ", ".join(str(x) for x in value) or "none"
    return str(value)


def _gib(n: int | None) -> str:
    return UNKNOWN if n is None else f"{n / 2**30:.1f} GiB"


def env_rows(facts: EnvFacts) -> list[tuple[str, str, str]]:
    """(section, key, value) rows; the doctor's header reuses the short ones."""
    t, c, p = facts.torch, facts.cpu, facts.process
    rows = [
        ("software", "python", facts.python),
        ("software", "platform", facts.platform),
        ("software", "torch", t.torch),
        ("software", "CUDA (build)", _v(t.cuda) if t.cuda else "none (CPU build)"),
        ("software", "cuDNN", _v(t.cudnn)),
        ("software", "NCCL", _v(t.nccl)),
        ("devices", "CUDA available", _v(t.cuda_available)),
    ]
    for d in t.devices:
        rows.append(
            (
                "devices",
                f"cuda:{d.index}",
                f"{d.name}, {_gib(d.total_memory_bytes)}, sm {d.capability}, "
                f"{d.multiprocessors} SMs, tensor cores: {_v(d.tensor_core_dtypes)}",
            )
        )
    rows += [
        ("devices", "pinned memory", t.pinned_memory),
        ("cpu", "model", _v(c.model)),
        ("cpu", "logical CPUs / usable", f"{_v(c.logical_cpus)} / {_v(c.usable_cpus)}"),
        ("cpu", "physical cores", _v(c.physical_cores)),
        ("cpu", "NUMA nodes", _v(c.numa_nodes)),
        ("cpu", "instruction sets", _v(c.isas)),
        ("cpu", "native bf16", _v(c.bf16_native)),
        ("cpu", "torch kernels use", _v(c.torch_capability)),
        (
            "process",
            "intra-op / inter-op threads",
            f"{_v(p.intra_op_threads)} / {_v(p.inter_op_threads)}",
        ),
        (
            "process",
            "OMP/KMP/MKL variables",
            ", ".join(f"{k}={v}" for k, v in p.thread_env.items()) or "none set",
        ),
        (
            "process",
            "allocator",
            p.allocator + (f" (LD_PRELOAD={p.ld_preload})" if p.ld_preload else ""),
        ),
        ("process", "OpenMP preloaded", _v(p.openmp_preload) if p.openmp_preload else "no"),
        ("process", "/dev/shm size / free", f"{_gib(p.shm_bytes)} / {_gib(p.shm_free_bytes)}"),
    ]
    return rows


def peak_rows(peaks) -> list[tuple[str, str, str]]:
    """One row per device: the measured matmul FLOP/s per dtype and the copy bandwidth, and
    on a GPU the datasheet's figures beside them."""
    from torchpace.env.peak import rate_text

    rows = []
    for p in peaks:
        where = f"{p.device} ({p.threads} threads)" if p.threads else p.device
        measured = ", ".join(
            f"{d} {rate_text(rate)}"
            + (f" (datasheet {rate_text(p.datasheet_flops[d])})" if d in p.datasheet_flops else "")
            for d, rate in p.matmul_flops.items()
        )
        bandwidth = rate_text(p.bandwidth, "B/s")
        if p.datasheet_bandwidth:
            bandwidth += f" (datasheet {rate_text(p.datasheet_bandwidth, 'B/s')})"
        how = "cached" if p.cached else f"measured in {p.probe_s:.2f} s"
        rows.append(("peak", f"{where} matmul", f"{measured or 'unknown'} ({how})"))
        rows.append(("peak", f"{where} memory copy", bandwidth))
    return rows


def print_env(facts: EnvFacts, peaks=(), console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="torchpace env", show_header=True, header_style="bold")
    table.add_column("", style="dim")
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    last = None
    for section, key, value in [*env_rows(facts), *peak_rows(peaks)]:
        table.add_row(section if section != last else "", key, value)
        last = section
    console.print(table)
