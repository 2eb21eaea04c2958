"""The capture child on real scripts: step boundaries, the window, facts, and every way a
script can end. Each script runs once (module-scoped) and several tests read its result."""

import gzip
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT

from torchpace.capture.runner import CaptureSpec, capture_script

PLANTED = ROOT / "tests" / "planted"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    cache = {}

    def run(target, *args, **spec):
        key = (str(target), args, tuple(sorted(spec.items())))
        if key not in cache:
            out = tmp_path_factory.mktemp("run")
            spec.setdefault("warmup", 1)
            spec.setdefault("steps", 3)
            cache[key] = capture_script(CaptureSpec(str(target), list(args), out, **spec))
        return cache[key]

    return run


def profiler_steps(trace_path):
    with gzip.open(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted(e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))


def test_two_optimizers_make_one_step(capture):
    r = capture(PLANTED / "two_optimizers_gan.py", "--steps", "12")
    f = r.facts
    assert f.status == "complete" and r.returncode == 0
    assert sorted(f.optimizers) == ["Adam", "SGD"]
    assert f.optimizer_steps_per_step == 2.0
    # G is called first; D, trained by the other optimizer, is the second model
    assert [m.class_name for m in f.models] == ["Sequential", "Sequential"]
    assert [m.location.rsplit(":", 1)[1] for m in f.models] == ["17", "18"]
    assert [m.parameters for m in f.models] == [16 * 64 + 64 + 64 * 32 + 32, 32 * 64 + 64 + 65]
    # the step after the warm-up counted; after the window: one settling step, then
    # unprofiled steps until the script's end; on a CPU with native bf16 the bf16 autocast
    # probe's steps first (TP314), which outlast this 12-step script
    after = ["probe"] * 6 if f.process.bf16_native else ["settle"] + ["reference"] * 5
    assert [s.phase for s in f.steps] == ["warmup", "warmup", "counted", "window", "window",
                                          "window", *after]  # fmt: skip
    assert len(f.window) == 3
    # a 12-step script gets its count: the counted step comes before the window
    assert f.flops.counted and f.flops.step_index == 2 and f.flops.flops > 0, f.flops
    assert profiler_steps(r.trace_path) == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    assert all(s.wall_ms > 0 for s in f.steps)
    assert f.process.device == "cpu" and f.process.anomaly_detection is False
    # Adam reads its step counter with .item() inside opt_g.step(): kept, marked as on CPU,
    # so that on a GPU run the doctor does not take it for a sync.
    assert f.syncs and all(s.kind == "item" and s.device == "cpu" for s in f.syncs)


def test_heavy_dataset_records_loader_and_data_wait(capture):
    f = capture(PLANTED / "heavy_dataset_no_workers.py", "--steps", "8").facts
    assert f.status == "complete"
    (loader,) = f.loaders
    assert loader.num_workers == 0 and loader.pin_memory is False and loader.batch_size == 32
    assert loader.location.endswith("heavy_dataset_no_workers.py:24")
    assert loader.dataset_type == "SlowDataset" and loader.dataset_len == 10_000
    assert loader.batches_seen >= 5
    for s in f.window:
        assert s.data_wait_ms > 0.5 * s.wall_ms


def but_bf16(facts):
    """The probes but bf16 autocast's, which runs on a CPU with native bf16 and only there."""
    if not facts.process.bf16_native:
        assert "autocast-bf16" not in [p.name for p in facts.probes]
    return [p for p in facts.probes if p.name != "autocast-bf16"]


def test_anomaly_detection_is_probed(capture):
    f = capture(PLANTED / "anomaly_detection_on.py", "--steps", "20").facts
    assert f.process.anomaly_detection is True
    (probe,) = but_bf16(f)
    assert probe.name == "anomaly-detection-off" and probe.steps == 3
    assert probe.probe_ms < probe.baseline_ms  # anomaly mode costs time on every op


def test_oversubscribed_threads_are_probed(capture):
    f = capture(PLANTED / "threads_oversubscribed.py", "--steps", "20").facts
    cores = len(os.sched_getaffinity(0))
    assert f.process.intra_op_threads == 8 * cores and f.process.usable_cpus == cores
    (probe,) = but_bf16(f)
    assert probe.name == "threads-to-cores"
    assert f"set_num_threads({cores})" in probe.detail


def test_clean_script_has_no_probes_and_no_syncs(capture):
    f = capture(PLANTED / "clean_compute_bound.py", "--steps", "10").facts
    assert f.status == "complete" and f.probes == [] and f.syncs == [] and f.loaders == []
    # the process's peak resident memory, at least what it held at any step's end
    assert f.rss_peak_bytes >= max(s.rss_bytes for s in f.steps)


def allocated_at_step_ends(trace_path):
    """The allocator's 'Total Allocated' at the end of each ProfilerStep span."""
    with gzip.open(trace_path, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])  # fmt: skip
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    return [
        [m for m in memory if m["ts"] <= s["ts"] + s["dur"]][-1]["args"]["Total Allocated"]
        for s in steps
    ]


