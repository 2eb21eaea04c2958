import re
import subprocess
import sys

import pytest
from conftest import ROOT


@pytest.mark.slow
def test_example_runs_small_and_prints_step_time_and_loss():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples/fake_cifar_resnet.py"),
            "--image-size",
            "32",
            "--dataset-size",
            "256",
            "--steps",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if line.startswith("step")]
    assert len(lines) == 3
    assert all(re.match(r"step +\d+ +[\d.]+ ms/step +loss \d+\.\d+", line) for line in lines)


def test_example_defaults_are_the_articles():
    src = (ROOT / "examples/fake_cifar_resnet.py").read_text()
    for fragment in (
        "default=224",
        "default=10000",
        "default=32",
        "weights=None",
        "lr=0.001, momentum=0.9",
        "shuffle=True",
        "T.Normalize((0.5, 0.5, 0.5)",
    ):
        assert fragment in src
    assert "num_workers" not in src.split("def main")[1]
    assert "pin_memory" not in src and "non_blocking" not in src
