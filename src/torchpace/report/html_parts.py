"""The HTML page's building blocks: plotly (optional), escaping, tables, figures, the page's
style and the breakdown's colours. Apart from html.py so that a section in a module of its
own (ranks_html.py, comms_html.py) draws with the same parts without importing the page
that includes it."""

from __future__ import annotations

import html

from torchpace.report.model import Row

INSTALL_HINT = "pip install 'torchpace[html]' (plotly)"
# The breakdown's colours on a page (the terminal's rich colours, as a browser shows them);
# the rows and their labels are report/model.Row's.
PHASE_COLOURS = {
    Row.DATA_WAIT: "#b43fb4",
    Row.H2D_PAGEABLE: "#d4a017",
    Row.FORWARD: "#17a2b8",
    Row.BACKWARD: "#3f6ad8",
    Row.OPTIMIZER: "#2e9e44",
    Row.SYNC_WAIT: "#d9534f",
    Row.COLLECTIVE: "#8c564b",
    Row.RANK_WAIT: "#e377c2",
    Row.OTHER: "#9e9e9e",
}
# The class ``table`` gives a row to set apart (the straggler rank); CSS below styles it.
HIGHLIGHT = "highlight"
CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.2em; margin-top: 1.6em;
     border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
code, .mono { font-family: ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace;
              font-size: 0.92em; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { padding: 0.25em 0.8em;
        border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
th { background: #f6f6f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.highlight td { background: #fff4d6; font-weight: bold; }
.finding { border-left: 4px solid #777; padding: 0.4em 0.9em; margin: 0.8em 0;
           background: #fafafa; }
.badge { display: inline-block; color: #fff; border-radius: 3px; padding: 0 0.45em;
         font-size: 0.85em; margin-right: 0.4em; }
.muted { color: #666; } .ok { color: #2e9e44; font-weight: bold; }
.warn { color: #b26b00; white-space: pre-wrap; }
.kept { color: #2e9e44; } .rejected { color: #d9534f; } .faster { color: #2e9e44; }
.slower { color: #d9534f; }
"""


class HtmlUnavailable(RuntimeError):
    """plotly is not installed: the report cannot be drawn (the other outputs still are)."""


def plotly_modules():
    """(plotly.graph_objects, plotly.io, get_plotlyjs), or HtmlUnavailable saying how to get
    them."""
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
        from plotly.offline import get_plotlyjs
    except ImportError as e:
        raise HtmlUnavailable(f"the HTML report needs plotly ({e}): {INSTALL_HINT}") from e
    return go, pio, get_plotlyjs


def escape(value) -> str:
    """Any text on the page, escaped: much of it comes from a trace (labels, kernel names)."""
    return html.escape("" if value is None else str(value))


def figure(fig) -> str:
    _, pio, _ = plotly_modules()
    fig.update_layout(
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        height=360,
        legend={"orientation": "h", "y": -0.2},
    )
    return pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        include_mathjax=False,
        config={"displaylogo": False, "responsive": True},
    )


def table(
    header: list[str] | None,
    rows: list[list],
    numeric: set[int] = frozenset(),
    highlight: set[int] = frozenset(),
) -> str:
    """A table of escaped cells; ``numeric``: the columns aligned right, ``highlight``: the
    rows set apart."""
    head = "<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join(
        (f"<tr class='{HIGHLIGHT}'>" if r in highlight else "<tr>")
        + "".join(
            f"<td class='num'>{escape(c)}</td>" if i in numeric else f"<td>{escape(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for r, row in enumerate(rows)
    )
    return f"<table>{head}{body}</table>"
