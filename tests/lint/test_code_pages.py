"""docs/codes/<CODE>.md are written from the source (torchpace/code_pages.py): each lint
rule's and doctor check's docstring is its page, as ruff renders `ruff rule CODE` from the
rule's source. A page edited apart from its rule, or a docstring changed without the page
written again, fails here; and each lint rule's own Example is flagged by it and its Use
instead is not."""

import re
import shutil

import pytest
from conftest import ROOT

from torchpace import catalog, code_pages
from torchpace.lint.engine import lint_bytes
from torchpace.lint.rules import RULES

RULE_SECTIONS = ("What it does", "Why it matters", "Example", "Use instead", "Fix safety")
# The names the pages' examples use, as a script would import them.
IMPORTS = (
    "import torch\n"
    "import torch.nn as nn\n"
    "from torch.utils.data import DataLoader\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
)


def section(doc: str, title: str) -> str:
    found = re.search(
        rf"(?ms)^## {re.escape(title)}\n(.*?)(?=^## |\Z)", code_pages.sections_of(doc)
    )
    assert found, f"no '## {title}' section"
    return found.group(1)


def python_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))


def test_every_page_is_what_its_source_writes():
    stale = code_pages.stale()
    assert not stale, (
        "pages that differ from their rule's or check's docstring (edit the docstring, then "
        "run `python -m torchpace.code_pages`): " + ", ".join(p.name for p in stale)
    )


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_a_rule_carries_its_page_and_its_examples_hold(rule):
    for title in RULE_SECTIONS:
        section(rule.__doc__, title)
    example = IMPORTS + python_blocks(section(rule.__doc__, "Example"))
    instead = IMPORTS + python_blocks(section(rule.__doc__, "Use instead"))
    assert rule.code in {v.code for v in lint_bytes(example.encode(), "x.py", [rule]).violations}
    assert not lint_bytes(instead.encode(), "x.py", [rule]).violations


def test_every_doctor_check_carries_its_part_of_the_page():
    rules = code_pages.rules_by_code()
    for code, check in code_pages.checks_by_code().items():
        # beside a lint rule, the check says what the doctor sees; alone, the whole page
        first = "In a profile (torchpace doctor)" if code in rules else None
        titles = re.findall(r"(?m)^## (.+)$", code_pages.sections_of(check.__doc__))
        assert titles, f"{check.__name__} ({code}) has no docs sections in its docstring"
        if first:
            assert titles == [first], (code, titles)
        else:
            assert titles[0] in ("What it does", "What it sees"), (code, titles)


def test_the_heading_comes_from_the_catalog():
    page = (ROOT / "docs" / "codes" / "TP311.md").read_text()
    entry = catalog.CODES["TP311"]
    assert page.startswith(f"# TP311: {entry.title}\n\nDoctor check: `{entry.name}`")
    assert "Tune knob: `amp`." in page.split("\n")[2]


def test_check_names_a_stale_page_and_writing_mends_it(tmp_path, capsys):
    pages = tmp_path / "codes"
    shutil.copytree(ROOT / "docs" / "codes", pages)
    edited = pages / "TP101.md"
    edited.write_text(edited.read_text().replace("Flags a", "Finds a"))
    (pages / "TP302.md").unlink()
    assert code_pages.main(["--check", "--dir", str(pages)]) == 1
    err = capsys.readouterr().err
    assert "TP101.md" in err and "TP302.md" in err and "TP103.md" not in err
    assert "Finds a" in edited.read_text()  # --check writes nothing
    assert code_pages.main(["--dir", str(pages)]) == 0
    assert code_pages.main(["--check", "--dir", str(pages)]) == 0
    assert edited.read_text() == (ROOT / "docs" / "codes" / "TP101.md").read_text()


def test_a_missing_folder_is_named(tmp_path, capsys):
    assert code_pages.main(["--check", "--dir", str(tmp_path / "nope")]) == 2
    assert "nope is not a folder" in capsys.readouterr().err


def test_a_check_without_docs_leaves_its_page_and_is_named(tmp_path, capsys, monkeypatch):
    """Writing a page from a check whose docstring has no sections yet would drop the part
    of the page only the page holds: it is named and its page left as it is."""
    pages = tmp_path / "codes"
    shutil.copytree(ROOT / "docs" / "codes", pages)
    check = code_pages.checks_by_code()["TP101"]
    monkeypatch.setattr(check, "__doc__", "TP101: the loop waits for its batches.")
    before = (pages / "TP101.md").read_text()
    assert code_pages.main(["--dir", str(pages)]) == 1
    err = capsys.readouterr().err
    assert f"TP101: {check.__name__} has no '## ' sections" in err
    assert (pages / "TP101.md").read_text() == before
