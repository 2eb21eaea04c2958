"""compare's content is built once (report/compare_rows.py) and drawn twice: the terminal
and the HTML page show the same rows, the same verdict sentence, the memory ratio and the
gate line, in the same order."""

import html
import io
import re

import pytest
from rich.console import Console
from test_compare import FIXTURES, report, side

from torchpace.compare.diff import compare
from torchpace.compare.sides import load_side
from torchpace.report.compare_rows import SHOWN_OPS, build
from torchpace.report.compare_terminal import render


def terminal(result, width=200) -> str:
    out = io.StringIO()
    render(result, Console(file=out, width=width, color_system=None))
    return out.getvalue()


def page_text(result) -> str:
    pytest.importorskip("plotly")
    from torchpace.report.html import compare_html

    page = compare_html(result)
    body = page[page.index("<body>") :]
    body = re.sub(r"<script.*?</script>", " ", body, flags=re.S)  # the charts' data
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def words(text: str) -> str:
    return " ".join(text.split())


def memory_result():
    a = report([100, 101, 99, 100, 100], findings=["TP101"])
    b = report([130, 131, 129, 130, 130], findings=["TP201"])
    b["memory"]["cpu_peak_bytes"] = 2 * 2**20  # B holds twice A's peak
    return compare(side("a", a), side("b", b), fail_if_slower_pct=10)


def in_order(text: str, parts: list[str]) -> list[int]:
    return [text.index(p) for p in parts]


def test_both_renderers_show_the_same_rows_verdict_memory_ratio_and_gate_in_one_order():
    result = memory_result()
    rows = build(result)
    memory = next(r for r in rows.summary if "peak" in r.label)
    assert (memory.a, memory.b, memory.ratio) == ("1 MiB", "2 MiB", "2.000x")
    assert rows.verdict_sentence.startswith("B is slower (+30.0% step time; noise of the")
    assert rows.gate and rows.gate.failed
    order = [
        "step ms (median)",
        rows.verdict_sentence,
        "forward",
        "TP201",
        "TP101",
        rows.gate.line,
    ]
    for text in (words(terminal(result)), words(page_text(result))):
        for row in rows.summary:  # every summary row whole, the memory ratio included
            assert words(" ".join([row.label, row.a, row.b, row.ratio])) in text, row
        assert rows.verdict_sentence in text
        positions = in_order(text, order)
        assert positions == sorted(positions), text
        assert text.rstrip().endswith(rows.gate.line)


def test_the_operator_rows_are_the_same_in_both_on_real_h100_traces():
    result = compare(
        load_side(FIXTURES / "h100_planted.json.gz"),
        load_side(FIXTURES / "h100_fixed.json.gz"),
        fail_if_slower_pct=5,
    )
    rows = build(result)
    assert len(rows.ops) == min(SHOWN_OPS, len(result["ops"]["rows"]))
    assert rows.ops_more == len(result["ops"]["rows"]) - len(rows.ops)
    term, page = terminal(result), words(page_text(result))
    for op in rows.ops:
        _, a, b, delta, calls = op.cells()
        assert words(f"{a} {b} {delta} {calls}") in words(term), op
        assert words(f"{op.name} {a} {b} {delta} {calls}") in page, op
    for p in rows.phases:
        assert words(" ".join(p.cells())) in words(term) and words(" ".join(p.cells())) in page
    if rows.ops_more:
        assert rows.ops_more_line in words(term) and rows.ops_more_line in page


def test_the_verdict_line_is_not_wrapped_on_a_narrow_console():
    """A CI log (80 columns, no terminal) keeps the verdict on one line."""
    result = memory_result()
    lines = terminal(result, width=60).splitlines()
    assert build(result).verdict_sentence in lines
