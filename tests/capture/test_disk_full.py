"""A full disk under torchpace's own writes (issue 37): said as "no space left on device
writing X", never blamed on the script, and nothing half-written left behind."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest

from torchpace import atomic
from torchpace.atomic import OwnFileError, write_text_atomic
from torchpace.capture import runner
from torchpace.exit_codes import EXIT_OWN_WRITE


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_an_atomic_write_on_a_full_disk_names_the_file_and_leaves_the_old_one(
    tmp_path, monkeypatch
):
    report = tmp_path / "report.json"
    report.write_text("earlier")
    monkeypatch.setattr(atomic.os, "fsync", _full)
    with pytest.raises(OwnFileError) as failed:
        write_text_atomic(report, "later")
    assert str(failed.value) == f"no space left on device writing {report}"
    assert failed.value.errno == errno.ENOSPC
    assert report.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary


def test_a_trace_export_on_a_full_disk_leaves_no_half_trace(tmp_path, monkeypatch):
    from torchpace.capture import window

    class Profiler:
        def export_chrome_trace(self, path):
            Path(path).write_text('{"traceEvents": []}')

    exporting = window.ProfilerWindow.__new__(window.ProfilerWindow)
    exporting.out_dir, exporting.profiler, exporting.max_trace_bytes = tmp_path, Profiler(), 2**30
    monkeypatch.setattr(window.shutil, "copyfileobj", _full)
    with pytest.raises(OwnFileError) as failed:
        exporting._export()
    assert "no space left on device writing" in str(failed.value)
    assert list(tmp_path.iterdir()) == []  # neither trace.json nor a part of trace.json.gz


def test_a_run_that_died_on_a_full_disk_is_not_blamed_on_the_script(tmp_path, monkeypatch):
    """Seen: with 28 KB free "train.py killed by SIGSEGV"; with 100 KB free "ended with exit
    code 1 ... remove the os._exit()"."""
    monkeypatch.setattr(runner, "_free_bytes", lambda folder: 28 * 1024)
    for code in (-signal.SIGSEGV, 1, EXIT_OWN_WRITE):
        why = runner._why_nothing(code, 3, tmp_path)
        assert why.startswith(f"no space left on device writing torchpace's files in {tmp_path}")
        assert "28 KB free" in why and "not at fault" in why and "os._exit" not in why
    monkeypatch.setattr(runner, "_free_bytes", lambda folder: 50 * 2**30)
    assert "os._exit()" in runner._why_nothing(1, 3, tmp_path)  # room on the disk: as before
    assert "SIGSEGV" in runner._why_nothing(-signal.SIGSEGV, 3, tmp_path)
    assert runner._free_bytes(tmp_path) is None or runner._free_bytes(tmp_path) >= 0
    assert os.path.isdir(tmp_path)
