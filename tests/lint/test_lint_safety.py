"""A fix never damages a user's file: bytes, modes, links and unparsable files survive."""

from __future__ import annotations

import os
import stat

import libcst as cst
import pytest

from torchpace.cli import main
from torchpace.lint.engine import lint_bytes
from torchpace.lint.fixer import write_atomic
from torchpace.lint.rule import SAFE, Rule
from torchpace.lint.rules import RULES

AMP = "import torch\nscaler = torch.cuda.amp.GradScaler()  # keep me\nx = torch.zeros(3).cuda()\n"
AMP_FIXED = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")  # keep me\n'
    'x = torch.zeros(3, device="cuda")\n'
)


def _fix(data: bytes) -> bytes:
    result = lint_bytes(data, "f.py", RULES, fix="safe")
    assert result.error is None
    return result.new_source


def test_crlf_line_endings_survive():
    assert _fix(AMP.replace("\n", "\r\n").encode()) == AMP_FIXED.replace("\n", "\r\n").encode()


def test_bom_survives():
    bom = b"\xef\xbb\xbf"
    assert _fix(bom + AMP.encode()) == bom + AMP_FIXED.encode()


def test_declared_encoding_survives():
    cookie = "# -*- coding: latin-1 -*-\n"
    source = (cookie + "name = 'café'\n" + AMP).encode("latin-1")
    fixed = _fix(source)
    assert fixed == (cookie + "name = 'café'\n" + AMP_FIXED).encode("latin-1")


def test_cli_fixes_in_place_keeping_mode_and_leaving_no_temporary_file(tmp_path, capsys):
    path = tmp_path / "train.py"
    path.write_text(AMP)
    path.chmod(0o640)
    assert main(["lint", "--fix", str(path)]) == 0
    assert path.read_text() == AMP_FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["train.py"]
    assert "2 fixed" in capsys.readouterr().out
    # and a second run changes nothing
    assert main(["lint", "--fix", str(path)]) == 0
    assert path.read_text() == AMP_FIXED


