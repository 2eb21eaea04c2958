"""The doctor's terminal report (rich), drawn from the same dict that `--json` writes, so
that the two never disagree. It fits one screen: header, breakdown, findings, trace path."""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from torchpace.facts.run import Status
from torchpace.report import roofline
from torchpace.report.comms_terminal import render_communication

BAR_WIDTH = 60
# The step breakdown's rows: the doctor's metric -> (label, colour). The rows come in the
# order of the report's breakdown; a metric without a label here fails the render (and its
# test) instead of silently missing from the screen.
PHASES = {
    "data_wait_ms": ("data wait", "magenta"),
    "h2d_pageable_host_ms": ("H2D copy (host blocked)", "yellow"),
    "forward_ms": ("forward", "cyan"),
    "backward_ms": ("backward", "blue"),
    "optimizer_ms": ("optimizer", "green"),
    "sync_wait_ms": ("sync wait", "red"),
    "collective_ms": ("collectives", "bright_red"),
    "rank_wait_ms": ("waiting for other ranks", "bright_magenta"),
    "other_ms": ("other (unattributed)", "white"),
}
# The device's split of the step (doctor/result.GPU_SPLIT): metric -> label.
GPU_SPLIT = {
    "gpu_compute_ms": "compute",
    "gpu_comm_alone_ms": "communication alone",
    "gpu_rank_wait_ms": "waiting for other ranks",
    "gpu_copy_alone_ms": "copies alone",
    "gpu_idle_ms": "idle",
}
# The doctor's status for a report on a --trace file, where no run took place.
TRACE_STATUS = "trace"
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}
# Below this GPU busy share an idle GPU is worth pointing at even without a finding.
NOTABLE_BUSY_SHARE = 0.7
# Findings shown with their fix; the rest one line each, to keep the report on one screen.
DETAILED_FINDINGS = 4


def render(report: dict, console: Console | None = None) -> None:
    console = console or Console()
    console.print(_header(report))
    warning = window_warning(report.get("window_check"))
    if warning:
        console.print(Text(warning, style="bold yellow"))
    if report["breakdown_ms"]:
        console.print(_breakdown(report))
    extra = _device_and_memory_lines(report)
    if extra:
        console.print(extra)
    if report.get("communication"):
        render_communication(report["communication"], console)
    speed = roofline.terminal(report.get("speed_of_light"))
    if speed is not None:
        console.print(speed)
    console.print(_findings(report))
    if report["trace"]:
        note = " (truncated at the size cap)" if report["trace_truncated"] else ""
        console.print(f"[dim]trace{note}: {report['trace']} - {report['open_trace']}[/dim]")


def window_warning(check: dict | None) -> str | None:
    """The lines that say the window was disturbed (doctor/disturbance.py), or None."""
    if not check or not check.get("disturbed"):
        if check and check.get("remeasured_from"):
            return "⚠ the first window was disturbed by other work; this report is of a second run"
        return None
    lines = ["⚠ the profiled window was disturbed: " + "; ".join(check["reasons"])]
    if check.get("remeasured_from"):
        lines.append("  measured twice, disturbed both times")
    lines.append(f"  {check['advice']}")
    return "\n".join(lines)


def _header(report: dict) -> Panel:
    lines = []
    if report["command"]:
        lines.append(f"[bold]command[/bold]  {' '.join(report['command'])}")
    lines.append(f"[bold]env[/bold]      {_env_summary(report)}")
    step = report["step_ms"]
    if step:
        if report["whole_trace_as_one_step"]:
            count = "no step markers: the whole trace taken as one step"
        else:
            n = report["steps_captured"]
            count = f"{n} step{'s' if n != 1 else ''} profiled"
        lines.append(
            f"[bold]steps[/bold]    {count}: {step['median']:.1f} ms median "
            f"({step['min']:.1f}-{step['max']:.1f})"
        )
    speed = _throughput_line(report.get("throughput"))
    if speed:
        lines.append(f"[bold]speed[/bold]    {speed}")
    if report["status"] not in (Status.COMPLETE, TRACE_STATUS):
        lines.append(f"[bold red]status[/bold red]   {report['status']}")
    return Panel("\n".join(lines), title="torchpace doctor", title_align="left")


