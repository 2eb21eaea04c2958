"""The HTML reports: one self-contained file, offline (no network loads), a few MB, drawn
from real reports; rendered in a real headless browser where one is installed."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from html_checks import network_loads, scripts_with_src

from torchpace.cli import main

FIXTURES = ROOT / "tests" / "doctor" / "fixtures"
MAX_BYTES = 8 * 2**20
BROWSERS = (
    "chromium",
    "chromium-headless-shell",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
)
# A browser elsewhere than on PATH (e.g. chromium-headless-shell unpacked from its package).
BROWSER_ENV = "TORCHPACE_TEST_BROWSER"


def doctor_page(tmp_path, capsys, trace="h100_planted.json.gz"):
    pytest.importorskip("plotly", reason="plotly (the html extra) is not installed")
    page = tmp_path / "report.html"
    report = tmp_path / "report.json"
    code = main(
        ["doctor", "--trace", str(FIXTURES / trace), "--html", str(page), "--json", str(report)]
    )
    capsys.readouterr()
    assert code == 0
    return page.read_text(), json.loads(report.read_text())


def test_doctor_page_from_a_real_h100_trace(tmp_path, capsys):
    page, report = doctor_page(tmp_path, capsys)
    assert page.startswith("<!DOCTYPE html>")
    assert len(page.encode()) < MAX_BYTES
    assert network_loads(page) == [] and scripts_with_src(page) == []
    assert "Plotly.newPlot" in page  # the charts are drawn by the inlined plotly.js
    # the step breakdown, the GPU chart, every finding with its fix
    assert "per-step time split" in page and "what the GPU did in each step" in page
    for f in report["findings"]:
        assert f["code"] in page and json.dumps(f["fix"])[1:-1][:40] in page.replace("&#x27;", "'")


def test_the_network_check_can_fail():
    assert network_loads("<script src='https://cdn.plot.ly/plotly.js'></script>")
    assert network_loads("<link rel=stylesheet href='//fonts.googleapis.com/css'>")
    assert network_loads("<style>@import 'https://x/y.css';</style>")
    assert network_loads("<div style=\"background:url('http://x/y.png')\"></div>")
    assert not network_loads("<a id='x'>https://ui.perfetto.dev is text</a>")


def test_html_path_holding_another_file_is_refused(tmp_path, capsys):
    mine = tmp_path / "index.html"
    mine.write_text("<html>my own page</html>")
    code = main(["doctor", "--trace", str(FIXTURES / "h100_fixed.json.gz"), "--html", str(mine)])
    assert code == 2 and "not an earlier torchpace report" in capsys.readouterr().err
    assert mine.read_text() == "<html>my own page</html>"


def test_without_plotly_the_doctor_says_how_to_get_the_page(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "plotly" or m.startswith("plotly.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly -> ImportError
    page, report = tmp_path / "r.html", tmp_path / "r.json"
    code = main(
        [
            "doctor",
            "--trace",
            str(FIXTURES / "h100_fixed.json.gz"),
            "--html",
            str(page),
            "--json",
            str(report),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0 and report.is_file() and not page.exists()
    assert "no report.html" in err and "pip install 'torchpace[html]'" in err


def _browser():
    if os.environ.get(BROWSER_ENV):
        return os.environ[BROWSER_ENV]
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


@pytest.mark.slow
def test_the_page_renders_in_a_headless_browser(tmp_path, capsys):
    browser = _browser()
    if browser is None:
        pytest.skip(
            f"no headless browser installed (looked for {', '.join(BROWSERS)} and "
            f"${BROWSER_ENV}); Debian: apt-get install chromium"
        )
    PIL = pytest.importorskip("PIL.Image", reason="pillow is needed to read the screenshot")
    doctor_page(tmp_path, capsys)
    shot = tmp_path / "shot.png"
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,1600",
            "--virtual-time-budget=5000",
            "--enable-logging=stderr",
            "--v=0",
            f"--screenshot={shot}",
            (tmp_path / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file(), proc.stderr
    console_errors = [
        line
        for line in proc.stderr.splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)
    ]
    assert console_errors == []
    image = PIL.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1_000_000) or []
    assert len(colours) > 50, "the screenshot is blank or nearly so"
