"""`torchpace tune` never harms the user's work: the folder is left as it was found (every
file's bytes and times), every trial starts from the state the first one started from, a
hang in the doctor's phase ends, and SIGTERM leaves a report and no process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ROOT / "tests" / "planted" / "tune"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
FAST = ["--warmup", "2", "--steps", "4"]
PAST_NS = 1_600_000_000_000_000_000


def _tree(root: Path, skip: Path) -> dict:
    """Every file's bytes, time and mode, and every folder's time (but the root's, which
    gets the run folder), under root."""
    state = {}
    for folder, _dirs, files in os.walk(root):
        if Path(folder) == skip or skip in Path(folder).parents:
            continue
        if Path(folder) != root:
            state[folder] = ("dir", os.stat(folder).st_mtime_ns)
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            state[path] = (Path(path).read_bytes(), st.st_mtime_ns, st.st_mode)
    return state


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_tune_leaves_the_folder_as_it_found_it_and_every_trial_resumes_from_the_same_state(
    tmp_path,
):
    shutil.copy(PLANTED / "writes_its_folder.py", tmp_path / "train.py")
    # the user's own run: state.pt at step 5, a checkpoint, a log, out/model.pt, logs/
    subprocess.run([sys.executable, "train.py", "--resume", "--until", "5"], cwd=tmp_path,
                   check=True, capture_output=True)  # fmt: skip
    for path in sorted(tmp_path.rglob("*"), key=lambda p: -len(p.parts)):
        os.utime(path, ns=(PAST_NS, PAST_NS))
    before = _tree(tmp_path, tmp_path / "run")
    before.pop(str(tmp_path / "torchpace-runs"), None)
    proc = subprocess.run(
        [sys.executable, "-m", "torchpace", "tune", "--out", str(tmp_path / "run"), *FAST,
         "--knobs", "num-workers", "train.py", "--resume"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = _tree(tmp_path, tmp_path / "run")
    for own in ("torchpace-runs", "torchpace-runs/tune.lock"):
        after.pop(str(tmp_path / own), None)
    # byte-identical, same times and modes; nothing new outside the run folder
    assert after.keys() == before.keys(), sorted(set(after) ^ set(before))
    for path, was in before.items():
        assert after[path] == was, path
    # (torchpace-runs/: the folder's lock and journal, docs/tune.md "One tune at a time")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["train.py", "state.pt", "ckpt_0.pt", "train.log", "out", "logs", "run", "torchpace-runs"]
    )
    assert [p.name for p in (tmp_path / "torchpace-runs").iterdir()] == ["tune.lock"]
    report = json.loads((tmp_path / "run" / "tune_report.json").read_text())
    trials = report["trials"]
    assert len(trials) >= 4 and all(t["outcome"] == "ok" for t in trials), trials
    # every trial started where the user's run stopped, and ran the same steps
    for index in range(len(trials)):
        output = (tmp_path / "run" / "trials" / f"{index:02d}" / "output.log").read_text()
        assert output.startswith("resumed from step 5"), output
    assert len({(len(t["step_ms"]), t["measured_from"]) for t in trials}) == 1
    # what the script wrote, said in the report and on the terminal
    changed = {os.path.relpath(p, tmp_path) for p in report["files"]["changed"]}
    assert {"state.pt", "ckpt_0.pt", "train.log", "out/model.pt"} <= changed
    created = {os.path.relpath(p, tmp_path) for p in report["files"]["created"]}
    assert created and all(p.startswith("logs/run-") for p in created), created
    assert report["files"]["restored"] is True and report["files"]["unwatched"] == []
    assert "each put back as it was after every run" in " ".join(proc.stdout.split())
    # a created file is kept in its run's folder
    kept = list((tmp_path / "run" / "trials").glob("*/files_created/logs/run-*.txt"))
    assert len(kept) == len(trials)


@pytest.mark.slow
def test_a_hang_in_the_doctors_phase_ends_at_the_trial_timeout(tmp_path):
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """
            import time
            import torch
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(100):
                model(torch.randn(8, 4)).sum().backward()
                opt.step()
                if step == 1:
                    time.sleep(100000)
            """
        )
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "torchpace", "tune", "--out", str(tmp_path / "run"), *FAST,
         "--trial-timeout", "30", "train.py"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    took = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    assert "the doctor could not measure a step" in proc.stderr
    assert "--timeout 30" in proc.stderr, proc.stderr
    assert took < 30 + 60, took


@pytest.mark.slow
def test_sigterm_during_a_trial_writes_the_report_and_leaves_no_process(tmp_path):
    marker = tmp_path.parent / f"{tmp_path.name}-doctor-ran"
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            f"""
            import os, time
            import torch
            import torch.utils.data as data
            loader = data.DataLoader(data.TensorDataset(torch.randn(64, 4)), batch_size=8,
                                     num_workers=2, persistent_workers=True)
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            # the doctor's phase runs through; the trials hang (a marker outside the folder)
            hang = os.path.exists({str(marker)!r})
            open({str(marker)!r}, "w").close()
            for epoch in range(1000):
                for step, (x,) in enumerate(loader):
                    model(x).sum().backward()
                    opt.step()
                    if hang and step == 2:  # the workers are alive: the loop is mid-epoch
                        time.sleep(100000)
            """
        )
    )
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchpace", "tune", "--out", str(run), *FAST, "--quiet",
         "train.py"],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        trial = str(run / "trials" / "00")
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and len(_processes_mentioning(trial)) < 3:
            time.sleep(0.5)  # the trial's child and its two workers
        assert len(_processes_mentioning(trial)) >= 3, "the trial's workers never started"
        time.sleep(3.0)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert _processes_mentioning(str(run)) == [], "a trial's process outlived tune"
    report = json.loads((run / "tune_report.json").read_text())
    assert report["stopped"] == "interrupted"
    assert report["trials"][0]["outcome"] == "interrupted"
    assert (run / "torchpace.toml").is_file()
