import subprocess
import sys

from torchpace import __version__
from torchpace.cli import VERB_MODULES, build_parser


def test_version():
    out = subprocess.run(
        [sys.executable, "-m", "torchpace", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"torchpace {__version__}"


def test_help_lists_exactly_the_registered_verbs():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")
    verbs = [m.split(".")[-2] if m.endswith(".command") else m.split(".")[-1] for m in VERB_MODULES]
    assert sorted(sub.choices) == sorted(verbs)
    help_text = parser.format_help()
    for verb in sub.choices:
        assert verb in help_text
    for absent in ("tune", "launch", "run "):
        if absent.strip() not in sub.choices:
            assert f"    {absent.strip()} " not in help_text


def test_no_verb_prints_help_and_exits_2(capsys):
    from torchpace.cli import main

    assert main([]) == 2
    assert "usage" in capsys.readouterr().out
