"""`torchpace compare`'s content, built once from compare/diff.py's dict: the rows, the
verdict sentence and the gate line that the terminal (report/compare_terminal.py) and the
HTML page (report/html.py's compare_html) both draw, in the same order, with the same
words and numbers. A renderer decides only how a row looks (colour, a table or a chart),
never what is in it: two bodies that each wrote the content had drifted apart (the verdict
worded twice, the memory ratio in one only, the gate line first in one and last in the
other).

The order, top to bottom: the sides, the warnings, the summary (step time, samples/s, GPU
busy, peak memory, each with B/A where it has one), the verdict, the breakdown by phase, the
findings that appeared or went away, the operators whose time changed most, the gate.
"""

from __future__ import annotations

from dataclasses import dataclass

# Operator rows shown (the JSON keeps more): the same in the terminal and the page.
SHOWN_OPS = 10
MIB = 2**20
TONE = {"B is slower": "slower", "B is faster": "faster"}


@dataclass(frozen=True)
class SideRow:
    name: str  # "A" or "B"
    path: str
    status: str | None
    device: str | None
    command: str


@dataclass(frozen=True)
class SummaryRow:
    label: str
    a: str
    b: str
    ratio: str  # B/A, "" where a ratio means nothing (GPU busy)


@dataclass(frozen=True)
class PhaseRow:
    label: str
    a_ms: float
    b_ms: float
    delta_ms: float

    def cells(self) -> tuple[str, str, str, str]:
        """The row as both renderers print it."""
        return self.label, f"{self.a_ms:.2f}", f"{self.b_ms:.2f}", f"{self.delta_ms:+.2f} ms"


@dataclass(frozen=True)
class FindingRow:
    change: str  # "appeared" or "gone"
    code: str
    title: str
    severity: str
    location: str


@dataclass(frozen=True)
class OpRow:
    name: str
    a_ms: float
    b_ms: float
    delta_ms: float
    a_calls: float
    b_calls: float

    def cells(self) -> tuple[str, str, str, str, str]:
        """The row as both renderers print it."""
        return (
            self.name,
            f"{self.a_ms:.3f}",
            f"{self.b_ms:.3f}",
            f"{self.delta_ms:+.2f} ms",
            f"{self.a_calls:g}/{self.b_calls:g}",
        )


@dataclass(frozen=True)
class Gate:
    line: str
    failed: bool


@dataclass(frozen=True)
class CompareRows:
    sides: tuple[SideRow, SideRow]
    warnings: tuple[str, ...]
    summary: tuple[SummaryRow, ...]
    verdict: str  # "B is slower", "B is faster", "within the noise", ...
    verdict_detail: str  # the parenthesis after it: the change and the noise
    tone: str  # "slower", "faster" or "": how a renderer colours the verdict
    phases: tuple[PhaseRow, ...]
    findings: tuple[FindingRow, ...]
    ops_title: str  # "kernels whose time per step changed most (device ms)"
    ops: tuple[OpRow, ...]
    ops_more: int  # rows the JSON holds beyond the ones shown
    ops_note: str | None  # why operators were not compared
    gate: Gate | None

    @property
    def verdict_sentence(self) -> str:
        return self.verdict + self.verdict_detail

    @property
    def ops_more_line(self) -> str:
        return f"... {self.ops_more} more in the JSON (--json)"


def _num(value, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _side(name: str, side: dict) -> SideRow:
    return SideRow(
        name, side["path"], side.get("status"), side.get("device"), " ".join(side["command"] or [])
    )


def _summary(result: dict) -> tuple[SummaryRow, ...]:
    a, b = result["a"], result["b"]
    rows = [
        SummaryRow(
            "step ms (median)",
            _num(a["step_ms"]),
            _num(b["step_ms"]),
            _num(result["step_ratio"], "{:.3f}x"),
        )
    ]
    if a["samples_per_s"] or b["samples_per_s"]:  # a bare trace knows no batch size
        rows.append(
            SummaryRow(
                "samples/s",
                _num(a["samples_per_s"], "{:,.1f}"),
                _num(b["samples_per_s"], "{:,.1f}"),
                _num(result["throughput_ratio"], "{:.3f}x"),
            )
        )
    if a["gpu_busy_pct"] is not None or b["gpu_busy_pct"] is not None:
        busy_a, busy_b = a["gpu_busy_pct"], b["gpu_busy_pct"]
        rows.append(SummaryRow("GPU busy", _num(busy_a, "{:.0f}%"), _num(busy_b, "{:.0f}%"), ""))
    for key in sorted(set(a["peak_memory"]) | set(b["peak_memory"])):
        va, vb = a["peak_memory"].get(key), b["peak_memory"].get(key)
        rows.append(
            SummaryRow(
                key.replace("_", " "),
                _num(va and va / MIB, "{:,.0f} MiB"),
                _num(vb and vb / MIB, "{:,.0f} MiB"),
                _num(vb / va if va and vb else None, "{:.3f}x"),
            )
        )
    return tuple(rows)


def _verdict_detail(result: dict) -> str:
    if result["slowdown_pct"] is None:
        return ""
    a, b = result["a"], result["b"]
    return (
        f" ({result['slowdown_pct']:+.1f}% step time; noise of the medians "
        f"±{2 * result['noise_pct']:.1f}%, {a['steps']} and {b['steps']} "
        f"{result['steps_compared']})"
    )


def _gate(gate: dict | None) -> Gate | None:
    if not gate:
        return None
    word = "FAILED" if gate["failed"] else "passed"
    line = f"gate --fail-if-slower {gate['fail_if_slower_pct']:g}: {word}: {gate['reason']}"
    return Gate(line, bool(gate["failed"]))


def build(result: dict) -> CompareRows:
    """The rows of ``result`` (compare/diff.py's dict, as its JSON holds it)."""
    ops = result["ops"]
    unit = "device" if ops["kind"] == "kernel" else "host, inclusive"
    return CompareRows(
        sides=(_side("A", result["a"]), _side("B", result["b"])),
        warnings=tuple(result.get("warnings") or ()),
        summary=_summary(result),
        verdict=result["verdict"],
        verdict_detail=_verdict_detail(result),
        tone=TONE.get(result["verdict"], ""),
        phases=tuple(
            PhaseRow(r["label"], r["a_ms"], r["b_ms"], r["delta_ms"])
            for r in result["breakdown"]
            if r["a_ms"] or r["b_ms"]  # a phase neither run has says nothing
        ),
        findings=tuple(
            FindingRow(change, f["code"], f["title"], f["severity"], f["location"] or "")
            for change in ("appeared", "gone")
            for f in result["findings"][change]
        ),
        ops_title=f"{ops['kind']}s whose time per step changed most ({unit} ms)",
        ops=tuple(
            OpRow(
                r["name"],
                r["a_ms_per_step"],
                r["b_ms_per_step"],
                r["delta_ms_per_step"],
                r["a_count_per_step"],
                r["b_count_per_step"],
            )
            for r in ops["rows"][:SHOWN_OPS]
        ),
        ops_more=max(0, len(ops["rows"]) - SHOWN_OPS),
        ops_note=None if ops["rows"] else ops["note"],
        gate=_gate(result.get("gate")),
    )
