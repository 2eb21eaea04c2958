"""The argparse Namespace stops at each verb's command module: below it the doctor and tune
read typed options (doctor/options.py, tune/options.py), and the capture's target check
takes values, not a parse."""

import ast
from pathlib import Path

from conftest import ROOT

from torchpace.cli import build_parser

SRC = ROOT / "src" / "torchpace"
# where argparse may be imported: the command line itself, each verb's command module, and
# add_target_arguments (the script and -m arguments every capturing verb registers), and the
# maintainers' page writer, a command of its own (`python -m torchpace.code_pages --check`)
PARSING = {"cli.py", "capture/target.py", "code_pages.py"}


def _imports_argparse(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(
        (isinstance(n, ast.Import) and any(a.name == "argparse" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and n.module == "argparse")
        for n in ast.walk(tree)
    )


def test_only_the_command_modules_parse():
    parsing = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if _imports_argparse(p)}
    below = {p for p in parsing if p not in PARSING and not p.endswith("/command.py")}
    assert below == set(), "argparse below a command module"


def test_the_doctor_reads_typed_options():
    from torchpace.doctor.command import options
    from torchpace.doctor.options import DoctorOptions

    args = build_parser().parse_args(
        ["doctor", "--steps", "7", "--stacks", "train.py", "--lr", "0.1"]
    )
    assert options(args) == DoctorOptions(
        target="train.py", script_args=("--lr", "0.1"), steps=7, with_stack=True
    )
    module = options(build_parser().parse_args(["doctor", "-m", "pkg.train", "--x"]))
    assert (module.target, module.is_module, module.script_args) == ("pkg.train", True, ("--x",))


def test_tune_reads_typed_options():
    from torchpace.tune.command import options
    from torchpace.tune.options import TuneOptions

    args = build_parser().parse_args(
        ["tune", "--knobs", "amp, compile", "--budget", "9", "train.py", "--epochs", "1"]
    )
    assert options(args) == TuneOptions(
        target="train.py", script_args=("--epochs", "1"), knobs=("amp", "compile"), budget=9
    )


def test_a_time_budget_alone_is_the_tunes_limit():
    """gpt.py under --time-budget 300 was stopped by a default of 60 trials nobody asked
    for; --budget given, or no time budget, keeps a trial count."""
    from torchpace.tune.command import DEFAULT_TRIALS, options

    def budget(*flags):
        return options(build_parser().parse_args(["tune", *flags, "train.py"])).budget

    assert budget() == DEFAULT_TRIALS
    assert budget("--time-budget", "300") > 1000
    assert budget("--time-budget", "300", "--budget", "12") == 12
    assert budget("--budget", "7") == 7