def test_loss_accumulated_as_tensor_grows_in_the_trace(capture):
    leak = allocated_at_step_ends(
        capture(PLANTED / "loss_accumulated_as_tensor.py", "--steps", "20").trace_path
    )
    clean = allocated_at_step_ends(
        capture(PLANTED / "clean_compute_bound.py", "--steps", "10").trace_path
    )
    growth = [b - a for a, b in itertools.pairwise(leak)]
    # Each step keeps its graph: two 256x2048 float32 activations (4 MiB; 4.01 MiB measured).
    assert len(growth) == 2 and all(g >= 3 * 2**20 for g in growth), leak
    assert max(clean) - min(clean) < 2**20, clean  # a clean loop allocates the same each step


def test_no_optimizer_is_explained(capture):
    r = capture(PLANTED / "no_optimizer.py", "--steps", "6")
    assert r.facts.status == "script-exited" and r.trace_path is None
    assert "no optimizer.step() was seen" in r.facts.error
    assert "--step-on dataloader" in r.facts.error


def test_step_on_dataloader(capture):
    r = capture(PLANTED / "no_optimizer.py", "--steps", "10", step_on="dataloader")
    assert r.facts.status == "complete", r.facts.error
    assert r.facts.step_source == "dataloader" and len(r.facts.window) == 3
    assert len(profiler_steps(r.trace_path)) == 3


def test_script_raising_before_its_first_step(capture, capfd):
    r = capture(PLANTED / "raises_before_step.py")
    assert r.facts.status == "script-raised" and r.returncode == 1
    assert "ValueError: planted failure before the first step" in r.facts.error
    assert r.facts.steps == []
    assert "torchpace/capture" not in r.facts.error  # the user's traceback, not ours
    assert "runpy" not in r.facts.error


def test_script_raising_after_steps_keeps_the_partial_window(capture):
    r = capture(PLANTED / "raises_after_steps.py", "--steps", "3", warmup=1, steps=5)
    f = r.facts
    assert f.status == "script-raised" and r.returncode == 1
    assert "RuntimeError: planted failure at step 3" in f.error
    # step 1 counted, steps 2..3 profiled, 1 complete
    assert len(f.window) == 1 and r.trace_path is not None


def test_sys_exit(capture):
    r = capture(PLANTED / "sys_exit.py")
    assert r.facts.status == "script-exited" and r.returncode == 3
    assert "sys.exit(3)" in r.facts.error


def test_os_exit(capture):
    r = capture(PLANTED / "os_exit.py")
    assert r.returncode == 4 and r.facts.status == "script-exited"
    assert "os._exit()" in r.facts.error and "after 2 steps" in r.facts.error
    assert len(r.facts.steps) == 2  # saved as they came, before the process vanished


def test_syntax_error_names_file_and_line(tmp_path, capture, capfd):
    script = tmp_path / "train_bad.py"
    script.write_text((PLANTED / "syntax_error.py.txt").read_text())
    r = capture(script)
    assert r.facts.status == "script-raised" and r.returncode == 1
    assert 'train_bad.py", line 6' in r.facts.error and "SyntaxError" in r.facts.error
    assert 'train_bad.py", line 6' in capfd.readouterr().err  # shown as python shows it
    assert r.trace_path is None and r.facts.steps == []


def test_missing_script_says_so_without_starting_python(tmp_path, capfd):
    out = tmp_path / "run"
    out.mkdir()
    r = capture_script(CaptureSpec("no_such_train.py", [], out))
    assert r.returncode == 2 and r.facts.status == "script-exited"
    assert "'no_such_train.py' does not exist" in r.facts.error
    assert "does not exist" in capfd.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["run_facts.json"]


SEMANTICS = """\
import json, os, sys
import torch
import torchpace

record = {"argv": sys.argv, "name": __name__, "path0": sys.path[0], "cwd": os.getcwd()}
model = torch.nn.DataParallel(torch.nn.Linear(4, 1))
for step in range(12):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    print(f"loss {loss.item():.3f}")
    torchpace.step()
with open(sys.argv[1], "w") as f:
    json.dump(record, f)
"""


def test_script_runs_as_python_would_with_manual_steps(tmp_path, capture):
    script = tmp_path / "scripts" / "train_semantics.py"
    script.parent.mkdir()
    script.write_text(SEMANTICS)
    record = tmp_path / "record.json"
    r = capture(script, str(record), "--flag", step_on="manual", continue_after=True)
    assert r.facts.status == "complete" and r.returncode == 0, r.facts.error
    seen = json.loads(record.read_text())  # --continue let the script finish
    assert seen["argv"] == [str(script), str(record), "--flag"]
    assert seen["name"] == "__main__"
    assert seen["path0"] == str(script.parent)
    assert seen["cwd"] == os.getcwd()
    assert r.facts.step_source == "manual" and len(r.facts.window) == 3
    (wrapper,) = r.facts.wrappers
    assert wrapper.kind == "DataParallel" and wrapper.location.endswith("train_semantics.py:6")
    (sync,) = r.facts.syncs  # f"{loss.item():.3f}": one item() per step, at its line
    assert sync.kind == "item" and sync.location.endswith("train_semantics.py:10")
    assert sync.per_step == 1.0 and sync.device == "cpu"


