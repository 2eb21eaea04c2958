"""torchpace.apply(): the configuration applied from inside the user's script."""

import os
import subprocess
import sys

import pytest
import run_fakes

import torchpace
from torchpace import ConfigError, EnvironmentMismatch
from torchpace.knobs.fingerprint import Fingerprint

apply_module = sys.modules["torchpace.apply"]  # `torchpace.apply` is the function


class _Runtime:
    """Records the filters a knob adds (the real runtime would patch this pytest process)."""

    def __init__(self):
        self.loader_filters = []
        self.applied_by = None  # what torchpace.apply checks before applying twice

    def filter_loader_kwargs(self, f):
        self.loader_filters.append(f)


@pytest.fixture
def fake_runtime(tmp_path, monkeypatch):
    import torchpace.capture.runtime

    run_fakes.register(monkeypatch)
    runtime = _Runtime()
    monkeypatch.setattr(torchpace.capture.runtime, "runtime", lambda: runtime)
    monkeypatch.chdir(tmp_path)
    return runtime


def test_applies_the_knobs_once_and_returns_what_they_did(fake_runtime, tmp_path, capsys):
    run_fakes.write_config(tmp_path / "torchpace.toml", {run_fakes.NAME: 3})
    records = torchpace.apply()
    assert [(r.name, r.value, r.applied, r.detail) for r in records] == [
        ("fake-workers", 3, True, "num_workers=3")
    ]
    (f,) = fake_runtime.loader_filters
    assert f({"batch_size": 2}) == {"batch_size": 2, "num_workers": 3}
    assert torchpace.apply() == records  # a second call applies nothing twice
    assert len(fake_runtime.loader_filters) == 1
    assert "already applied in this process (by torchpace.toml)" in capsys.readouterr().err


def test_another_environment_raises_naming_the_difference(fake_runtime, tmp_path, capsys):
    path = tmp_path / "tuned.toml"
    other = Fingerprint("NVIDIA Imaginary 9000 (sm 12.0)", None, None)
    run_fakes.write_config(path, {run_fakes.NAME: 2}, other)
    with pytest.raises(EnvironmentMismatch) as e:
        torchpace.apply(path)
    assert isinstance(e.value, ConfigError)
    assert "device: tuned on NVIDIA Imaginary 9000 (sm 12.0)" in str(e.value)
    assert "force=True" in str(e.value)
    assert fake_runtime.loader_filters == []
    torchpace.apply(path, force=True)
    assert len(fake_runtime.loader_filters) == 1
    assert "applied anyway (force): device: tuned on" in capsys.readouterr().err


def test_missing_file_raises_a_config_error(fake_runtime):
    with pytest.raises(ConfigError, match=r"torchpace.toml: no such file; run `torchpace tune"):
        torchpace.apply()


@pytest.mark.slow
def test_in_a_script_its_loader_gets_the_knob(tmp_path, monkeypatch, child_env):
    run_fakes.register(monkeypatch)  # to write the configuration here
    run_fakes.write_config(tmp_path / "torchpace.toml", {run_fakes.NAME: 2})
    script = "import torchpace\nrecords = torchpace.apply()\n" + run_fakes.LOADER_SCRIPT
    script += "print([(r.name, r.value, r.detail) for r in records])\n"
    (tmp_path / "train.py").write_text(script)
    env = dict(child_env)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(run_fakes.sitecustomize_dir(tmp_path)), env["PYTHONPATH"]]
    )
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("num_workers=2 ")
    assert lines[1] == "[('fake-workers', 2, 'num_workers=2')]"


def test_gpu_knobs_without_cuda_are_named(fake_runtime, tmp_path, capsys, monkeypatch):
    import torch

    import torchpace.knobs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torchpace.knobs, "apply_all", lambda config, runtime, make: [])
    (tmp_path / "torchpace.toml").write_text("[knobs]\ncudnn-benchmark = true\n")
    torchpace.apply()
    err = capsys.readouterr().err
    assert err.startswith("torchpace.apply: cudnn-benchmark will do nothing here")
    assert "no CUDA device" in err
