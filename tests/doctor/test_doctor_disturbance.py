"""The doctor's window under contention (issue 22, item 7): a window far slower than the
same run's unprofiled steps, or one during which other processes kept this process's cores
busy, is flagged in the terminal, the JSON and the HTML, and the live doctor measures once
more. The facts are faked for the deterministic tests (the issue's figures: 3,488 vs 79 ms
under contention, 97 vs 76 ms on a quiet machine); one slow test runs a CPU-burning process
beside a tiny script's capture."""

import subprocess
import sys
import time

import pytest
from doctor_fakes import facts, profile

from torchpace.capture import machine_load
from torchpace.contention import PROFILED_MAX_SLOWDOWN
from torchpace.doctor.analyze import Diagnosis, diagnose
from torchpace.doctor.disturbance import check_window, slowed
from torchpace.doctor.result import build_report, diagnosis_to_dict
from torchpace.facts.run import PhaseLoad, RunFacts, StepPhase, StepRecord

WINDOW, REF = StepPhase.WINDOW, StepPhase.REFERENCE


def run_facts(window_ms: float, reference_ms: float, load: PhaseLoad | None = None) -> RunFacts:
    steps = [StepRecord(i, 50.0, 0.0, in_window=False) for i in range(3)]
    steps += [StepRecord(3 + i, window_ms, 0.0, in_window=True, phase=WINDOW) for i in range(5)]
    steps += [StepRecord(8 + i, reference_ms, 0.0, in_window=False, phase=REF) for i in range(20)]
    f = facts(steps=steps)
    f.window_load = load
    return f


def test_a_window_44x_slower_than_the_unprofiled_steps_is_disturbed():
    check = check_window(run_facts(3488.0, 79.0))
    assert check.disturbed and check.slowdown == pytest.approx(44.15, abs=0.01)
    assert "44x slower than the unprofiled steps" in check.reasons[0]
    assert "3,488.0 ms vs 79.0 ms" in check.reasons[0]


def test_a_quiet_machine_window_is_not():
    check = check_window(run_facts(97.0, 76.0, PhaseLoad(0.5, 0.05, 0.9, 2, 0.3)))
    assert not check.disturbed and check.slowdown < PROFILED_MAX_SLOWDOWN
    assert check.other_cores == pytest.approx(0.1)


def test_a_tiny_step_the_profiler_alone_slows_is_not_disturbed():
    """1 ms unprofiled, 5 ms profiled on a quiet machine: the profiler's per-op cost, not
    contention (the same 5x with 80 ms of excess and the cores busy is)."""
    quiet = PhaseLoad(0.5, 0.05, 0.9, 2, 0.3)
    assert not check_window(run_facts(5.0, 1.0, quiet)).disturbed
    assert not check_window(run_facts(400.0, 80.0, quiet)).disturbed  # nothing else ran
    busy = PhaseLoad(0.5, 0.6, 0.4, 2, 3.0)  # others: 1.2 of the 2 cores
    assert slowed(check_window(run_facts(400.0, 80.0, busy)))


def test_other_processes_on_the_cores_disturb_the_window_even_when_it_is_not_slower():
    """No unprofiled steps (a script that ended with the window) but another process took
    1.8 of the 2 cores: the window is flagged by the load alone."""
    f = run_facts(97.0, 76.0, PhaseLoad(2.0, 3.6, 0.4, 2, 3.1))
    f.steps = [s for s in f.steps if s.phase != REF]
    check = check_window(f)
    assert check.slowdown is None and check.disturbed
    assert check.reasons == ("other processes used 1.8 of this process's 2 cores during the "
                             "window, load average 3.1",)  # fmt: skip


def test_the_terminal_the_json_and_the_html_say_so():
    from rich.console import Console

    from torchpace.report.doctor_terminal import render
    from torchpace.report.html import doctor_html

    f = run_facts(786.0, 27.5)
    d = Diagnosis(profile({"wall_ms": 786.0}, f), [], window_check=check_window(f))
    report = diagnosis_to_dict(d)
    assert report["window_check"]["disturbed"] and report["window_check"]["slowdown"] > 28
    console = Console(record=True, width=250)
    render(build_report(d), console)
    text = console.export_text()
    assert "the profiled window was disturbed: the profiled steps ran 29x slower" in text
    assert "describe the contention, not the job" in text
    pytest.importorskip("plotly")
    assert "the profiled window was disturbed" in doctor_html(build_report(d))


def test_the_report_validates_against_its_schema():
    import json

    from conftest import ROOT

    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "docs" / "schemas" / "doctor_report.schema.json").read_text())
    f = run_facts(3488.0, 79.0, PhaseLoad(5.0, 9.0, 1.0, 2, 4.0))
    report = diagnosis_to_dict(diagnose(None, f))
    jsonschema.validate(report, schema)
    assert report["window_check"]["other_cores"] == pytest.approx(1.8)


