"""The speed of light (doctor/speed_of_light.py): FLOPs from a trace's shapes, the gap that
adds up to the step, and end to end on CPU jobs: a matmul-bound one near the probe's peak,
a loader-bound one far from it with the loader named as the gap."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from torchpace.cli import main

PLANTED = ROOT / "tests" / "planted"


def sol_of_trace(path, tmp_path) -> dict:
    out = tmp_path / "report.json"
    assert main(["doctor", "--trace", str(path), "--json", str(out)]) == 0
    return json.loads(out.read_text())["speed_of_light"]


def test_a_trace_with_shapes_gives_resnet18s_flops(shared_traces, tmp_path, capsys):
    """The article's example on an H100: ResNet-18, batch 32, 224 px, fp32. A training step
    is the forward (1.82 GMACs a sample) three times over, less the first convolution's
    input gradient, which no one asks for."""
    sol = sol_of_trace(shared_traces / "h100_article_example_224.json.gz", tmp_path)
    forward = 2 * 1.82e9 * 32
    first_conv_forward = 2 * (112 * 112 * 64 * 3 * 7 * 7) * 32
    assert sol["source"] == "trace"
    assert sol["flops_per_step"] == pytest.approx(3 * forward - first_conv_forward, rel=0.05)
    # the H100's datasheet (the trace's device is not here): fp32 convolutions on TF32
    assert sol["peak_source"] == "datasheet" and sol["flops_by_dtype"].keys() >= {"tf32"}
    assert 0 < sol["mfu"] < 0.2
    # the gap adds up to the step less its ideal; this job waits for its data most
    assert sum(g["ms"] for g in sol["gap"]) == pytest.approx(
        sol["step_ms"] - sol["ideal_ms"], rel=0.01
    )
    assert max(sol["gap"], key=lambda g: g["ms"])["cause"] == "data loading"
    convs = [o for o in sol["ops"] if o["name"].startswith("aten::convolution")]
    assert convs and all(o["bound"] == "compute" and o["flop_per_s"] for o in convs)
    assert "Speed of light" in capsys.readouterr().out


def test_a_trace_without_shapes_has_no_speed_of_light(shared_traces, tmp_path, capsys):
    assert sol_of_trace(shared_traces / "cpu_only_gloo.json.gz", tmp_path) is None


# --- end to end ------------------------------------------------------------------------------
def doctor(tmp_path, script: str, steps: int) -> tuple[dict, dict]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # the peak probed now, beside the job
    env["COLUMNS"] = "120"
    # one thread, job and probe alike: on a shared machine a second thread's waits for the
    # first make both figures depend on the neighbours' load more than on the code
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torchpace", "doctor", "--warmup", "1", "--steps", "3",
           "--measure", "0", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "r.json"),
           str(PLANTED / script), "--steps", str(steps)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    facts = json.loads((tmp_path / "run" / "run_facts.json").read_text())
    assert "Speed of light" in proc.stdout
    return report, facts


@pytest.mark.slow
def test_a_matmul_bound_job_runs_near_the_probes_peak(tmp_path):
    report, facts = doctor(tmp_path, "matmul_bound.py", 200)
    sol = report["speed_of_light"]
    assert sol["source"] == "counted" and sol["step_source"] == "unprofiled"
    # two 768 x 768 layers, batch 128: 6 x batch x weights, less the first one's input grad
    weights = 2 * 768 * 768
    assert sol["flops_per_step"] == pytest.approx(6 * 128 * weights - 2 * 128 * 768 * 768)
    # the peak is probed at another moment than the job runs: a shared 2-core VM read 0.47
    assert 0.4 < sol["mfu"] < 1.3, sol
    top = max(sol["gap"], key=lambda g: g["ms"])["cause"] if sol["gap"] else None
    assert top != "data loading"
    # the counted step is the first after the warm-up, the window's start after it, and
    # no figure includes it
    phases = [s["phase"] for s in facts["steps"]]
    first_after_warmup = phases.index(next(p for p in phases if p != "warmup"))
    assert phases[first_after_warmup] == "counted" and phases.count("counted") == 1
    assert phases[first_after_warmup + 1] == "window"
    assert facts["flops"]["step_index"] == facts["steps"][first_after_warmup]["index"]


@pytest.mark.slow
def test_a_loader_bound_job_reads_a_low_mfu_and_names_the_loader(tmp_path):
    report, _ = doctor(tmp_path, "heavy_dataset_no_workers.py", 60)
    sol = report["speed_of_light"]
    assert sol["mfu"] < 0.1, sol
    assert max(sol["gap"], key=lambda g: g["ms"])["cause"] == "data loading"


def test_a_trace_recorded_with_flops_is_read_from_its_flops(tmp_path, capsys):
    """A job's own profiler trace: the "flops" argument where the exporter writes one
    (with_flops; this torch keeps it out of the Chrome trace, so the test writes it in, with
    no shapes beside it), the elementwise ops the profiler also counts left out; the shapes
    where there is no "flops"."""
    import torch

    a, b = torch.randn(64, 128), torch.randn(128, 32)
    with torch.profiler.profile(record_shapes=True) as prof:
        for i in range(3):
            with torch.profiler.record_function(f"ProfilerStep#{i}"):
                (torch.mm(a, b) * 2).add_(1)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    sol = sol_of_trace(path, tmp_path)
    assert sol["source"] == "trace" and sol["peak_source"] == "this machine's"
    assert sol["flops_per_step"] == pytest.approx(2 * 64 * 128 * 32)
    assert [o["name"] for o in sol["ops"]] == ["aten::mm"]

    trace = json.loads(path.read_text())
    for e in trace["traceEvents"]:
        if e.get("name") == "aten::mm":
            del e["args"]["Input Dims"]
            e["args"]["flops"] = 1000
        elif e.get("name") == "aten::mul":
            e["args"]["flops"] = 10**9
    path.write_text(json.dumps(trace))
    assert sol_of_trace(path, tmp_path)["flops_per_step"] == pytest.approx(1000)


def test_the_html_page_draws_the_roofline(shared_traces, tmp_path, capsys):
    pytest.importorskip("plotly", reason="plotly (the html extra) is not installed")
    page = tmp_path / "report.html"
    trace = shared_traces / "h100_article_example_224.json.gz"
    assert main(["doctor", "--trace", str(trace), "--html", str(page)]) == 0
    text = page.read_text()
    assert "The speed of light" in text and "Roofline" in text
    assert "convolution_backward" in text and "arithmetic intensity" in text
