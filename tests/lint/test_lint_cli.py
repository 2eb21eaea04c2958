"""`torchpace lint` as a user runs it: paths, selection, noqa, config, formats, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from json_schemas import validate_output

from torchpace.cli import main

LOADER = "from torch.utils.data import DataLoader\nloader = DataLoader(ds)\n"
DP = "import torch.nn as nn\nmodel = nn.DataParallel(model)\n"
MASK = "import torch\nmask = torch.zeros(4).cuda()\n"
SPLIT = "import torch\nsplit = torch.randperm(10).cuda()\n"
CONV = "import torch.nn as nn\nblock = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))\n"


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (tmp_path / "train.py").write_text(LOADER + DP)
    return tmp_path


def lint(*args: str) -> int:
    return main(["lint", *args])


def test_text_output_and_exit_codes(project, capsys):
    assert lint(str(project)) == 1
    out = capsys.readouterr().out.splitlines()
    path = project / "train.py"
    assert out[0] == (
        f"{path}:2:10: TP101 [dataloader-without-workers] DataLoader loads every batch in the "
        "main process (num_workers is not set; the default is 0)"
    )
    assert out[1].startswith(f"{path}:4:9: TP501 [data-parallel] ")
    assert out[-1] == "Found 2 problems."
    (project / "train.py").write_text("x = 1\n")
    assert lint(str(project)) == 0
    assert capsys.readouterr().out.strip() == "All checks passed."


def test_select_and_ignore_by_prefix(project, capsys):
    assert lint("--select", "TP5", str(project)) == 1
    assert "TP501" in capsys.readouterr().out
    assert lint("--select", "TP1", "--ignore", "TP101", str(project)) == 0
    assert lint("--ignore", "TP101,TP501", str(project)) == 0


def test_unknown_code_prefix_is_a_usage_error(project, capsys):
    assert lint("--select", "E501", str(project)) == 2
    assert "'E501' matches no torchpace code" in capsys.readouterr().err


def test_missing_path_is_a_usage_error(tmp_path, capsys):
    assert lint(str(tmp_path / "nope.py")) == 2
    assert "nope.py: no such file or folder" in capsys.readouterr().err


def test_noqa_with_code_and_bare(project, capsys):
    (project / "train.py").write_text(
        "from torch.utils.data import DataLoader\n"
        "a = DataLoader(ds)  # noqa: TP101\n"
        "b = DataLoader(ds)  # noqa\n"
        "c = DataLoader(ds)  # noqa: TP501\n"
    )
    assert lint("--format", "json", str(project)) == 1
    assert [f["line"] for f in json.loads(capsys.readouterr().out)["findings"]] == [4]


def test_json_format(project, capsys):
    lint("--format", "json", str(project))
    document = json.loads(capsys.readouterr().out)
    assert document["schema_version"] == 1 and document["verb"] == "lint"
    assert document["files"] == 1 and document["errors"] == []
    validate_output(document, "lint_report")
    findings = document["findings"]
    assert [f["code"] for f in findings] == ["TP101", "TP501"]
    assert set(findings[0]) >= {"path", "line", "column", "code", "practices", "message"}
    assert findings[0]["practices"] == ["P01"] and findings[0]["fix_safety"] is None


def test_json_reports_fix_safety(tmp_path, capsys):
    (tmp_path / "a.py").write_text(MASK + CONV)
    (tmp_path / "b.py").write_text(SPLIT)
    lint("--format", "json", str(tmp_path))
    document = json.loads(capsys.readouterr().out)
    safety = [(f["code"], f["fix_safety"]) for f in document["findings"]]
    # per finding: TP105 is safe on torch.zeros, unsafe on the random torch.randperm
    assert safety == [("TP105", "safe"), ("TP302", "unsafe"), ("TP105", "unsafe")]


def test_github_format(project, capsys):
    lint("--format", "github", str(project))
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"::warning file={project / 'train.py'},line=2,col=10,title=TP101")


def test_config_in_pyproject(project, capsys):
    (project / "pyproject.toml").write_text(
        '[tool.torchpace.lint]\nignore = ["TP501"]\nexclude = ["generated/*"]\n'
    )
    (project / "generated").mkdir()
    (project / "generated" / "x.py").write_text(DP)
    assert lint(str(project)) == 1
    out = capsys.readouterr().out
    assert "TP101" in out and "TP501" not in out
    # excludes apply to files named one by one too, as pre-commit passes them
    (project / "generated" / "y.py").write_text(LOADER)
    assert lint(str(project / "generated" / "y.py")) == 0


def test_bad_config_is_a_usage_error_naming_the_file(project, capsys):
    (project / "pyproject.toml").write_text("[tool.torchpace.lint]\nselct = ['TP1']\n")
    assert lint(str(project)) == 2
    assert "pyproject.toml" in capsys.readouterr().err
    (project / "pyproject.toml").write_text("[tool.torchpace.lint\n")
    assert lint(str(project)) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_virtual_envs_and_git_are_skipped(project):
    (project / "train.py").write_text("x = 1\n")
    for folder in (".git", ".venv", "site-packages", "__pycache__", "myenv"):
        (project / folder).mkdir()
        (project / folder / "bad.py").write_text(DP)
    (project / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    assert lint(str(project)) == 0


def test_diff_shows_fixes_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "a.py"
    path.write_text(MASK + CONV)
    assert lint("--diff", str(path)) == 1
    out = capsys.readouterr().out
    assert '-mask = torch.zeros(4).cuda()\n+mask = torch.zeros(4, device="cuda")' in out
    assert "bias=False" not in out
    assert lint("--diff", "--unsafe-fixes", str(path)) == 1
    assert "bias=False" in capsys.readouterr().out
    assert path.read_text() == MASK + CONV


def test_unsafe_fixes_only_when_asked(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(MASK + CONV)
    assert lint("--fix", str(path)) == 1  # the unsafe one remains
    assert "bias=False" not in path.read_text()
    assert lint("--fix", "--unsafe-fixes", str(path)) == 0
    assert "nn.Conv2d(3, 8, 3, bias=False)" in path.read_text()


def test_unsafe_fixes_alone_is_a_usage_error(tmp_path, capsys):
    assert lint("--unsafe-fixes", str(tmp_path)) == 2
    assert "needs --fix or --diff" in capsys.readouterr().err


def test_many_files_on_two_workers_match_one_worker(tmp_path, capsys):
    for i in range(40):
        (tmp_path / f"m{i:02d}.py").write_text(LOADER if i % 2 else DP)
    assert lint("--jobs", "1", "--format", "json", str(tmp_path)) == 1
    serial = capsys.readouterr().out
    assert lint("--jobs", "2", "--format", "json", str(tmp_path)) == 1
    assert capsys.readouterr().out == serial
    assert len(json.loads(serial)["findings"]) == 40


def test_the_installed_command_runs_on_the_article_example(child_env):
    done = subprocess.run(
        [sys.executable, "-m", "torchpace", "lint", "examples/fake_cifar_resnet.py"],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    assert "TP101 [dataloader-without-workers]" in done.stdout
    assert "TP102 [pageable-host-to-device-copy]" in done.stdout


def test_a_file_that_cannot_be_read_never_ends_in_all_checks_passed(tmp_path, capsys):
    (tmp_path / "ok.py").write_text("x = 1\n")
    (tmp_path / "blob.py").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00")
    assert lint(str(tmp_path)) == 2
    captured = capsys.readouterr()
    assert "All checks passed." not in captured.out
    assert "1 file could not be read, parsed or fixed" in captured.out
    assert "blob.py" in captured.err
    (tmp_path / "dp.py").write_text(DP)
    assert lint(str(tmp_path)) == 2
    out = capsys.readouterr().out
    assert "Found 1 problem." in out and "1 file could not be read" in out
