"""Terminal escape injection (issue 37, item 12): what came from the user's program (file
names, argv, class names, its errors) is printed with its control characters spelled out,
never obeyed, and rich markup in it is not interpreted."""

from __future__ import annotations

import dataclasses
import io

from conftest import ROOT
from rich.console import Console

from torchpace.facts.flops import ModuleWork
from torchpace.printable import printable, printable_fields

FIXTURES = ROOT / "tests" / "doctor" / "fixtures"
TITLE = "\x1b]0;pwned\x07"  # sets the window's title
CLEAR = "\x1b[2J"  # clears the screen
HOSTILE = f"evil{TITLE}{CLEAR}"


def _plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()  # no colours: any ESC in the output came from the user's text
    return Console(file=out, width=300, color_system=None), out


def test_control_characters_are_spelled_and_lines_kept_where_asked():
    assert printable(HOSTILE) == "evil\\x1b]0;pwned\\x07\\x1b[2J"
    assert printable("a\x9bb\x7f") == "a\\x9bb\\x7f"  # C1's CSI and DEL
    assert printable("a\nb\tc") == "a\\x0ab\\x09c"
    assert printable("a\nb\tc\x1b", lines=True) == "a\nb\tc\\x1b"
    assert printable("plain text, é ü 日本") == "plain text, é ü 日本"


def test_the_walk_changes_plain_strings_only():
    @dataclasses.dataclass(frozen=True)
    class Inner:
        names: tuple
        by: dict

    walked = printable_fields([Inner((HOSTILE,), {HOSTILE: [CLEAR]}), 3, None])
    assert walked[0].names == (printable(HOSTILE, lines=True),)
    assert walked[0].by == {printable(HOSTILE): ["\\x1b[2J"]}
    assert walked[1:] == [3, None]


def test_the_doctors_report_shows_hostile_names_without_obeying_them():
    from torchpace.doctor.analyze import diagnose
    from torchpace.doctor.result import build_report
    from torchpace.report import doctor_terminal
    from torchpace.report.model import FilesReport
    from torchpace.trace import load_trace

    report = build_report(
        diagnose(load_trace(FIXTURES / "h100_fixed.json.gz")),
        files=FilesReport.from_dict({"changed": [f"/u/{HOSTILE}.txt"], "created": []}),
    )
    sol = report.speed_of_light
    if sol is not None:  # "by module" names the model's classes
        sol = dataclasses.replace(sol, modules=(ModuleWork(f"Net{HOSTILE}.fc", 10, 20),))
    report = dataclasses.replace(
        report,
        command=("python", f"{HOSTILE}.py", f"--name=[bold]{CLEAR}", TITLE),
        trace=f"/runs/{HOSTILE}/trace.json.gz",
        speed_of_light=sol,
    )
    console, out = _plain_console()
    doctor_terminal.render(report, console)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J.py" in text
    assert "--name=[bold]\\x1b[2J" in text  # the markup is shown, not applied


def test_the_tune_report_and_its_lines_escape_the_scripts_text(capsys):
    from torchpace.capture.file_restore import FilesTouched
    from torchpace.tune import report
    from torchpace.tune.progress import say
    from torchpace.tune.search import KnobOutcome, TuneResult

    result = TuneResult(
        knobs=[KnobOutcome("compile", "could-not-apply", f"raised {HOSTILE} [red]x[/red]")],
        files=FilesTouched(changed=[f"/u/{HOSTILE}.txt"]),
    )
    console, out = _plain_console()
    report.render(result, console)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert "raised evil\\x1b]0;pwned\\x07\\x1b[2J [red]x[/red]" in text
    say(f"the script wrote {HOSTILE}.txt\nsecond line")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "evil\\x1b]0;pwned\\x07\\x1b[2J.txt\nsecond line" in err
