"""benchmarks/corpus_runners.py: each real script copied with its data generated, changed
only where its docstring says, and still a valid program."""

import ast
import importlib.util
import sys

import pytest
from conftest import ROOT


def runners():
    spec = importlib.util.spec_from_file_location(
        "corpus_runners", ROOT / "benchmarks" / "corpus_runners.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_runners"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["makemore", "gpt"])
def test_prepares_the_script_and_its_generated_data(name, tmp_path):
    module = runners()
    runner = module.RUNNERS[name]
    if not runner.available():
        pytest.skip(f"{runner.source} is not in this checkout's ../shared/corpus")
    prepared = runner.prepare(tmp_path)
    script = (tmp_path / prepared.script).read_text()
    ast.parse(script)
    original = runner.source.read_text().splitlines()
    changed = [line for line in script.splitlines() if line not in original]
    if name == "makemore":
        assert (
            "torch.utils.tensorboard" not in script
            and (tmp_path / "names.txt").stat().st_size > 100_000
        )
        assert all("SummaryWriter" in c or c.startswith("    ") for c in changed)
        assert "--num-workers" not in prepared.args  # the script's own default, 4
    else:
        assert (tmp_path / "input.txt").stat().st_size > 100_000
        assert sorted(c.split(" = ")[0] for c in changed) == sorted(module.GPT_SETTINGS)
    again = runner.prepare(tmp_path / "again")
    assert (tmp_path / "again" / again.script).read_text() == script  # same every time