def _throughput_line(t: dict | None) -> str | None:
    """The headline figure and its spread: samples/s over the measured steps."""
    if not t:
        return None
    rate = f"{t['samples_per_s']:g} samples/s" if t["samples_per_s"] else "samples unknown"
    line = (
        f"{rate}, {t['step_ms_mean']:.1f} ms/step mean over {t['steps']} steps "
        f"({t['seconds']:.1f} s); steps p10-p90 {t['step_ms_p10']:.1f}-{t['step_ms_p90']:.1f} ms"
    )
    halves = t["first_half_samples_per_s"], t["second_half_samples_per_s"]
    if all(halves):
        line += f"; halves {halves[0]:g} / {halves[1]:g} samples/s"
    if not t["unprofiled"]:
        line += " [yellow](profiled steps: the profiler slows them)[/yellow]"
    return line


def _env_summary(report: dict) -> str:
    env = report["env"]
    parts = [f"torch {env['torch']}, python {env['python']}"] if env else []
    dev = report["device"]
    if dev["name"]:
        parts.append(f"{dev['name']} (sm {dev['capability']})")
    proc = report["process"]
    if proc:
        if not dev["name"]:
            parts.append(proc["device"])
        parts.append(f"{proc['intra_op_threads']} threads / {proc['usable_cpus']} usable CPUs")
        if proc["cuda_available"]:
            parts.append(f"TF32 matmul {'on' if proc['tf32_matmul'] else 'off'}")
    loaders = report["loaders"]
    if loaders:
        lf = max(loaders, key=lambda x: x["batches_seen"])
        parts.append(
            f"DataLoader workers={lf['num_workers']} pin_memory={lf['pin_memory']} "
            f"batch={lf['batch_size']}"
        )
    return ", ".join(parts) or "the trace's own: no run facts beside it"


def _breakdown(report: dict) -> Group:
    step = report["step_ms"]["median"] or 1.0
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
    table.add_column("per step")
    table.add_column("median ms", justify="right")
    table.add_column("min-max", justify="right")
    table.add_column("share", justify="right")
    bar = Text()
    # a row's share of the profiled steps' total time: the shares add up to 100%
    pct = report.get("breakdown_pct") or {}
    for name, stat in report["breakdown_ms"].items():
        label, colour = PHASES[name]
        if stat["max"] <= 0:
            continue
        share = pct[name] / 100 if name in pct else stat["median"] / step
        table.add_row(
            Text(label, style=colour),
            f"{stat['median']:.2f}",
            f"{stat['min']:.2f}-{stat['max']:.2f}",
            f"{100 * share:.0f}%",
        )
        bar.append("█" * round(BAR_WIDTH * min(share, 1.0)), style=colour)
    unexplained = unexplained_line(report.get("coverage"))
    if unexplained:
        return Group(table, bar, Text(unexplained, style="yellow"))
    return Group(table, bar)


def unexplained_line(coverage: list[dict] | None) -> str | None:
    """The breakdown's large rows that no finding explains (doctor/coverage.py)."""
    rows = [c for c in coverage or [] if not c["explained"]]
    if not rows:
        return None
    return (
        "unexplained: "
        + ", ".join(
            f"{PHASES[c['row']][0]} {c['ms']:.1f} ms ({c['pct']:.0f}% of the step)" for c in rows
        )
        + " - no finding acts on these rows"
    )


def _gpu_split(report: dict) -> str | None:
    """What the device did over the profiled steps, in shares that add up to 100%."""
    pct = report.get("gpu_split_pct") or {}
    shown = [f"{label} {pct[k]:.0f}%" for k, label in GPU_SPLIT.items() if pct.get(k, 0) >= 0.5]
    return f"GPU time in the steps: {', '.join(shown)}" if shown else None


