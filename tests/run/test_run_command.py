"""`torchpace run`: the configuration checked, then the script run in this process with its
knobs applied.

The checks (a missing or invalid configuration, another environment, a missing script)
run in this process; where the command would run the script, the capture child's
``run_only`` is replaced to see what it would run. The end-to-end tests run the command in
a subprocess and look at what the script observes (its DataLoader's num_workers), not at
the configuration file.
"""

import json
import os
import subprocess
import sys

import pytest
import run_fakes

from torchpace.cli import main
from torchpace.knobs.fingerprint import Fingerprint, current

OTHER_GPU = Fingerprint("NVIDIA Imaginary 9000 (sm 12.0)", "2.14", 2)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with a script and a configuration setting the fake knob; the cwd."""
    run_fakes.register(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(run_fakes.LOADER_SCRIPT)
    run_fakes.write_config(tmp_path / "torchpace.toml", {run_fakes.NAME: 2})
    return tmp_path


@pytest.fixture
def execs(monkeypatch):
    """What the command would run in this process, instead of running it."""
    import torchpace.capture.child as child

    calls = []
    monkeypatch.setattr(child, "run_only", lambda spec: calls.append(spec) or 0)
    return calls


def _spec_of(spec) -> dict:
    return json.loads(spec.to_json())


def test_runs_the_script_in_this_process_with_the_knobs_in_a_run_spec(project, execs, capsys):
    assert main(["run", "train.py", "--lr", "0.1", "-m", "x"]) == 0
    (call,) = execs
    spec = _spec_of(call)
    assert spec["mode"] == "run"
    assert spec["knobs"] == {"fake-workers": 2}
    assert spec["target"] == "train.py"
    assert spec["args"] == ["--lr", "0.1", "-m", "x"]
    assert spec["is_module"] is False
    err = capsys.readouterr().err
    assert err == "torchpace run: applying fake-workers=2 from torchpace.toml\n"


def test_module_target_and_another_config_path(project, execs, capsys):
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "train.py").write_text("")
    (project / "torchpace.toml").rename(project / "tuned.toml")
    assert main(["run", "--config", "tuned.toml", "-m", "pkg.train", "--epochs", "1"]) == 0
    spec = _spec_of(execs[0])
    assert (spec["target"], spec["is_module"], spec["args"]) == (
        "pkg.train",
        True,
        ["--epochs", "1"],
    )
    assert "from tuned.toml" in capsys.readouterr().err


def test_another_environment_is_refused_naming_each_difference(project, execs, capsys):
    here = current()
    other = Fingerprint(OTHER_GPU.device, "2.3", (here.cores or 1) + 6)
    run_fakes.write_config(project / "torchpace.toml", {run_fakes.NAME: 2}, other)
    assert main(["run", "train.py"]) == 2
    assert execs == []
    err = capsys.readouterr().err
    assert "torchpace.toml was measured in another environment" in err
    assert f"device: tuned on {OTHER_GPU.device}, this is {here.device}" in err
    assert f"torch: tuned with torch 2.3, this is torch {here.torch}" in err
    assert f"cores: tuned with {other.cores} usable CPU cores" in err
    assert "--force" in err


def test_force_applies_it_anyway_and_says_what_differs(project, execs, capsys):
    run_fakes.write_config(project / "torchpace.toml", {run_fakes.NAME: 2}, OTHER_GPU)
    assert main(["run", "--force", "train.py"]) == 0
    assert _spec_of(execs[0])["knobs"] == {"fake-workers": 2}
    err = capsys.readouterr().err
    assert f"applied anyway (--force): device: tuned on {OTHER_GPU.device}" in err
    assert "applying fake-workers=2" in err


GPU_KNOBS = "[knobs]\ncudnn-benchmark = true\npin-memory = true\nnum-workers = 0\n"


def test_gpu_knobs_without_cuda_are_named_in_one_line(project, execs, capsys, monkeypatch):
    """A torchpace.toml with no [environment] table (hand-written, or copied from the GPU
    machine without it) setting knobs that act on a GPU alone: on a machine without CUDA,
    one line names them and why, instead of applying them without a word."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (project / "torchpace.toml").write_text(GPU_KNOBS)
    assert main(["run", "train.py"]) == 0
    assert len(execs) == 1  # still run: the knobs are harmless, only idle
    lines = capsys.readouterr().err.splitlines()
    (idle,) = [line for line in lines if "will do nothing here" in line]
    assert idle.startswith("torchpace run: cudnn-benchmark, pin-memory will do nothing here")
    assert "no CUDA device" in idle and "pinned memory only speeds host-to-GPU copies" in idle
    assert "num-workers" not in idle


