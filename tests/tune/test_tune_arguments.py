"""tune's command line refuses what would harm the user's files or mean nothing, before any
run: --json onto a file that is not an earlier tune report (the training script named by
mistake), and a time budget or trial timeout that is not a positive number of seconds."""

from __future__ import annotations

import json

import pytest

from torchpace.cli import main


def test_json_onto_the_training_script_is_refused(tmp_path, capsys, monkeypatch):
    """Seen: `tune --json victim.py victim.py` replaced the script with the report, exit 0."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "victim.py"
    script.write_text("print('train')\n")
    assert main(["tune", "--json", str(script), str(script)]) == 2
    err = capsys.readouterr().err
    assert f"--json {script} exists and is not an earlier tune report" in err
    assert script.read_text() == "print('train')\n"
    assert not (tmp_path / "torchpace-runs").exists()  # refused before any run


def test_json_onto_another_verbs_report_is_refused_and_onto_tunes_own_is_not(tmp_path, capsys):
    from torchpace.tune.command import _outputs_problem

    doctor = tmp_path / "doctor.json"
    doctor.write_text(json.dumps({"verb": "doctor"}))
    earlier = tmp_path / "tune.json"
    earlier.write_text(json.dumps({"verb": "tune", "trials": []}))

    class Args:
        html = None

    Args.json = doctor
    assert "is not an earlier tune report" in _outputs_problem(Args)
    Args.json = earlier
    assert _outputs_problem(Args) is None
    Args.json = tmp_path / "new" / "report.json"
    assert _outputs_problem(Args) is None


@pytest.mark.parametrize(
    "flag,value",
    [("--time-budget", "-5"), ("--time-budget", "0"), ("--trial-timeout", "-5"),
     ("--trial-timeout", "0"), ("--trial-timeout", "nan"), ("--time-budget", "soon")],
)  # fmt: skip
def test_a_time_limit_that_is_not_positive_is_refused_by_argparse(tmp_path, capsys, flag, value,
                                                                   monkeypatch):  # fmt: skip
    """Seen: -5 ended in "no optimizer.step() was seen ... use --timeout" (a flag tune does
    not have); --trial-timeout 0 was ignored; --time-budget 0 ran the doctor and exited 0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('train')\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", flag, value, "train.py"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err and value in err
    assert not (tmp_path / "torchpace-runs").exists()
