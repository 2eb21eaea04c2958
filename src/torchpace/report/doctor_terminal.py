"""The doctor's terminal report (rich), drawn from the same DoctorReport (report/model.py)
that `--json` writes, so that the two never disagree. It fits one screen: header, breakdown,
findings, trace path."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from torchpace.printable import printable, printable_fields
from torchpace.report import roofline
from torchpace.report.comms_terminal import render_communication
from torchpace.report.memory_model import BatchHeadroom, MemoryReport, PeakSplitReport
from torchpace.report.model import GPU_BUSY, DoctorReport, GpuPart, Row, Throughput
from torchpace.report.window_model import RowCoverage, WindowCheckReport

BAR_WIDTH = 60
# The step breakdown's colours (report/model.Row names the rows and their labels); a row
# without a colour here fails the render (and its test) instead of missing from the screen.
ROW_COLOURS = {
    Row.DATA_WAIT: "magenta",
    Row.H2D_PAGEABLE: "yellow",
    Row.FORWARD: "cyan",
    Row.BACKWARD: "blue",
    Row.OPTIMIZER: "green",
    Row.SYNC_WAIT: "red",
    Row.COLLECTIVE: "bright_red",
    Row.RANK_WAIT: "bright_magenta",
    Row.OTHER: "white",
}
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}
# Below this GPU busy share an idle GPU is worth pointing at even without a finding.
NOTABLE_BUSY_SHARE = 0.7
# Findings shown with their fix; the rest one line each, to keep the report on one screen.
DETAILED_FINDINGS = 4


def render(report: DoctorReport, console: Console | None = None) -> None:
    console = console or Console()
    # the script's names (argv, files, classes, its errors) are shown, never obeyed
    report = printable_fields(report)
    console.print(_header(report))
    warning = window_warning(report.window_check)
    if warning:
        console.print(Text(warning, style="bold yellow"))
    if report.breakdown_ms:
        console.print(_breakdown(report))
    extra = _device_and_memory_lines(report)
    if extra:
        console.print(extra)
    if report.communication:
        render_communication(report.communication, console)
    speed = roofline.terminal(report.speed_of_light)
    if speed is not None:
        console.print(speed)
    console.print(_findings(report))
    if report.trace:
        note = " (truncated at the size cap)" if report.trace_truncated else ""
        console.print(f"[dim]trace{note}: {escape(report.trace)} - {report.open_trace}[/dim]")


def window_warning(check: WindowCheckReport | None) -> str | None:
    """The lines that say the window was disturbed (doctor/disturbance.py), or None."""
    if not check or not check.disturbed:
        if check and check.remeasured_from:
            return "⚠ the first window was disturbed by other work; this report is of a second run"
        return None
    lines = ["⚠ the profiled window was disturbed: " + "; ".join(check.reasons)]
    if check.remeasured_from:
        lines.append("  measured twice, disturbed both times")
    lines.append(f"  {check.advice}")
    return "\n".join(lines)


def _header(report: DoctorReport) -> Panel:
    lines = []
    if report.command:
        command = " ".join(printable(word) for word in report.command)
        lines.append(f"[bold]command[/bold]  {escape(command)}")
    lines.append(f"[bold]env[/bold]      {_env_summary(report)}")
    step = report.step_ms
    if step:
        if report.whole_trace_as_one_step:
            count = "no step markers: the whole trace taken as one step"
        else:
            n = report.steps_captured
            count = f"{n} step{'s' if n != 1 else ''} profiled"
        lines.append(
            f"[bold]steps[/bold]    {count}: {step.median:.1f} ms median "
            f"({step.min:.1f}-{step.max:.1f})"
        )
    if report.step_note:
        lines.append(f"[yellow]note[/yellow]     {escape(report.step_note)}")
    speed = _throughput_line(report.throughput)
    if speed:
        lines.append(f"[bold]speed[/bold]    {speed}")
    if not report.complete:
        lines.append(f"[bold red]status[/bold red]   {report.status}")
    return Panel("\n".join(lines), title="torchpace doctor", title_align="left")


def _throughput_line(t: Throughput | None) -> str | None:
    """The headline figure and its spread: samples/s over the measured steps."""
    if not t:
        return None
    rate = f"{t.samples_per_s:g} samples/s" if t.samples_per_s else "samples unknown"
    which = "unprofiled" if t.unprofiled else "profiled"  # which steps were timed, said
    line = (
        f"{rate}, {t.step_ms_mean:.1f} ms/step mean over {t.steps} {which} steps "
        f"({t.seconds:.1f} s); steps p10-p90 {t.step_ms_p10:.1f}-{t.step_ms_p90:.1f} ms"
    )
    halves = t.first_half_samples_per_s, t.second_half_samples_per_s
    if all(halves):
        line += f"; halves {halves[0]:g} / {halves[1]:g} samples/s"
    if not t.unprofiled:
        line += (
            " [yellow](no unprofiled step was timed: the script ended before them; "
            "the profiler slows these)[/yellow]"
        )
    return line


def _env_summary(report: DoctorReport) -> str:
    env = report.env
    parts = [f"torch {env.torch}, python {env.python}"] if env else []
    dev = report.device
    if dev.name:
        parts.append(f"{dev.name} (sm {dev.capability})")
    proc = report.process
    if proc:
        if not dev.name:
            parts.append(proc.device)
        parts.append(f"{proc.intra_op_threads} threads / {proc.usable_cpus} usable CPUs")
        if proc.cuda_available:
            parts.append(f"TF32 matmul {'on' if proc.tf32_matmul else 'off'}")
    lf = report.largest_loader()
    if lf:
        parts.append(
            f"DataLoader workers={lf.num_workers} pin_memory={lf.pin_memory} batch={lf.batch_size}"
        )
    return ", ".join(parts) or "the trace's own: no run facts beside it"


def _breakdown(report: DoctorReport) -> Group:
    step = report.step_ms.median or 1.0
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
    table.add_column("per step")
    table.add_column("median ms", justify="right")
    table.add_column("min-max", justify="right")
    table.add_column("share", justify="right")
    bar = Text()
    # a row's share of the profiled steps' total time: the shares add up to 100%
    pct = report.breakdown_pct
    for row, stat in report.breakdown_ms.items():
        colour = ROW_COLOURS[row]
        if stat.max <= 0:
            continue
        share = pct[row] / 100 if row in pct else stat.median / step
        table.add_row(
            Text(row.label, style=colour),
            f"{stat.median:.2f}",
            f"{stat.min:.2f}-{stat.max:.2f}",
            f"{100 * share:.0f}%",
        )
        bar.append("█" * round(BAR_WIDTH * min(share, 1.0)), style=colour)
    unexplained = unexplained_line(report.coverage)
    if unexplained:
        return Group(table, bar, Text(unexplained, style="yellow"))
    return Group(table, bar)


def unexplained_line(coverage: tuple[RowCoverage, ...]) -> str | None:
    """The breakdown's large rows that no finding explains (doctor/coverage.py)."""
    rows = [c for c in coverage if not c.explained]
    if not rows:
        return None
    return (
        "unexplained: "
        + ", ".join(f"{Row(c.row).label} {c.ms:.1f} ms ({c.pct:.0f}% of the step)" for c in rows)
        + " - no finding acts on these rows"
    )


