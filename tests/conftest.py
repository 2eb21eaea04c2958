import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def shared_traces() -> Path:
    """The real CUDA traces in ../shared/traces; tests using them skip where it is absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} is absent (the shared traces are not in this checkout)")
    return SHARED_TRACES


@pytest.fixture
def child_env() -> dict:
    """Environment for child processes: the source tree importable even if not installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


PYTHON = sys.executable
