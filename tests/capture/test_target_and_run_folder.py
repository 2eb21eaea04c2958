"""The run glue every capturing verb shares: is the target runnable (target.py), where the
artifacts go (run_folder.py), and what exit code and message a capture status gives
(outcome.py). No child process is started here."""

import re

import pytest

from torchpace.capture.outcome import run_outcome
from torchpace.capture.run_folder import RunFolderError, new_run_folder
from torchpace.capture.target import check_target
from torchpace.exit_codes import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE
from torchpace.facts.run import RunFacts, Status, StepPhase, StepRecord

# --- target.py ---


def test_runnable_script_and_module_have_no_problem(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert check_target(str(script), is_module=False) is None
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)  # `python -m` finds modules from the current folder
    assert check_target("mypkg.train", is_module=True) is None


@pytest.mark.parametrize("make_folder", [False, True], ids=["missing", "folder"])
def test_missing_script_or_folder_is_a_usage_error(tmp_path, make_folder):
    target = tmp_path / "train.py"
    if make_folder:
        target.mkdir()
    problem = check_target(str(target), is_module=False)
    assert problem.exit_code == EXIT_USAGE
    where = "is a folder" if make_folder else "does not exist"
    assert problem.message == f"script {target} {where}; give the path of your training script"


def test_syntax_error_names_the_line_and_fails_like_python(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import torch\nfor x in range(3)\n    pass\n")
    problem = check_target(str(script), is_module=False, who="the doctor")
    assert problem.exit_code == EXIT_FAILURE
    assert f"{script} has a syntax error at line 2" in problem.message
    assert "for x in range(3)" in problem.message
    assert problem.message.endswith("and run the doctor again")


def test_missing_module_is_a_usage_error():
    problem = check_target("no_such_pkg_xyz.train", is_module=True)
    assert problem.exit_code == EXIT_USAGE and "'no_such_pkg_xyz.train'" in problem.message


def test_module_lookup_leaves_sys_path_as_it_was():
    import sys

    before = list(sys.path)
    check_target("no_such_pkg_xyz", is_module=True)
    assert sys.path == before


# --- run_folder.py ---


def test_default_folder_is_new_and_timestamped(tmp_path):
    first = new_run_folder(None, runs_dir=tmp_path / "runs")
    second = new_run_folder(None, runs_dir=tmp_path / "runs")
    assert first.is_dir() and second.is_dir() and first != second
    assert first.parent == tmp_path / "runs"
    assert re.fullmatch(r"\d{8}-\d{6}(-\d+)?", first.name)


def test_requested_folder_new_or_empty_is_used(tmp_path):
    new = tmp_path / "a" / "b"
    assert new_run_folder(new) == new and new.is_dir()
    assert new_run_folder(new) == new  # empty: still fine


@pytest.mark.parametrize("kind", ["holds-files", "is-a-file"])
def test_requested_folder_with_content_is_refused_and_left_alone(tmp_path, kind):
    out = tmp_path / "out"
    if kind == "holds-files":
        out.mkdir()
        (out / "keep.txt").write_text("user data")
    else:
        out.write_text("user data")
    with pytest.raises(RunFolderError, match="the doctor never writes over existing files"):
        new_run_folder(out, who="the doctor")
    kept = out / "keep.txt" if kind == "holds-files" else out
    assert kept.read_text() == "user data"


# --- outcome.py ---


def facts(status: Status, window: int, error: str | None = None) -> RunFacts:
    steps = [StepRecord(i, 10.0, 0.0, True, phase=StepPhase.WINDOW) for i in range(window)]
    return RunFacts(
        command=["python", "train.py"],
        step_source="optimizer",
        optimizers=["SGD"],
        optimizer_steps_per_step=1.0,
        warmup=3,
        steps_requested=5,
        status=status,
        error=error,
        steps=steps,
    )


@pytest.mark.parametrize(
    ("status", "window", "returncode", "report_code", "code", "words"),
    [
        (Status.COMPLETE, 5, 0, 0, 0, None),
        (Status.COMPLETE, 5, 0, 1, 1, None),  # --fail-on matched
        (Status.COMPLETE, 5, 3, 0, 3, None),  # --continue, then the script failed
        (Status.INTERRUPTED, 2, 130, 0, EXIT_INTERRUPTED, "interrupted (Ctrl-C) after 2"),
        (Status.INTERRUPTED, 0, 130, 0, EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
        (Status.SCRIPT_RAISED, 0, 1, 0, 1, "raised an exception (its traceback is above) before"),
        (Status.SCRIPT_RAISED, 2, 1, 0, 1, "after 2 profiled steps"),
        (Status.TIMEOUT, 0, 0, 0, 1, "timed out: no step came in time"),
        (Status.SCRIPT_EXITED, 0, 0, 0, 1, "before any step was profiled"),
        (Status.SCRIPT_EXITED, 0, 4, 0, 4, "ended with exit code 4 before any step"),
        # a death by signal N exits 128 + N, as in a shell (139, not 245), and is named
        (Status.SCRIPT_EXITED, 0, -11, 0, 139, "killed by SIGSEGV (signal 11: a crash in"),
        (Status.SCRIPT_EXITED, 2, -9, 0, 137, "killed by SIGKILL (signal 9: maybe the OOM"),
        (Status.SCRIPT_EXITED, 2, 0, 1, 1, "after 2 of 5 profiled steps; the report covers"),
    ],
)
def test_outcome_per_status(status, window, returncode, report_code, code, words):
    outcome = run_outcome("doctor", facts(status, window), returncode, "train.py", report_code)
    assert outcome.exit_code == code
    if words is None:
        assert outcome.message is None
    else:
        assert outcome.message.startswith("torchpace doctor: ") and words in outcome.message


def test_outcome_names_the_verb_and_the_error():
    outcome = run_outcome("tune", facts(Status.TIMEOUT, 0, error="no step in 30 s"), 0, "t.py", 0)
    assert outcome.message == "torchpace tune: timed out: no step in 30 s"


def test_a_script_that_raised_in_its_warm_up_is_not_said_to_have_raised_before_any_step():
    raised = facts(Status.SCRIPT_RAISED, 0)
    raised.steps = [StepRecord(i, 10.0, 0.0, False, phase=StepPhase.WARMUP) for i in range(2)]
    message = run_outcome("doctor", raised, 1, "train.py", 0).message
    assert "after 2 steps, none of them profiled yet" in message
    assert "before its first step" not in message


def test_start_run_checks_the_target_then_makes_the_run_folder(tmp_path, monkeypatch):
    from torchpace.capture.target import RunStart, TargetProblem, start_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")

    def args(target, *script_args, out=None):
        return target, False, list(script_args), out

    missing = start_run(*args("nope.py", out=tmp_path / "a"), who="torchpace tune")
    assert isinstance(missing, TargetProblem) and missing.exit_code == EXIT_USAGE
    assert not (tmp_path / "a").exists(), "nothing is created for a target that cannot run"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("the user's")
    taken = start_run(*args("train.py", out=tmp_path / "full"), who="torchpace tune")
    assert isinstance(taken, TargetProblem) and "torchpace tune never writes over" in taken.message
    start = start_run(*args("train.py", "--lr", "0.1"), who="the doctor")
    assert isinstance(start, RunStart) and start.out_dir.is_dir()
    assert (start.target, start.is_module, start.script_args) == (
        "train.py",
        False,
        ["--lr", "0.1"],
    )
