"""`torchpace doctor` on the command line: --trace, the report's JSON, --fail-on, and every
bad input that needs no capture run (those that do are in test_planted.py)."""

import json
import os
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


def test_trace_with_out_writes_the_run_folder(capsys, cpu_trace, tmp_path):
    out = tmp_path / "runs" / "from-trace"
    code, _, err = run_cli(capsys, "--trace", cpu_trace, "--out", out)
    assert code == 0, err
    report = json.loads((out / "doctor_report.json").read_text())
    assert report["verb"] == "doctor" and report["trace"] == str(cpu_trace)
    assert report["env"] is None  # the trace ran elsewhere: this machine's versions are not its
    assert [f["code"] for f in report["findings"]][:1] == ["TP101"]
    pytest.importorskip("plotly")
    assert "<html" in (out / "report.html").read_text()


def test_trace_with_out_that_holds_files_is_refused(capsys, cpu_trace, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("user data")
    code, _, err = run_cli(capsys, "--trace", cpu_trace, "--out", out)
    assert code == 2 and "never writes over" in err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("use_trace", [False, True])
def test_out_under_a_file_is_refused_in_one_line(capsys, cpu_trace, tmp_path, use_trace):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    blocker = tmp_path / "notes.txt"
    blocker.write_text("user data")
    target = ["--trace", cpu_trace] if use_trace else [script]
    code, _, err = run_cli(capsys, "--out", blocker / "run", *target)
    assert code == 2 and f"--out {blocker / 'run'}: {blocker} is a file, not a folder" in err
    assert blocker.read_text() == "user data"


def permission_denied_for(monkeypatch, folder):
    """mkdir below ``folder`` fails as in a read-only folder (the tests run as root, whom
    file modes do not stop)."""
    real_mkdir = type(folder).mkdir

    def mkdir(self, *args, **kwargs):
        if os.path.abspath(self).startswith(str(folder)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(type(folder), "mkdir", mkdir)


def test_out_in_a_read_only_folder_is_refused_in_one_line(capsys, monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    permission_denied_for(monkeypatch, locked)
    code, _, err = run_cli(capsys, "--out", locked / "run", script)
    assert code == 2
    assert f"--out {locked / 'run'} cannot be written (Permission denied)" in err


def test_the_default_run_folder_in_a_read_only_folder_is_refused(capsys, monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    permission_denied_for(monkeypatch, tmp_path)
    code, _, err = run_cli(capsys, script)
    assert code == 2
    assert f"cannot create the run folder under {tmp_path / 'torchpace-runs'}" in err
    assert "give --out DIR" in err


@pytest.mark.parametrize("flag", ["--json", "--html"])
def test_an_output_under_a_file_is_refused_before_any_work(capsys, cpu_trace, tmp_path, flag):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("user data")
    code, _, err = run_cli(capsys, "--trace", cpu_trace, flag, blocker / "r.out")
    assert code == 2 and f"{flag} {blocker / 'r.out'}: {blocker} is a file, not a folder" in err


@pytest.mark.parametrize("flag, name", [("--json", "r.json"), ("--html", "r.html")])
def test_a_missing_folder_for_an_output_is_created_and_said(
    capsys, cpu_trace, tmp_path, flag, name
):
    if flag == "--html":
        pytest.importorskip("plotly")
    path = tmp_path / "new" / "sub" / name
    code, _, err = run_cli(capsys, "--trace", cpu_trace, flag, path)
    assert code == 0 and path.is_file()
    assert f"created the folder {tmp_path / 'new'} for {flag} {path}" in err
    code, _, err = run_cli(capsys, "--trace", cpu_trace, flag, path)  # it exists now: no line
    assert code == 0 and "created the folder" not in err


@pytest.mark.parametrize("n", ["0", "-1"])
def test_nproc_per_node_below_one_is_refused_in_one_line(capsys, tmp_path, n):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code, _, err = run_cli(capsys, "--nproc-per-node", n, script)
    assert code == 2 and f"--nproc-per-node must be at least 1 process (got {n})" in err