def test_run_facts_keep_the_load_through_a_save(tmp_path):
    f = run_facts(97.0, 76.0, PhaseLoad(0.5, 0.05, 0.9, 2, 0.3))
    f.save(tmp_path / "f.json")
    assert RunFacts.load(tmp_path / "f.json").window_load == f.window_load


def test_proc_stat_is_read_on_this_process_cores():
    stat = (
        "cpu  1000 0 500 9000 10 0 0 0 0 0\n"
        "cpu0 400 0 100 4500 5 0 0 0 0 0\n"
        "cpu1 600 0 400 4500 5 0 0 0 0 0\n"
        "intr 1 2 3\n"
    )
    ticks = machine_load._ticks()
    assert machine_load.machine_busy_s(stat) == pytest.approx(1500 / ticks)
    assert machine_load.machine_busy_s(stat, {1}) == pytest.approx(1000 / ticks)
    a = machine_load.LoadSample(10.0, 100.0, 5.0, 1.0)
    b = machine_load.LoadSample(12.0, 103.5, 6.0, 2.0)
    load = machine_load.between(a, b, 2)
    assert (load.other_cpu_s, load.own_cpu_s, load.wall_s) == (2.5, 1.0, 2.0)


def test_the_live_doctor_measures_a_disturbed_window_once_more(tmp_path, monkeypatch, capsys):
    """The first capture is disturbed, the second is not: the report is the second's and
    says that the first was disturbed; the second run has a folder of its own."""
    from torchpace.capture import runner
    from torchpace.cli import main

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    runs = []

    def fake_capture(spec, on_progress=None):
        runs.append(spec.out_dir)
        f = run_facts(3488.0, 79.0) if len(runs) == 1 else run_facts(97.0, 76.0)
        return runner.CaptureResult(f, None, 0)

    monkeypatch.setattr(runner, "capture_script", fake_capture)
    out = tmp_path / "run"
    main(["doctor", "--out", str(out), "--quiet", str(script)])
    assert runs == [out, out / "remeasured"]
    import json

    report = json.loads((out / "doctor_report.json").read_text())
    check = report["window_check"]
    assert not check["disturbed"] and check["remeasured_from"]["disturbed"]
    err = capsys.readouterr().err
    assert "running the script once more" in err


def test_disturbed_twice_is_said_and_not_run_a_third_time(tmp_path, monkeypatch, capsys):
    from torchpace.capture import runner
    from torchpace.cli import main

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    runs = []

    def fake_capture(spec, on_progress=None):
        runs.append(spec.out_dir)
        return runner.CaptureResult(run_facts(786.0, 27.5), None, 0)

    monkeypatch.setattr(runner, "capture_script", fake_capture)
    main(["doctor", "--out", str(tmp_path / "run"), str(script)])
    assert len(runs) == 2
    out = capsys.readouterr().out
    assert "measured twice, disturbed both times" in out


def test_a_busy_machine_whose_window_kept_pace_is_said_not_run_again(tmp_path, monkeypatch):
    from torchpace.capture import runner
    from torchpace.cli import main

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    runs = []

    def fake_capture(spec, on_progress=None):
        runs.append(spec.out_dir)
        return runner.CaptureResult(run_facts(97.0, 76.0, PhaseLoad(2.0, 3.6, 0.4, 2, 3.1)),
                                    None, 0)  # fmt: skip

    monkeypatch.setattr(runner, "capture_script", fake_capture)
    main(["doctor", "--out", str(tmp_path / "run"), "--quiet", str(script)])
    assert len(runs) == 1


BURN = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


@pytest.mark.slow
def test_a_competing_process_is_seen_in_the_window(tmp_path, child_env):
    """A real capture of a tiny loop with CPU burners on every core beside it: the window's
    load shows other processes' CPU time, and the doctor flags the window."""
    import os

    from conftest import ROOT

    from torchpace.capture.runner import CaptureSpec, capture_script

    cores = len(os.sched_getaffinity(0))
    burners = [
        subprocess.Popen([sys.executable, "-c", BURN.format(s=120)], env=child_env)
        for _ in range(cores)
    ]
    try:
        time.sleep(1.0)
        out = tmp_path / "run"
        out.mkdir()
        script = ROOT / "tests" / "planted" / "uneven_batches.py"
        spec = CaptureSpec(str(script), ["--steps", "60"], out, warmup=2, steps=3,
                           measure_s=0.0)  # fmt: skip
        f = capture_script(spec).facts
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert f.window_load is not None and f.window_load.cores == cores
    check = check_window(f)
    assert check.other_cores >= 0.5 * cores, check
    assert check.disturbed