def test_unparsable_file_is_left_byte_identical_with_a_clear_message(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    content = b"import torch\r\nx = torch.rand(3).cuda(\n  # never closed\n"
    broken.write_bytes(content)
    good = tmp_path / "good.py"
    good.write_text(AMP)
    assert main(["lint", "--fix", str(tmp_path)]) == 2
    assert broken.read_bytes() == content
    err = capsys.readouterr().err
    assert str(broken) in err and "cannot parse" in err and "unchanged" in err
    assert good.read_text() == AMP_FIXED  # the other files are still fixed


class _BreaksTheFile(Rule):
    """A deliberately broken fix: replaces a call with the keyword `def`."""

    code = "TP303"
    message = "test rule"
    fix_title = "break it"
    fix_safety = SAFE

    def check(self, index):
        for call in index.calls:
            yield self.finding(call.node, replace=call.node, replacement=cst.Name("def"))


def test_a_fix_that_would_produce_invalid_code_is_not_written(tmp_path):
    source = b"x = f()\n"
    result = lint_bytes(source, "f.py", [_BreaksTheFile], fix="safe")
    assert result.new_source is None and result.fixed == 0
    assert [v.code for v in result.violations] == ["TP303"]


def test_a_file_changed_meanwhile_is_not_overwritten(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("edited by the user\n")
    with pytest.raises(OSError, match="changed while"):
        write_atomic(path, b"fixed\n", expected=b"original\n")
    assert path.read_text() == "edited by the user\n"


def test_links_out_of_the_given_folder_are_not_followed(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.py"
    victim.write_text(AMP)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "linked_file.py").symlink_to(victim)
    (tree / "linked_dir").symlink_to(outside, target_is_directory=True)
    (tree / "own.py").write_text("x = 1\n")
    assert main(["lint", "--fix", str(tree)]) == 0
    assert victim.read_text() == AMP
    assert "victim" not in capsys.readouterr().out


def test_a_link_inside_the_tree_is_fixed_through_its_target_and_stays_a_link(tmp_path):
    target = tmp_path / "real.py"
    target.write_text(AMP)
    link = tmp_path / "alias.py"
    link.symlink_to(target)
    assert main(["lint", "--fix", str(link)]) == 0
    assert link.is_symlink() and target.read_text() == AMP_FIXED


def test_a_file_the_parser_cannot_reproduce_exactly_is_not_fixed():
    source = b"import torch\rx = torch.zeros(3).cuda()\r"  # libcst drops the final lone CR
    result = lint_bytes(source, "old_mac.py", RULES, fix="safe")
    assert result.new_source is None and "not fixed" in result.error
    assert [v.code for v in result.violations] == ["TP105"]


def test_an_internal_error_on_one_file_does_not_stop_the_others(tmp_path, monkeypatch, capsys):
    from torchpace.lint import runner

    def explode(data, path, rules, fix):
        if path.endswith("bad.py"):
            raise RuntimeError("boom")
        return lint_bytes(data, path, rules, fix)

    monkeypatch.setattr(runner, "lint_bytes", explode)
    (tmp_path / "bad.py").write_text(AMP)
    (tmp_path / "good.py").write_text(AMP)
    assert main(["lint", "--fix", "--jobs", "1", str(tmp_path)]) == 2
    assert "internal error" in capsys.readouterr().err
    assert (tmp_path / "bad.py").read_text() == AMP
    assert (tmp_path / "good.py").read_text() == AMP_FIXED


def test_a_file_the_parser_cannot_reproduce_needs_no_message_when_nothing_had_a_fix():
    source = b"import torch\rx = torch.zeros(3)\r"  # nothing to fix: linted, no complaint
    result = lint_bytes(source, "old_mac.py", RULES, fix="safe")
    assert result.error is None and result.new_source is None and not result.violations
    # an unsafe fix that --fix does not apply is no reason either
    source = b"import torch\rx = torch.randperm(3).cuda()\r"
    result = lint_bytes(source, "old_mac.py", RULES, fix="safe")
    assert result.error is None and [v.code for v in result.violations] == ["TP105"]


def test_else_of_loops_and_try_is_not_an_if_branch():
    """`for`/`while`/`try` have an `else:` too (torchvision's mnist.py, torch's dataloader.py):
    linting them must not fail."""
    source = (
        "import torch\n"
        "for x in xs:\n    pass\nelse:\n    y = 1\n"
        "while cond:\n    break\nelse:\n    y = 2\n"
        "try:\n    f()\nexcept OSError:\n    pass\nelse:\n    g()\n"
        "def step(scaler, loss, ps):\n"
        "    if amp:\n        scaler.scale(loss).backward()\n"
        "        for p in ps:\n            pass\n        else:\n            pass\n"
        "    else:\n        loss.backward()\n        torch.nn.utils.clip_grad_norm_(ps, 1.0)\n"
    )
    result = lint_bytes(source.encode(), "else.py", RULES)
    assert result.error is None and not result.violations


def test_a_read_only_file_is_not_rewritten_and_is_named(tmp_path, capsys):
    locked = tmp_path / "locked.py"
    locked.write_text(AMP)
    locked.chmod(0o444)
    inode = locked.stat().st_ino
    other = tmp_path / "other.py"
    other.write_text(AMP)
    assert main(["lint", "--fix", "--jobs", "1", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"{locked} is read-only" in captured.err and "chmod u+w" in captured.err
    assert locked.read_text() == AMP  # content, inode and mode as they were
    assert locked.stat().st_ino == inode and stat.S_IMODE(locked.stat().st_mode) == 0o444
    assert f"{locked}:2:10: TP306" in captured.out  # its findings are still reported
    assert other.read_text() == AMP_FIXED
    assert sorted(os.listdir(tmp_path)) == ["locked.py", "other.py"]


def test_hard_links_are_kept_and_see_the_fix(tmp_path):
    original = tmp_path / "train.py"
    original.write_text(AMP)
    original.chmod(0o750)
    alias = tmp_path / "alias.py"
    os.link(original, alias)
    assert main(["lint", "--fix", str(original)]) == 0
    assert original.read_text() == AMP_FIXED and alias.read_text() == AMP_FIXED
    assert original.stat().st_ino == alias.stat().st_ino and original.stat().st_nlink == 2
    assert stat.S_IMODE(original.stat().st_mode) == 0o750
    assert sorted(os.listdir(tmp_path)) == ["alias.py", "train.py"]  # no copy left behind


def test_a_failed_in_place_write_puts_the_original_back(tmp_path, monkeypatch):
    from torchpace.lint import fixer

    original = tmp_path / "train.py"
    original.write_text(AMP)
    os.link(original, tmp_path / "alias.py")
    real_overwrite = fixer._overwrite
    calls = []

    def fail_first(path, data):
        calls.append(data)
        if len(calls) == 1:
            with open(path, "r+b") as f:  # half written, then the disk is full
                f.write(data[:10])
            raise OSError(28, "No space left on device")
        real_overwrite(path, data)

    monkeypatch.setattr(fixer, "_overwrite", fail_first)
    with pytest.raises(fixer.NotWritten, match="the file is as it was"):
        write_atomic(original, AMP_FIXED.encode(), expected=AMP.encode())
    assert original.read_text() == AMP
    assert sorted(os.listdir(tmp_path)) == ["alias.py", "train.py"]