IDLE_CAUSES = {
    "idle_data_ms": "data",
    "idle_sync_ms": "syncs",
    "idle_launch_ms": "launch",
    "idle_host_ms": "host",
}


def _idle_causes(gpu: dict) -> str:
    """The idle's causes (doctor/idle.py), largest first: ": data 40.1, host 3.2"."""
    causes = [(gpu[k]["median"], label) for k, label in IDLE_CAUSES.items() if k in gpu]
    shown = [f"{label} {ms:.1f}" for ms, label in sorted(causes, reverse=True) if ms >= 0.05]
    return f": {', '.join(shown)}" if shown else ""


def _device_and_memory_lines(report: dict) -> Text | None:
    lines = []
    gpu = report["gpu"]
    step = report["step_ms"]["median"] if report["step_ms"] else None
    if gpu and step:
        busy = gpu.get("gpu_busy_ms", {}).get("median", 0.0)
        kernels = gpu.get("kernels", {}).get("median", 0)
        matmul = gpu.get("matmul_ms", {}).get("median", 0.0)
        tc = gpu.get("matmul_tensor_core_ms", {}).get("median", 0.0)
        tf32 = gpu.get("matmul_tf32_ms", {}).get("median", 0.0)
        tc_share = f", tensor cores {100 * tc / matmul:.0f}% of matmul/conv" if matmul else ""
        if matmul and tf32:  # TF32 is a tensor-core format, at half the bf16 rate on sm80+
            tc_share += f" ({100 * tf32 / matmul:.0f}% in TF32)"
        idle = gpu.get("gpu_idle_ms", {}).get("median", max(step - busy, 0))
        lines.append(
            f"GPU busy {100 * min(busy / step, 1):.0f}% of the step "
            f"({idle:.1f} ms idle{_idle_causes(gpu)}), {kernels:.0f} kernels/step{tc_share}"
        )
        split = _gpu_split(report)
        if split:
            comm = gpu.get("gpu_comm_ms", {}).get("median", 0.0)
            if comm:
                alone = gpu.get("gpu_comm_alone_ms", {}).get("median", 0.0)
                alone += gpu.get("gpu_rank_wait_ms", {}).get("median", 0.0)
                split += f" (NCCL {comm:.1f} ms/step, {100 * (1 - alone / comm):.0f}% overlapped)"
            lines.append(split)
        if busy / step < NOTABLE_BUSY_SHARE and not report["findings"]:
            lines.append(
                "the GPU idles with no cause found here: open the trace and look at "
                "what the CPU does in the gaps"
            )
    mem = report["memory"]
    parts = []
    for key, value in mem.items():
        if key == "cpu_peak_bytes":  # the profiler counts only what the window allocated
            parts.append(f"cpu peak {_mib(value)} of what the profiled window allocated")
        elif key.endswith("_peak_bytes"):
            parts.append(f"{key.removesuffix('_peak_bytes')} peak {_mib(value)} allocated")
        elif key == "host_rss_bytes":
            parts.append(f"host RSS {_mib(value)} (the whole process)")
    if "headroom_bytes" in mem:
        parts.append(f"headroom {mem['headroom_bytes'] / 2**30:.1f} GiB")
    for g in mem["growth"]:
        parts.append(f"{g['source']} growth {g['bytes_per_step'] / 1024:.1f} KiB/step")
    if parts:
        lines.append("memory: " + ", ".join(parts))
    lines += _memory_view(mem)
    return Text("\n".join(lines), style="dim") if lines else None


SPARK = "▁▂▃▄▅▆▇█"
SPLIT_LABELS = {
    "parameters": "params",
    "gradients": "grads",
    "optimizer_state": "optimizer",
    "activations": "activations",
    "rest": "rest",
}