def test_module_target(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(
        textwrap.dedent("""\
        import torch
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(10):
            m(torch.randn(3, 2)).sum().backward()
            opt.step()
        """)
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    r = capture_script(CaptureSpec("pkg.train", [], out, is_module=True, warmup=1, steps=2))
    assert r.facts.status == "complete", r.facts.error
    assert r.facts.command == ["python", "-m", "pkg.train"]


def test_timeout_when_no_step_comes(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text("import time\nimport torch\nwhile True:\n    time.sleep(0.05)\n")
    out = tmp_path / "out"
    out.mkdir()
    start = time.monotonic()
    r = capture_script(CaptureSpec(str(script), [], out, timeout_s=3))
    assert time.monotonic() - start < 30
    assert r.facts.status == "timeout" and r.returncode == 1
    assert "no step within --timeout 3" in r.facts.error


def test_timeout_works_when_started_with_sigint_ignored(tmp_path):
    """A job started in the background by a non-interactive shell (`cmd &` in a script, a CI
    step) inherits SIGINT ignored: the watchdog's SIGINT must still stop the script."""
    script = tmp_path / "stuck.py"
    script.write_text("import time\nimport torch\nwhile True:\n    time.sleep(0.05)\n")
    out = tmp_path / "out"
    out.mkdir()
    code = (
        "import signal, sys\n"
        "from pathlib import Path\n"
        "from torchpace.capture.runner import CaptureSpec, capture_script\n"
        f"r = capture_script(CaptureSpec({str(script)!r}, [], Path({str(out)!r}), timeout_s=3))\n"
        "print(r.facts.status, r.facts.error)\n"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - start < 30, proc.stdout
    assert proc.stdout.startswith("timeout ") and "no step within --timeout 3" in proc.stdout


def test_trace_size_is_capped(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    spec = CaptureSpec(str(PLANTED / "two_optimizers_gan.py"), ["--steps", "12"], out,
                       warmup=1, steps=3, max_trace_mb=0.01, probes=False)  # fmt: skip
    r = capture_script(spec)
    assert r.facts.trace_truncated is True
    assert r.trace_path.stat().st_size < 0.05 * 2**20


def test_ctrl_c_keeps_what_was_seen(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(
        textwrap.dedent("""\
        import time
        import torch
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        print("started", flush=True)
        for i in range(10_000):
            m(torch.randn(3, 2)).sum().backward()
            opt.step()
            print("stepped", i, flush=True)
            time.sleep(0.2)
        """)
    )
    out = tmp_path / "out"
    out.mkdir()
    # the driver stands for a process in a terminal's foreground: SIGINT raises
    # KeyboardInterrupt there even when the suite was started in the background, where it
    # would inherit SIGINT ignored (a verb handles that itself: capture/signals.py)
    driver = (
        "import signal, sys; from pathlib import Path\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from torchpace.capture.runner import CaptureSpec, capture_script\n"
        f"r = capture_script(CaptureSpec({str(script)!r}, [], Path({str(out)!r}), warmup=1, "
        "steps=1000))\n"
        "print('STATUS', r.facts.status, len(r.facts.steps), flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)  # fmt: skip
    assert proc.stdout.readline().strip() == "started"
    # interrupted after the script's 6th step, however slow the machine (the profiler's
    # start alone took over 2 s here)
    for line in proc.stdout:  # ends at EOF if the run died first: the asserts below say so
        if line.startswith("stepped 5"):
            break
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
    rest = proc.communicate(timeout=60)[0]
    status_line = next(line for line in rest.splitlines() if line.startswith("STATUS"))
    _, status, steps = status_line.split()
    assert status == "interrupted" and int(steps) >= 3
    facts = json.loads((out / "run_facts.json").read_text())
    assert facts["status"] == "interrupted" and facts["trace_path"]


def test_lazy_layers_before_their_first_forward_are_not_a_crash(capture):
    r = capture(PLANTED / "lazy_modules.py", "--steps", "6")
    assert r.facts.status == "complete", r.facts.error
    assert len(r.facts.steps) >= 3
    assert r.facts.model is not None and r.facts.model.class_name == "Sequential"


def test_torchs_warnings_name_the_users_line_not_torchpaces_wrapper(tmp_path):
    # torch warns with stacklevel=2 ("'pin_memory' argument is set as true but no accelerator
    # is found"): inside the capture's DataLoader wrapper that named capture/hooks.py
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        ds = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        loader = torch.utils.data.DataLoader(ds, batch_size=8, pin_memory=True)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:  # line 7: iter(loader) warns here
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    """)
    )
    log = tmp_path / "output.log"
    spec = CaptureSpec(str(script), [], tmp_path / "run", warmup=1, steps=2, measure_s=0)
    (tmp_path / "run").mkdir()
    capture_script(spec, output=log)
    output = log.read_text()
    if "pin_memory" not in output:
        pytest.skip("this torch build does not warn about pin_memory without an accelerator")
    warning = next(line for line in output.splitlines() if "pin_memory" in line)
    assert "train.py:7" in warning, warning
    assert "torchpace" not in warning
