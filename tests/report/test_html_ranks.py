"""The cross-rank section of the doctor's page (report/ranks_html.py) and its communication
section (report/comms_html.py), on a generated 2-rank GPU job whose rank 1 works 6 ms more
per step: the figures on the page are the JSON report's, the straggler's row is set apart,
a single trace gets no cross-rank section, and a trace's own text is escaped."""

from __future__ import annotations

import gzip
import json
import statistics
from html.parser import HTMLParser

import pytest

from torchpace.cli import main
from torchpace.report.html_parts import HIGHLIGHT
from torchpace.report.ranks_html import HEADING

STEP_US = 20_000.0
TRANSFER_US = 2_000.0  # the all-reduce's own time, once both ranks have arrived
STEPS = 4
WORK_US = (4_000.0, 10_000.0)  # each rank's compute per step: rank 1 is the straggler
# A collective name as a trace may carry it: the page must show it as text, never run it.
HOSTILE = "<script>alert('rank')</script>"


def _x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}  # fmt: skip


def _collective(name, group, ts, kernel, kernel_ts, kernel_dur, correlation):
    """A c10d call (record_param_comms: its kind, 4 MiB of floats, 2 ranks) launching its
    NCCL kernel."""
    return [
        _x("record_param_comms", "cpu_op", ts, 10, **{
            "Collective name": name, "In msg nelems": 1 << 20, "dtype": "Float",
            "Group size": 2, "Process Group Name": group}),
        _x("cudaLaunchKernel", "cuda_runtime", ts + 5, 5, correlation=correlation),
        _x(kernel, "kernel", kernel_ts, kernel_dur, tid=7, device=0, stream=8,
           correlation=correlation),
    ]  # fmt: skip


def rank_events(rank: int) -> list[dict]:
    """Each step: the rank's compute, then an all-reduce that ends for both ranks when the
    busier one arrived plus the transfer; rank 0 also runs one call named HOSTILE on a group
    of its own (so that no other rank's call is matched with it)."""
    events = []
    for step in range(STEPS):
        t0, c = step * STEP_US, 10 * step
        arrival = t0 + 100 + WORK_US[rank]
        leave = t0 + 100 + max(WORK_US) + TRANSFER_US
        events += [
            _x(f"ProfilerStep#{step}", "user_annotation", t0, STEP_US - 10),
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 10, 5, correlation=c + 1),
            _x("sgemm", "kernel", t0 + 100, WORK_US[rank], tid=7, device=0, stream=7,
               correlation=c + 1),
            *_collective("allreduce", "0", t0 + 20,
                         "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", arrival,
                         leave - arrival, c + 2),
        ]  # fmt: skip
        if rank == 0:
            kernel = "ncclKernel_SendRecv(ncclDevComm*)"
            events += _collective(HOSTILE, "9", t0 + 40, kernel, leave + 50, 300, c + 3)
    return events


def write_rank(folder, rank: int):
    data = {
        "traceEvents": rank_events(rank),
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
    }
    path = folder / f"rank{rank}.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    return path


def doctor(trace, tmp_path, capsys):
    """The doctor's page and JSON report on ``trace`` (a file, or a folder of ranks)."""
    pytest.importorskip("plotly", reason="plotly (the html extra) is not installed")
    page, report = tmp_path / "report.html", tmp_path / "report.json"
    code = main(["doctor", "--trace", str(trace), "--html", str(page), "--json", str(report)])
    capsys.readouterr()
    assert code == 0
    return page.read_text(), json.loads(report.read_text())


class _Tables(HTMLParser):
    """Every table fed: rows of (the row's class, its cells' text)."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[tuple[str | None, list[str]]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append((dict(attrs).get("class"), []))
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1][1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def tables_after(page: str, heading: str) -> list[list[tuple[str | None, list[str]]]]:
    """The tables from the section of ``heading`` to the page's end, in their order."""
    parser = _Tables()
    parser.feed(page[page.index(f"<h2>{heading}") :])
    return parser.tables


@pytest.fixture
def job(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in (0, 1):
        write_rank(folder, rank)
    return folder


def test_a_jobs_page_shows_the_cross_rank_figures_of_its_json(job, tmp_path, capsys):
    page, report = doctor(job, tmp_path, capsys)
    cross = report["cross_rank"]
    assert cross["straggler"] == 1  # the generated job's premise
    ranks, skew, findings, comms = tables_after(page, HEADING)[:4]
    # each rank's row: its figures as the JSON has them, the straggler's row set apart
    header, *rows = ranks
    assert header[1][:5] == ["rank", "median step", "own work", "in collectives", "of it waiting"]
    assert [cells[0] for _, cells in rows] == [str(r["rank"]) for r in cross["ranks"]]
    for (row_class, cells), r, waits in zip(
        rows, cross["ranks"], cross["rank_wait_per_step"], strict=True
    ):
        assert cells[1:4] == [
            f"{r['median_step_ms']:.1f} ms",
            f"{r['work_ms']:.1f} ms",
            f"{r['collective_ms']:.1f} ms ({r['collective_on']})",
        ]
        assert cells[4] == f"{statistics.median(waits):.1f} ms"
        assert (row_class == HIGHLIGHT) == (r["rank"] == cross["straggler"])
    assert "straggler: rank 1" in page and "rank 1 (straggler)" in page  # the words, the chart
    # each collective kind: its time, the wait for the last rank and the transfer
    _, *skew_rows = skew
    assert [cells for _, cells in skew_rows] == [
        [c["kind"], f"{c['calls_per_step']:g}", f"{c['ms_per_step']:.2f} ms",
         f"{c['wait_ms_per_step']:.2f} ms", f"{c['transfer_ms_per_step']:.2f} ms",
         f"rank {c['slowest_rank']} ({100 * c['slowest_share']:.0f}% of the wait)"]
        for c in cross["collective_skew"]
    ]  # fmt: skip
    assert [c["kind"] for c in cross["collective_skew"]] == ["all_reduce"]
    # the job's findings, and the collectives' bandwidth by kind and size
    job_codes = [f["code"] for f in report["findings"] if f["code"].startswith("TP5")]
    assert "TP505" in job_codes and [cells[0] for _, cells in findings[1:]] == job_codes
    _, *comm_rows = comms
    collectives = report["communication"]["collectives"]
    assert [(cells[0], cells[-1]) for _, cells in comm_rows] == [
        (c["kind"], "-" if c["busbw_gbps"] is None else f"{c['busbw_gbps']:.1f}")
        for c in collectives
    ]
    assert any(c["busbw_gbps"] for c in collectives)


def test_a_single_trace_has_no_cross_rank_section(job, tmp_path, capsys):
    page, report = doctor(job / "rank0.json.gz", tmp_path, capsys)
    assert "cross_rank" not in report
    assert f"<h2>{HEADING}" not in page
    assert "<h2>Communication</h2>" in page  # its collectives still are on the page


def test_text_from_the_trace_is_escaped(job, tmp_path, capsys):
    page, report = doctor(job, tmp_path, capsys)
    assert HOSTILE.lower() in [c["kind"] for c in report["communication"]["collectives"]]
    assert "<script>alert(" not in page
    assert "&lt;script&gt;alert(&#x27;rank&#x27;)&lt;/script&gt;" in page
