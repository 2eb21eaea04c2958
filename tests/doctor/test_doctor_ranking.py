"""A job that will die outranks a job that is slow (issue 26, item 1): a leak that fills the
device within a training job's length, an out-of-memory, a timeout come before every speed
finding, with their cost stated as what it is.

The leak is planted in real H100 traces (the shared ResNet-50 one, whose speed findings are
worth 21 and 17 ms a step, and the planted-loop fixture): every CUDA allocator sample after
a step's end carries that step's kept bytes, as a loop keeping each step's outputs (968 MiB
a step, the issue's figure) would show them."""

import gzip
import json

from conftest import ROOT

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.finding import Finding, rank
from torchpace.doctor.result import build_report, diagnosis_to_dict
from torchpace.trace import load_trace

FIXTURES = ROOT / "tests" / "doctor" / "fixtures"
MIB = 2**20
LEAK = 968 * MIB


def with_leak(source, target, per_step: int):
    """A copy of the trace whose CUDA allocated bytes grow ``per_step`` at every step end."""
    with gzip.open(source, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    ends = sorted(
        e["ts"] + e["dur"]
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") == "user_annotation"
        and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    for e in events:
        args = e.get("args") or {}
        if e.get("name") == "[memory]" and args.get("Device Type") == 1:
            kept = sum(1 for end in ends if end <= e["ts"]) * per_step
            args["Total Allocated"] += kept
            args["Total Reserved"] = max(args.get("Total Reserved", 0), args["Total Allocated"])
    if not any(e.get("name") == "[memory]" for e in events):
        # a trace recorded without profile_memory: one allocator sample near each step's
        # end, 2 GiB held by the model and its optimizer plus what the steps kept
        events += [
            {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
             "tid": 1, "ts": end - 1.0,
             "args": {"Total Allocated": 2 * 2**30 + i * per_step, "Total Reserved": 0,
                      "Device Type": 1, "Device Id": 0}}
            for i, end in enumerate(ends)
        ]  # fmt: skip
    with gzip.open(target, "wt") as f:
        json.dump(trace, f)
    return target


def test_a_leak_reaching_capacity_outranks_the_speed_findings(shared_traces, tmp_path):
    path = with_leak(shared_traces / "h100_imagenet_resnet50.json.gz", tmp_path / "t.json.gz", LEAK)
    d = diagnose(load_trace(path))
    codes = [f.code for f in d.findings]
    leak = d.findings[0]
    assert leak.code == "TP401", codes
    assert "TP312" in codes  # channels_last, worth ~21 ms a step: second now
    speed = [f for f in d.findings if f.saving_ms]
    assert max(f.saving_ms for f in speed) > 15
    steps_left = leak.evidence["steps_until_full"]
    assert 70 <= steps_left <= 85  # (80 GiB - what is allocated) / 968 MiB
    assert leak.ends_job == f"the job runs out of device memory ~{steps_left} steps after " + (
        "the profiled ones"
    )
    report = diagnosis_to_dict(d)
    assert report["findings"][0]["ends_job"] == leak.ends_job


def test_the_fixture_loop_with_a_leak_says_when_it_dies(tmp_path):
    from rich.console import Console

    from torchpace.report.doctor_terminal import render
    from torchpace.report.html import findings_html

    path = with_leak(FIXTURES / "h100_planted.json.gz", tmp_path / "t.json.gz", LEAK)
    d = diagnose(load_trace(path))
    assert [f.code for f in d.findings][:2] == ["TP401", "TP102"]
    report = build_report(d)
    console = Console(record=True, width=300)
    render(report, console)
    text = console.export_text()
    assert "1. TP401 high  the job runs out of device memory ~" in text
    assert "saving not estimated" not in text
    assert "the job runs out of device memory" in findings_html(report)


def test_a_slow_leak_is_ranked_by_severity_not_first(tmp_path):
    """A leak that would take longer than a training job runs to fill the device does not end
    the job: it stays among the high findings, by its (unestimated) saving."""
    path = with_leak(FIXTURES / "h100_planted.json.gz", tmp_path / "t.json.gz", 64 * 1024)
    d = diagnose(load_trace(path))
    leak = next(f for f in d.findings if f.code == "TP401")
    assert leak.evidence["steps_until_full"] > 450_000 and leak.ends_job is None
    assert d.findings[0].code == "TP102"


def test_a_leak_a_long_job_would_barely_notice_ranks_low(tmp_path):
    """The H100 lease's planted syncs loop grew 4 KiB a step and TP401 ("high") ranked above
    the syncs that cost it a fifth of each step. 4 KiB x 450k steps is 2% of 80 GiB: low."""
    path = with_leak(FIXTURES / "h100_planted.json.gz", tmp_path / "t.json.gz", 4 * 1024)
    d = diagnose(load_trace(path))
    leak = next(f for f in d.findings if f.code == "TP401")
    assert leak.severity == "low" and leak.ends_job is None
    assert 1.0 <= leak.evidence["long_job_pct_of_device"] <= 3.0
    codes = [f.code for f in d.findings]
    assert all(codes.index(f.code) < codes.index("TP401") for f in d.findings if f.saving_ms)


def test_ranking_puts_what_ends_the_job_first():
    slow = Finding("TP312", {}, "fix", saving_ms=60.0, step_ms=100.0)  # high, 60%
    oom = Finding("TP404", {}, "fix", ends_job="the job ran out of memory in step 3")
    leak = Finding("TP401", {}, "fix", severity="high")
    assert oom.severity == "high"
    assert [f.code for f in rank([leak, slow, oom])] == ["TP404", "TP312", "TP401"]


def test_a_timeout_ends_the_job_and_a_script_exit_does_not():
    from doctor_fakes import facts

    from torchpace.doctor.analyze import diagnose
    from torchpace.facts.run import Status

    (timeout,) = diagnose(None, facts(steps=[], status=Status.TIMEOUT)).findings
    assert timeout.code == "TP901" and "hangs" in timeout.ends_job
    (exited,) = diagnose(None, facts(steps=[], status=Status.SCRIPT_EXITED)).findings
    assert exited.ends_job is None
