"""examples/ddp_with_helpers.py runs as a plain single-process script (the 2-process path
of the same helpers is tested in tests/distributed/)."""

import json
import subprocess

import pytest
from conftest import PYTHON, ROOT


@pytest.mark.slow
def test_the_ddp_example_runs_in_one_process_and_evaluates_every_sample(tmp_path, child_env):
    report, checkpoint = tmp_path / "report.json", tmp_path / "model.pt"
    proc = subprocess.run(
        [PYTHON, str(ROOT / "examples" / "ddp_with_helpers.py"), "--steps", "2", "--warmup", "1",
         "--batch-size", "8", "--val-size", "37", "--checkpoint", str(checkpoint),
         "--report", str(report)],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(report.read_text())
    assert figures["processes"] == 1 and figures["evaluated"] == 37
    assert figures["samples_per_s"] > 0
    assert checkpoint.stat().st_size > 0
    assert "accuracy" in proc.stderr and "over exactly 37 samples" in proc.stderr
