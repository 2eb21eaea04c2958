"""Files that are not traces: each gets a TraceError that names the file and what to do."""

import gzip

import pytest
from trace_events import span, write

from torchpace.trace import TraceError, load_trace


def check_error(path, *words):
    with pytest.raises(TraceError) as err:
        load_trace(path)
    message = str(err.value)
    assert str(path) in message
    for w in words:
        assert w in message
    return message


def test_missing_file(tmp_path):
    check_error(tmp_path / "nope.json", "does not exist")


def test_folder(tmp_path):
    check_error(tmp_path, "folder")


def test_empty_file(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("  \n")
    check_error(p, "empty")


def test_not_json(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("this is a log file, not a trace\n")
    check_error(p, "not JSON", "export_chrome_trace")


def test_gz_suffix_but_not_gzip(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_text('{"traceEvents": []}')
    check_error(p, "not gzip")


def test_truncated_gzip(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": []}' * 100)[:30])
    check_error(p, "truncated")


def test_json_without_trace_events(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"name": "not a trace"}')
    check_error(p, "traceEvents")


def test_json_list_is_not_a_trace(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("[1, 2, 3]")
    check_error(p, "traceEvents")


def test_trace_events_not_a_list(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": {"a": 1}}')
    check_error(p, "not a list")


def test_trace_without_profiled_events(tmp_path):
    p = write(tmp_path / "t.json", [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0}])
    check_error(p, "no profiled events")


def test_gzip_and_plain_json_load_the_same(tmp_path):
    events = [span("aten::mm", 10.0, 5.0), span("aten::add", 20.0, 1.0)]
    a = load_trace(write(tmp_path / "t.json", events))
    b = load_trace(write(tmp_path / "t.json.gz", events))
    assert a.cpu_ops == b.cpu_ops
    assert len(a.cpu_ops) == 2
