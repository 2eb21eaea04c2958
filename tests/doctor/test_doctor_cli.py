"""`torchpace doctor` on the command line: --trace, the report's JSON, --fail-on, and every
bad input that needs no capture run (those that do are in test_planted.py)."""

import json
import sys

import pytest
from conftest import ROOT

from torchpace.cli import main

sys.path.insert(0, str(ROOT / "tests" / "trace"))  # the synthetic trace builders
from trace_events import runtime, span, step, write


def run_cli(capsys, *argv):
    code = main(["doctor", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cpu_trace(tmp_path):
    """Three CPU steps where the loop waits 6 of every 10 ms for an in-process DataLoader."""
    events = []
    for i in range(3):
        t0 = i * 10_000.0
        events += [
            step(i, t0, 10_000.0),
            span(
                "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                t0 + 10,
                6_000.0,
                cat="user_annotation",
            ),
            span("aten::mm", t0 + 6_100, 3_000.0),
        ]
    return write(tmp_path / "cpu.json", events)


def test_trace_report_and_json(capsys, cpu_trace, tmp_path):
    out_json = tmp_path / "r" / "report.json"
    code, out, _ = run_cli(capsys, "--trace", cpu_trace, "--json", out_json)
    assert code == 0
    assert "TP101" in out and "data wait" in out and "perfetto" in out.lower()
    report = json.loads(out_json.read_text())
    (f,) = report["findings"]
    assert f["code"] == "TP101" and f["practices"] == ["P01"] and f["severity"] == "high"
    assert f["saving_ms"] == pytest.approx(6.0) and f["saving_pct"] == pytest.approx(60.0)
    assert f["evidence"]["data_wait_ms"] == 6.0 and f["fix"] and f["knob"] == "num-workers"
    assert report["breakdown_ms"]["data_wait_ms"]["median"] == pytest.approx(6.0)
    assert report["trace"] == str(cpu_trace)


@pytest.mark.parametrize(
    ("fail_on", "expected"), [("TP101", 1), ("high", 1), ("low", 1), ("TP201", 0)]
)
def test_fail_on(capsys, cpu_trace, fail_on, expected):
    assert run_cli(capsys, "--fail-on", fail_on, "--trace", cpu_trace)[0] == expected


def test_fail_on_nonsense_is_a_usage_error(capsys, cpu_trace):
    code, _, err = run_cli(capsys, "--fail-on", "slow", "--trace", cpu_trace)
    assert code == 2 and "'slow'" in err and "severity" in err


def test_clean_trace_says_no_bottleneck(capsys, tmp_path):
    events = [step(i, i * 1000.0, 1000.0) for i in range(3)]
    events += [span("aten::mm", i * 1000.0 + 5, 900.0) for i in range(3)]
    events += [runtime("cudaLaunchKernel", 5.0, 1.0, 1)]  # a runtime call without GPU work
    code, out, _ = run_cli(capsys, "--trace", write(tmp_path / "t.json", events))
    assert code == 0 and "no significant bottleneck found" in out
    assert "GPU" not in out


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "empty"),
        (b"not json at all", "not JSON"),
        (b'{"a": 1}', "traceEvents"),
    ],
    ids=["empty", "not-json", "no-trace-events"],
)
def test_not_a_trace(capsys, tmp_path, content, words):
    p = tmp_path / "trace.json"
    p.write_bytes(content)
    code, out, err = run_cli(capsys, "--trace", p)
    assert code == 2 and str(p) in err and words in err and out == ""


def test_missing_trace_and_gz_that_is_not_gzip(capsys, tmp_path):
    code, _, err = run_cli(capsys, "--trace", tmp_path / "none.json.gz")
    assert code == 2 and "does not exist" in err
    bad = tmp_path / "t.json.gz"
    bad.write_text("{}")
    code, _, err = run_cli(capsys, "--trace", bad)
    assert code == 2 and "not gzip" in err


def test_missing_script(capsys, tmp_path):
    code, _, err = run_cli(capsys, tmp_path / "train.py", "--lr", "3")
    assert code == 2 and "train.py does not exist" in err


def test_syntax_error_names_the_line(capsys, tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\nfor x in range(3)\n    pass\n")
    code, _, err = run_cli(capsys, script)
    assert code == 1 and "syntax error at line 2" in err and str(script) in err


def test_missing_module(capsys):
    code, _, err = run_cli(capsys, "-m", "no_such_pkg_xyz.train", "--epochs", "1")
    assert code == 2 and "no_such_pkg_xyz.train" in err


def test_nothing_to_run_and_both_trace_and_script(capsys, cpu_trace):
    assert run_cli(capsys)[0] == 2
    code, _, err = run_cli(capsys, "--trace", cpu_trace, "train.py")
    assert code == 2 and "not both" in err


def test_out_dir_that_holds_files_is_refused_and_left_alone(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    code, _, err = run_cli(capsys, "--out", out, script)
    assert code == 2 and "never writes over" in err
    assert (out / "keep.txt").read_text() == "user data"


def test_json_path_holding_another_file_is_refused(capsys, cpu_trace, tmp_path):
    other = tmp_path / "notes.json"
    other.write_text('{"mine": true}')
    code, _, err = run_cli(capsys, "--json", other, "--trace", cpu_trace)
    assert code == 2 and "never writes over" in err
    assert other.read_text() == '{"mine": true}'
    report = tmp_path / "report.json"
    assert run_cli(capsys, "--json", report, "--trace", cpu_trace)[0] == 0
    assert run_cli(capsys, "--json", report, "--trace", cpu_trace)[0] == 0  # its own: replaced