def _gpu_split(report: DoctorReport) -> str | None:
    """What the device did over the profiled steps, in shares that add up to 100%."""
    pct = report.gpu_split_pct or {}
    shown = [f"{part.label} {pct[part]:.0f}%" for part in GpuPart if pct.get(part, 0) >= 0.5]
    return f"GPU time in the steps: {', '.join(shown)}" if shown else None


IDLE_CAUSES = {
    "idle_data_ms": "data",
    "idle_sync_ms": "syncs",
    "idle_launch_ms": "launch",
    "idle_host_ms": "host",
}


def _idle_causes(gpu) -> str:
    """The idle's causes (doctor/idle.py), largest first: ": data 40.1, host 3.2"."""
    causes = [(gpu.stats[k].median, label) for k, label in IDLE_CAUSES.items() if k in gpu.stats]
    shown = [f"{label} {ms:.1f}" for ms, label in sorted(causes, reverse=True) if ms >= 0.05]
    return f": {', '.join(shown)}" if shown else ""


def _device_and_memory_lines(report: DoctorReport) -> Text | None:
    lines = []
    gpu = report.gpu
    step = report.step_ms.median if report.step_ms else None
    if gpu and step:
        busy = gpu.median(GPU_BUSY)
        kernels = gpu.median("kernels", 0)
        matmul = gpu.median("matmul_ms")
        tc = gpu.median("matmul_tensor_core_ms")
        tf32 = gpu.median("matmul_tf32_ms")
        tc_share = f", tensor cores {100 * tc / matmul:.0f}% of matmul/conv" if matmul else ""
        if matmul and tf32:  # TF32 is a tensor-core format, at half the bf16 rate on sm80+
            tc_share += f" ({100 * tf32 / matmul:.0f}% in TF32)"
        idle = gpu.median(GpuPart.IDLE.value, max(step - busy, 0))
        lines.append(
            f"GPU busy {100 * min(busy / step, 1):.0f}% of the step "
            f"({idle:.1f} ms idle{_idle_causes(gpu)}), {kernels:.0f} kernels/step{tc_share}"
        )
        split = _gpu_split(report)
        if split:
            comm = gpu.median("gpu_comm_ms")
            if comm:
                alone = gpu.median(GpuPart.COMM_ALONE.value)
                alone += gpu.median(GpuPart.RANK_WAIT.value)
                split += f" (NCCL {comm:.1f} ms/step, {100 * (1 - alone / comm):.0f}% overlapped)"
            lines.append(split)
        if busy / step < NOTABLE_BUSY_SHARE and not report.findings:
            lines.append(
                "the GPU idles with no cause found here: open the trace and look at "
                "what the CPU does in the gaps"
            )
    lines += memory_lines(report.memory)
    return Text("\n".join(lines), style="dim") if lines else None