def _memory_view(mem: dict) -> list[str]:
    """The split at the peak, the lines filling it, and the window's timeline in one row."""
    lines = []
    split = mem.get("split_at_peak")
    if split:
        lines += _split_lines(split)
    sites = [s for s in mem.get("top_sites", []) if s["location"]][:3]
    if sites:
        lines.append(
            "activations by line: "
            + ", ".join(f"{s['location']} {s['bytes'] / 2**20:.1f} MiB" for s in sites)
        )
    room = mem.get("batch_headroom")
    if room:
        under = f" under {room['capacity_text']}" if room.get("capacity_text") else ""
        lines.append(
            f"batch {room['batch_size']}: about {room['largest_batch_estimate']} would fit"
            f"{under} ({room['per_sample_bytes'] / 2**20:.2f} MiB per sample; an estimate: "
            "`torchpace tune --allow-batch-size` checks it)"
        )
    timeline = mem.get("timeline")
    if timeline and timeline["points"]:
        values = [v for _, v in timeline["points"]]
        lo, hi = min(values), max(values)
        step = max((hi - lo) / (len(SPARK) - 1), 1)
        row = "".join(SPARK[round((v - lo) / step)] for v in values[-BAR_WIDTH:])
        lines.append(
            f"{timeline['device']} allocated {lo / 2**20:.0f}-{hi / 2**20:.0f} MiB over "
            f"the window: {row}"
        )
    return lines


def _mib(nbytes: float) -> str:
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    return f"{nbytes / 2**20:.0f} MiB"


def _split_lines(split: dict) -> list[str]:
    """The split at the peak: what the peak counts, the memory there is, and each part in MiB
    and % of what the step's tensors can use (the capacity less what is held besides them)."""
    what = (
        " of live tensors (the window's allocations + parameters and optimizer state from "
        "before it)"
        if split["device"] == "cpu"
        else " allocated"
    )
    head = f"memory at the peak of step {split['step']}: {_mib(split['peak'])}{what}"
    usable = split.get("usable_bytes")
    pct = split.get("pct_of_usable")
    if usable and split.get("capacity_text"):
        outside = split.get("outside", 0)
        besides = f" less {_mib(outside)} held besides them" if outside else ""
        head += (
            f", {100 * split['peak'] / usable:.0f}% of the {_mib(usable)} they can use "
            f"({split['capacity_text']}{besides})"
        )
    cells = [
        f"{label} {_mib(split['parts'][key])}" + (f" ({pct[key]:.0f}%)" if pct else "")
        for key, label in SPLIT_LABELS.items()
    ]
    moment = split.get("moment")
    at = f"split at {moment}" if moment else "split"
    of = f", % of the {_mib(usable)}" if pct else ""
    return [head, f"  {at}{of}: " + ", ".join(cells)]


def _findings(report: dict) -> Group | Text:
    findings = report["findings"]
    if not findings:
        return Text(f"✓ {report['verdict']}", style="bold green")
    parts: list = [Text("findings, most important first", style="bold underline")]
    for i, f in enumerate(findings, 1):
        saving = "saving not estimated" if f["saving_ms"] is None else f"{f['saving_ms']:.1f} ms"
        if f["saving_pct"] is not None:
            saving += f" ({f['saving_pct']:.0f}% of step)"
        if f.get("ends_job"):  # its cost is the job, not ms per step
            saving = f["ends_job"]
        line = Text(f"{i}. ")
        line.append(f"{f['code']} {f['severity']}", style=SEVERITY_STYLE[f["severity"]])
        line.append(f"  {saving}  ", style="bold")
        line.append(f"{f['title']}: {f['detail']}")
        if i <= DETAILED_FINDINGS:
            if f["location"]:
                line.append(f"\n   at {f['location']}", style="cyan")
            line.append(f"\n   fix: {f['fix']}")
            evidence = ", ".join(f"{k}={v}" for k, v in f["evidence"].items())
            knob = f"; tune knob: {f['knob']}" if f["knob"] else ""
            line.append(f"\n   evidence: {evidence}{knob}", style="dim")
            for note in f["notes"]:
                line.append(f"\n   note: {note}", style="dim")
        parts.append(line)
    return Group(*parts)
