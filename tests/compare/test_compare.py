"""`torchpace compare`: the verdict and the CI gate against the noise, on hand-made reports;
real H100 traces before and after a fix; two real doctor runs on this CPU (slow)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from json_schemas import validate_output

from torchpace.cli import main
from torchpace.compare.diff import compare, median_noise_pct
from torchpace.compare.sides import Side
from torchpace.report.model import DoctorReport

FIXTURES = ROOT / "tests" / "doctor" / "fixtures"


def report(step_times, reference=(), findings=(), batch=32):
    """A doctor report with these profiled (and reference) step times."""
    return {
        "verb": "doctor",
        "command": ["python", "train.py"],
        "status": "complete",
        "per_step": [{"wall_ms": t, "forward_ms": t / 2, "memory": {}} for t in step_times],
        "steps_recorded": [
            {"index": i, "phase": "reference", "wall_ms": t} for i, t in enumerate(reference)
        ],
        "breakdown_ms": {
            "forward_ms": {
                "median": sorted(step_times)[len(step_times) // 2] / 2,
                "min": 0,
                "max": 0,
            }
        },
        "gpu": None,
        "memory": {"growth": [], "cpu_peak_bytes": 2**20},
        "loaders": [{"batch_size": batch, "batches_seen": 10}],
        "findings": [
            {"code": c, "title": c, "severity": "low", "saving_ms": None, "location": None}
            for c in findings
        ],
    }


def side(name, rep):
    return Side(Path(name), DoctorReport.from_dict(rep), None)  # as compare reads a saved one


def test_noise_of_a_median_from_the_spread_of_the_steps():
    assert median_noise_pct([100.0] * 5) == 0.0
    quiet = median_noise_pct([100, 101, 99, 100.5, 99.5])
    noisy = median_noise_pct([100, 130, 70, 110, 90])
    assert 0 < quiet < 1 < noisy
    assert median_noise_pct([100, 100, 100, 100, 100, 5000]) == 0.0  # one GC pause: robust


def test_a_clear_slowdown_fails_the_gate():
    a = side("a", report([100, 101, 99, 100, 100], findings=["TP101"]))
    b = side("b", report([130, 131, 129, 130, 130], findings=["TP201"]))
    result = compare(a, b, fail_if_slower_pct=10)
    assert result["verdict"] == "B is slower" and result["slowdown_pct"] == 30.0
    assert result["step_ratio"] == 1.3 and result["throughput_ratio"] == pytest.approx(
        1 / 1.3, 1e-3
    )
    assert result["gate"]["failed"] and "30.0% slower" in result["gate"]["reason"]
    assert [f["code"] for f in result["findings"]["appeared"]] == ["TP201"]
    assert [f["code"] for f in result["findings"]["gone"]] == ["TP101"]
    (row,) = result["breakdown"]
    assert row["phase"] == "forward_ms" and row["delta_ms"] == 15.0
    validate_output(result, "compare_report")


def test_a_slowdown_inside_the_noise_passes_and_says_why():
    a = side("a", report([100, 140, 70, 120, 90]))
    b = side("b", report([112, 150, 80, 130, 100]))
    result = compare(a, b, fail_if_slower_pct=5)
    assert result["slowdown_pct"] > 5 and result["verdict"] == "within the noise"
    assert not result["gate"]["failed"] and "within the noise" in result["gate"]["reason"]


def test_below_the_allowed_percentage_passes():
    a = side("a", report([100.0] * 5))
    b = side("b", report([103.0] * 5))
    gate = compare(a, b, fail_if_slower_pct=5)["gate"]
    assert not gate["failed"] and "within the allowed 5%" in gate["reason"]


def test_reference_steps_are_compared_when_both_have_them():
    a = side("a", report([500.0] * 5, reference=[100.0] * 3))
    b = side("b", report([300.0] * 5, reference=[120.0] * 3))
    result = compare(a, b)
    assert result["steps_compared"] == "unprofiled reference steps"
    assert result["a"]["step_ms"] == 100.0 and result["slowdown_pct"] == 20.0
    # one side without enough reference steps: both compared on the profiled ones
    c = side("c", report([400.0] * 5, reference=[100.0]))
    assert compare(a, c)["steps_compared"] == "profiled steps"


def test_h100_traces_before_and_after_the_fix(tmp_path, capsys):
    out = tmp_path / "compare.json"
    page = tmp_path / "compare.html"
    code = main(
        [
            "compare",
            str(FIXTURES / "h100_planted.json.gz"),
            str(FIXTURES / "h100_fixed.json.gz"),
            "--json",
            str(out),
            "--html",
            str(page),
            "--fail-if-slower",
            "5",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    result = json.loads(out.read_text())
    validate_output(result, "compare_report")
    assert result["verdict"] == "B is faster" and result["slowdown_pct"] < -20
    assert result["ops"]["kind"] == "kernel" and result["ops"]["rows"]
    assert result["findings"]["gone"]
    assert "B is faster" in text and "kernels whose time per step changed most" in text
    if page.exists():  # plotly installed
        assert "<h1>torchpace compare</h1>" in page.read_text()
    # the other way round the gate fails
    assert (
        main(
            [
                "compare",
                str(FIXTURES / "h100_fixed.json.gz"),
                str(FIXTURES / "h100_planted.json.gz"),
                "--fail-if-slower",
                "5",
            ]
        )
        == 1
    )
    assert "gate --fail-if-slower 5: FAILED" in capsys.readouterr().out


def bad_input(tmp_path, kind):
    if kind == "tune":
        (tmp_path / "tune").mkdir()
        (tmp_path / "tune" / "tune_report.json").write_text("{}")
    elif kind == "empty":
        (tmp_path / "empty").mkdir()
    elif kind == "notes.txt":
        (tmp_path / "notes.txt").write_text("hi")
    return tmp_path / kind


@pytest.mark.parametrize(
    "kind, words",
    [
        ("missing", "does not exist"),
        ("tune", "is a tune run"),
        ("empty", "holds neither doctor_report.json"),
        ("notes.txt", "neither a doctor"),
    ],
)
def test_inputs_compare_cannot_read_are_named(tmp_path, capsys, kind, words):
    bad = bad_input(tmp_path, kind)
    assert main(["compare", str(FIXTURES / "h100_fixed.json.gz"), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and words in err


def test_json_path_holding_another_file_is_refused(tmp_path, capsys):
    mine = tmp_path / "data.json"
    mine.write_text('{"mine": 1}')
    trace = str(FIXTURES / "h100_fixed.json.gz")
    assert main(["compare", trace, trace, "--json", str(mine)]) == 2
    assert mine.read_text() == '{"mine": 1}'


SCRIPT = """
import sys
import torch