def memory_lines(mem: MemoryReport) -> list[str]:
    """The peaks, the headroom and growth in one line, then the view of the peak."""
    lines = []
    parts = []
    for device, value in mem.peaks.items():
        if device == "cpu":  # the profiler counts only what the window allocated
            parts.append(f"cpu peak {_mib(value)} of what the profiled window allocated")
        else:
            parts.append(f"{device} peak {_mib(value)} allocated")
    if mem.host_rss_bytes is not None:
        parts.append(f"host RSS {_mib(mem.host_rss_bytes)} (the whole process)")
    if mem.headroom_bytes is not None:
        parts.append(f"headroom {mem.headroom_bytes / 2**30:.1f} GiB")
    for g in mem.growth:
        parts.append(f"{g.source} growth {g.bytes_per_step / 1024:.1f} KiB/step")
    if parts:
        lines.append("memory: " + ", ".join(parts))
    return lines + _memory_view(mem)


SPARK = "▁▂▃▄▅▆▇█"
SPLIT_LABELS = {
    "parameters": "params",
    "gradients": "grads",
    "optimizer_state": "optimizer",
    "activations": "activations",
    "rest": "rest",
}


def _memory_view(mem: MemoryReport) -> list[str]:
    """The split at the peak, the lines filling it, and the window's timeline in one row."""
    lines = []
    if mem.split_at_peak:
        lines += _split_lines(mem.split_at_peak)
    sites = [s for s in mem.top_sites if s.location][:3]
    if sites:
        lines.append(
            "activations by line: "
            + ", ".join(f"{s.location} {s.bytes / 2**20:.1f} MiB" for s in sites)
        )
    if mem.batch_headroom:
        lines.append(_headroom_line(mem.batch_headroom))
    timeline = mem.timeline
    if timeline and timeline.points:
        values = [v for _, v in timeline.points]
        lo, hi = min(values), max(values)
        step = max((hi - lo) / (len(SPARK) - 1), 1)
        row = "".join(SPARK[round((v - lo) / step)] for v in values[-BAR_WIDTH:])
        lines.append(
            f"{timeline.device} allocated {lo / 2**20:.0f}-{hi / 2**20:.0f} MiB over "
            f"the window: {row}"
        )
    return lines


def _mib(nbytes: float) -> str:
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    return f"{nbytes / 2**20:.0f} MiB"


def _headroom_line(room: BatchHeadroom) -> str:
    under = f" under {room.capacity_text}" if room.capacity_text else ""
    return (
        f"batch {room.batch_size}: about {room.largest_batch_estimate} would fit"
        f"{under} ({room.per_sample_bytes / 2**20:.2f} MiB per sample; an estimate: "
        "`torchpace tune --allow-batch-size` checks it)"
    )


def _split_lines(split: PeakSplitReport) -> list[str]:
    """The split at the peak: what the peak counts, the memory there is, and each part in MiB
    and % of what the step's tensors can use (the capacity less what is held besides them)."""
    what = (
        " of live tensors (the window's allocations + parameters and optimizer state from "
        "before it)"
        if split.device == "cpu"
        else " allocated"
    )
    head = f"memory at the peak of step {split.step}: {_mib(split.peak)}{what}"
    usable = split.usable_bytes
    pct = split.pct_of_usable
    if usable and split.capacity_text:
        outside = split.outside or 0
        besides = f" less {_mib(outside)} held besides them" if outside else ""
        head += (
            f", {100 * split.peak / usable:.0f}% of the {_mib(usable)} they can use "
            f"({split.capacity_text}{besides})"
        )
    cells = [
        f"{label} {_mib(split.parts[key])}" + (f" ({pct[key]:.0f}%)" if pct else "")
        for key, label in SPLIT_LABELS.items()
    ]
    moment = split.moment
    at = f"split at {moment}" if moment else "split"
    of = f", % of the {_mib(usable)}" if pct else ""
    return [head, f"  {at}{of}: " + ", ".join(cells)]


def _findings(report: DoctorReport) -> Group | Text:
    findings = report.findings
    if not findings:
        return Text(f"✓ {report.verdict}", style="bold green")
    parts: list = [Text("findings, most important first", style="bold underline")]
    for i, f in enumerate(findings, 1):
        saving = "saving not estimated" if f.saving_ms is None else f"{f.saving_ms:.1f} ms"
        if f.saving_pct is not None:
            saving += f" ({f.saving_pct:.0f}% of step)"
        if f.ends_job:  # its cost is the job, not ms per step
            saving = f.ends_job
        line = Text(f"{i}. ")
        line.append(f"{f.code} {f.severity}", style=SEVERITY_STYLE[f.severity])
        line.append(f"  {saving}  ", style="bold")
        line.append(f"{f.title}: {f.detail}")
        if i <= DETAILED_FINDINGS:
            if f.location:
                line.append(f"\n   at {f.location}", style="cyan")
            line.append(f"\n   fix: {f.fix}")
            evidence = ", ".join(f"{k}={v}" for k, v in f.evidence.items())
            knob = f"; tune knob: {f.knob}" if f.knob else ""
            line.append(f"\n   evidence: {evidence}{knob}", style="dim")
            for note in f.notes:
                line.append(f"\n   note: {note}", style="dim")
        parts.append(line)
    return Group(*parts)