def test_gpu_knobs_on_a_cuda_machine_say_nothing_more(project, execs, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    (project / "torchpace.toml").write_text(GPU_KNOBS)
    assert main(["run", "train.py"]) == 0
    assert "will do nothing here" not in capsys.readouterr().err


def test_forced_gpu_configuration_names_the_idle_knobs_too(project, execs, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    knobs = {"matmul-precision": "high", "expandable-segments": True}
    run_fakes.write_config(project / "torchpace.toml", knobs, OTHER_GPU)
    assert main(["run", "--force", "train.py"]) == 0
    err = capsys.readouterr().err
    assert "applied anyway (--force): device" in err
    assert "matmul-precision, expandable-segments will do nothing here" in err


def test_missing_config_says_to_tune_first(project, execs, capsys):
    (project / "torchpace.toml").unlink()
    assert main(["run", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "torchpace.toml: no such file; run `torchpace tune" in err
    assert execs == []


def test_invalid_config_is_named_before_anything_runs(project, execs, capsys):
    (project / "torchpace.toml").write_text("[knobs]\nfake-workers = 2\nnum_workers = 4\n")
    assert main(["run", "train.py"]) == 2
    assert "torchpace.toml:3: unknown knob 'num_workers' in [knobs]" in capsys.readouterr().err
    assert execs == []


def test_missing_script_syntax_error_and_no_script(project, execs, capsys):
    assert main(["run", "tran.py"]) == 2
    assert "tran.py does not exist" in capsys.readouterr().err
    (project / "bad.py").write_text("def f(:\n")
    assert main(["run", "bad.py"]) == 1
    assert "bad.py has a syntax error at line 1" in capsys.readouterr().err
    assert main(["run", "-m", "no_such_module_here"]) == 2
    assert "module 'no_such_module_here' cannot be found" in capsys.readouterr().err
    assert main(["run"]) == 2
    assert "nothing to run" in capsys.readouterr().err
    assert execs == []


# --- end to end: the real exec ------------------------------------------------------------


@pytest.fixture
def run_env(project, child_env) -> dict:
    env = dict(child_env)
    site = run_fakes.sitecustomize_dir(project)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    (project / "tmp").mkdir()
    env["TMPDIR"] = str(project / "tmp")  # where the run spec goes, to see it deleted
    return env


def _torchpace_run(args, env, cwd, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "torchpace", "run", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_script_sees_the_knob_and_its_exit_code_and_output_pass_through(project, run_env):
    with (project / "train.py").open("a") as f:
        f.write("sys.stdout.flush()\nsys.exit(3)\n")
    proc = _torchpace_run(["train.py", "--lr", "1"], run_env, project)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    # the script's own DataLoader got the configured value; the process is the one
    # started (the script runs in it, no parent in between: signals reach the script)
    assert out == f"num_workers=2 pid={proc.pid} argv=['--lr', '1']\n"
    assert err == "torchpace run: applying fake-workers=2 from torchpace.toml\n"
    assert list((project / "tmp").iterdir()) == []  # nothing left behind


@pytest.mark.slow
def test_module_runs_and_an_exception_shows_only_the_scripts_frames(project, run_env):
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "train.py").write_text(
        run_fakes.LOADER_SCRIPT + "\n\ndef fail():\n    raise ValueError('boom')\n\n\nfail()\n"
    )
    proc = _torchpace_run(["-m", "pkg.train", "a"], run_env, project)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert out.startswith("num_workers=2 ")
    assert out.endswith("argv=['a']\n")
    assert "ValueError: boom" in err
    assert "Traceback (most recent call last)" in err
    assert "torchpace" not in err.split("Traceback", 1)[1]  # no child.py or runpy frames


@pytest.mark.slow
def test_with_the_real_num_workers_knob(tmp_path, child_env):
    try:
        import torchpace.knobs.num_workers  # noqa: F401
    except ImportError as e:
        pytest.skip(f"the num-workers knob is not in this checkout yet ({e})")
    (tmp_path / "train.py").write_text(run_fakes.LOADER_SCRIPT)
    run_fakes.write_config(tmp_path / "torchpace.toml", {"num-workers": 2})
    proc = _torchpace_run(["train.py"], child_env, tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.startswith("num_workers=2 "), (out, err)


# --- start-up: nothing of torchpace's costs the script time ----------------------------------

PROBE = "import sys\nprint('torch imported before the script:', 'torch' in sys.modules)\n"


def test_run_imports_no_torch_before_the_script(tmp_path, child_env):
    """The environment check is the only thing that would read torch (its fingerprint): with
    no knob to apply it does not run, and nothing else before the script imports torch (an
    exec of a second Python and a torch import were 1.4 s before the script's first line)."""
    (tmp_path / "probe.py").write_text(PROBE)
    here = current()
    other = Fingerprint("CPU Imaginary", here.torch, here.cores)  # an [environment] table
    run_fakes.write_config(tmp_path / "x.toml", {}, other)
    proc = _torchpace_run(["--config", "x.toml", "probe.py"], child_env, tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out == "torch imported before the script: False\n"


def test_run_verb_imports_no_torch_and_no_other_verb(tmp_path):
    code = (
        "import sys\n"
        "import torchpace.cli as cli\n"
        "cli.build_parser(only='run')\n"
        "import torchpace.run.command, torchpace.capture.child, torchpace.knobs.config\n"
        "print(sorted(m for m in ('torch', 'numpy', 'torchpace.doctor.command', "
        "'torchpace.tune.command', 'importlib.metadata') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout
    assert out == "[]\n"


HEAVY_PROBE = (
    "import sys\n"
    "print(sorted(m for m in ('torchpace.facts.run', 'torchpace.env.facts', "
    "'torchpace.env.gpu', 'torchpace.capture.session', 'torchpace.doctor.command', "
    "'torchpace.tune.command') if m in sys.modules))\n"
)


def test_run_with_knobs_reaches_the_script_without_the_capture_s_facts(tmp_path, child_env):
    """With knobs to apply (the environment check runs, the knobs import torch), the
    script's first line still finds none of what a measured run needs: the run facts' two
    dozen dataclasses and `torchpace env`'s collectors were 10-15 ms of every tuned job's
    start-up (benchmarks/run_startup.py)."""
    (tmp_path / "probe.py").write_text(HEAVY_PROBE)
    run_fakes.write_config(tmp_path / "x.toml", {"anomaly-detection-off": True}, current())
    proc = _torchpace_run(["--config", "x.toml", "probe.py"], child_env, tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "applying anomaly-detection-off=true" in err
    assert out == "[]\n"
