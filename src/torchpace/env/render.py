"""The `torchpace env` table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from torchpace.env import EnvFacts

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


def print_env(facts: EnvFacts, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="torchpace env", show_header=True, header_style="bold")
    table.add_column("", style="dim")
    table.add_column("fact")
    table.add_column("value", overflow="fold")
    last = None
    for section, key, value in env_rows(facts):
        table.add_row(section if section != last else "", key, value)
        last = section
    console.print(table)