extra = int(sys.argv[1])
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
# large enough that B's extra matmuls outweigh A's own ops even when a busy neighbour
# slows A's whole run several times (CI saw A's one small matmul at 4x its usual time)
big = torch.randn(768, 768)
for step in range(40):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    for _ in range(extra):  # the regression planted in B: more matmuls per step
        big = torch.mm(big, big).tanh()
"""


@pytest.mark.slow
def test_two_doctor_runs_and_the_gate(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def doctor(name, extra):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "torchpace",
                "doctor",
                "--quiet",
                "--out",
                str(tmp_path / name),
                "--warmup",
                "2",
                "--steps",
                "5",
                str(script),
                str(extra),
            ],
            check=True,
            capture_output=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
        )
        return tmp_path / name

    a, b = doctor("a", 0), doctor("b", 8)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchpace",
            "compare",
            str(a),
            str(b),
            "--fail-if-slower",
            "10",
            "--json",
            str(tmp_path / "c.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "c.json").read_text())
    validate_output(result, "compare_report")
    assert result["steps_compared"] == "unprofiled reference steps"
    assert result["verdict"] == "B is slower" and result["gate"]["failed"]
    assert result["ops"]["kind"] == "cpu op"
    top = [r["name"] for r in result["ops"]["rows"][:3]]
    assert "aten::mm" in top, result["ops"]["rows"][:5]


@pytest.mark.parametrize("status", ["timeout", "script-exited", "script-raised", "interrupted"])
@pytest.mark.parametrize("which", ["a", "b"])
def test_the_gate_fails_when_a_side_did_not_finish_its_window(status, which):
    # the run cut short looks 85% faster: it must not pass the gate
    sides = {"a": report([100.0] * 5), "b": report([14.2] * 5)}
    sides[which]["status"] = status
    result = compare(side("a", sides["a"]), side("b", sides["b"]), fail_if_slower_pct=5)
    name = which.upper()
    assert result["gate"]["failed"]
    assert f"{name} ({status}) did not finish its window" in result["gate"]["reason"]
    assert result[which]["finished"] is False and result[which]["status"] == status
    assert any(w.startswith(f"{name} did not finish its window") for w in result["warnings"])
    validate_output(result, "compare_report")


def test_each_sides_status_and_device_are_shown_and_a_device_change_is_warned(capsys):
    from torchpace.report.compare_terminal import render

    a, b = report([100.0] * 5), report([20.0] * 5)
    a["device"] = {"index": None, "name": None, "capability": None, "memory_bytes": None}
    a["process"] = {"device": "cpu", "usable_cpus": 8}
    b["device"] = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}
    a["env"], b["env"] = {"torch": "2.14.1"}, {"torch": "2.15.0"}
    result = compare(side("cpu_run", a), side("h100_run", b), fail_if_slower_pct=5)
    assert result["a"]["device"] == "CPU (8 usable cores)"
    assert result["b"]["device"] == "NVIDIA H100 80GB HBM3"
    warned = " ".join(result["warnings"])
    assert "A ran on CPU (8 usable cores) and B on NVIDIA H100 80GB HBM3" in warned
    assert "torch 2.14.1 and B with torch 2.15.0" in warned
    validate_output(result, "compare_report")
    render(result)
    out = " ".join(capsys.readouterr().out.split())
    assert "(complete, CPU (8 usable cores))" in out
    assert "warning: A ran on CPU" in out
    same = compare(side("a", report([100.0] * 5)), side("b", report([101.0] * 5)))
    assert same["warnings"] == []


def written_report(tmp_path, name, **changes):
    """A doctor report file as the doctor writes it (one real analysis), then changed."""
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "doctor_report.json"
    assert main(["doctor", "--trace", str(FIXTURES / "h100_fixed.json.gz"),
                 "--json", str(path)]) == 0  # fmt: skip
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"schema_version": 999}, "has schema_version 999; this torchpace reads doctor "
         "reports of schema_version 1 to 2"),
        ({"schema_version": "2"}, "has schema_version '2'"),
        ({"per_step": [{"wall_ms": "fast"}]}, "'per_step' is not a list of objects"),
        ({"findings": [{"code": 1}]}, "'findings' is not a list of objects"),
        ({"memory": {"cpu_peak_bytes": "big"}}, "'memory' is not an object"),
    ],
)  # fmt: skip
def test_a_report_compare_cannot_read_is_refused_with_the_file_named(
    tmp_path, capsys, changes, words
):
    good = written_report(tmp_path, "good")
    bad = written_report(tmp_path, "bad", **changes)
    capsys.readouterr()
    assert main(["compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and words in err


def test_a_damaged_trace_beside_a_good_report_leaves_the_rest_compared(tmp_path, capsys):
    from torchpace.capture.window import TRACE_NAME

    a = written_report(tmp_path, "a")
    b = written_report(tmp_path, "b")
    damaged = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": "abc"}]}'
    (b.parent / TRACE_NAME).write_bytes(gzip.compress(damaged))
    out = tmp_path / "c.json"
    assert main(["compare", str(a.parent), str(b.parent), "--json", str(out)]) == 0
    ops = json.loads(out.read_text())["ops"]
    assert ops["rows"] == [] and "has ts = 'abc'" in ops["note"]
