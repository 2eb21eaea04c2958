"""Traces whose fields are not what torch.profiler writes: a TraceError naming the file, the
event and the field (exit 2 in `doctor --trace` and `compare`), never a traceback; and the
time index the analyses use, against the plain filters it replaces."""

import json
import random

import pytest
from trace_events import kernel, memory, runtime, span, step, write

from torchpace.cli import main
from torchpace.trace import TraceError, load_trace
from torchpace.trace.index import TimeIndex
from torchpace.trace.model import Step

BAD_FIELDS = [
    ("ts", "'abc'", {"ts": "abc"}),
    ("dur", "nan", {"dur": float("nan")}),
    ("dur", "-5", {"dur": -5}),
    ("ts", "inf", {"ts": float("inf")}),
    ("tid", "[1]", {"tid": [1]}),
    ("args", "7", {"args": 7}),
    ("args.Input Dims", "5", {"args": {"Input Dims": 5}}),
    ("args.correlation", "[1]", {"cat": "cuda_runtime", "args": {"correlation": [1]}}),
    ("args.device", "'x'", {"cat": "kernel", "args": {"device": "x", "correlation": 1}}),
    ("args.Total Allocated", "'lots'",
     {"ph": "i", "name": "[memory]", "args": {"Total Allocated": "lots"}}),
]  # fmt: skip


def bad_trace(tmp_path, override):
    event = span("aten::mm", 10.0, 5.0)
    event.update(override)
    return write(tmp_path / "bad.json", [step(1, 0.0, 100.0), event])


@pytest.mark.parametrize("field, shown, override", BAD_FIELDS)
def test_a_bad_field_is_named_with_its_event_and_file(tmp_path, field, shown, override):
    path = bad_trace(tmp_path, override)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    message = str(err.value)
    assert str(path) in message and "event 1" in message
    assert f"has {field} = {shown}" in message


@pytest.mark.parametrize("field, shown, override", BAD_FIELDS[:5])
def test_doctor_and_compare_exit_2_on_a_bad_field(tmp_path, capsys, field, shown, override):
    path = bad_trace(tmp_path, override)
    good = write(tmp_path / "good.json", [step(1, 0.0, 100.0), span("aten::mm", 10.0, 5.0)])
    assert main(["doctor", "--trace", str(path)]) == 2
    assert f"{path}: event 1" in capsys.readouterr().err
    assert main(["compare", str(good), str(path)]) == 2
    assert f"{path}: event 1" in capsys.readouterr().err


def test_a_bad_device_property_is_named(tmp_path):
    devices = [{"id": 0, "name": "GPU", "totalGlobalMem": "80GB"}]
    path = write(tmp_path / "t.json", [step(1, 0.0, 100.0), span("aten::mm", 10, 5)], devices)
    with pytest.raises(TraceError, match=r"deviceProperties\[0\] has totalGlobalMem"):
        load_trace(path)


@pytest.mark.parametrize("opening, closing", [("[", "]"), ('{"a":', "}")])
def test_json_nested_deeper_than_the_parser_is_refused(tmp_path, capsys, opening, closing):
    path = tmp_path / "deep.json"
    depth = 200_000
    path.write_text('{"traceEvents": [' + opening * depth + "1" + closing * depth + "]}")
    assert main(["doctor", "--trace", str(path)]) == 2
    assert f"trace file {path} nests its JSON" in capsys.readouterr().err
    assert main(["compare", str(path), str(path)]) == 2
    assert str(path) in capsys.readouterr().err


def test_a_doctor_report_nested_too_deep_is_refused_by_compare(tmp_path, capsys):
    path = tmp_path / "doctor_report.json"
    path.write_text('{"verb": "doctor", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert main(["compare", str(path), str(path)]) == 2
    assert f"{path} nests its JSON" in capsys.readouterr().err


def test_integral_floats_and_numeric_ids_are_accepted(tmp_path):
    events = [step(1, 0.0, 100.0), runtime("cudaLaunchKernel", 10, 2, 7.0),
              kernel("k", 20, 3, 7), memory(11, 1024.0)]  # fmt: skip
    model = load_trace(write(tmp_path / "t.json", events))
    assert model.gpu_ops[0].correlation == 7 and model.memory[0].total_allocated == 1024


class Ev:
    def __init__(self, ts, dur):
        self.ts, self.dur = ts, dur

    @property
    def end(self):
        return self.ts + self.dur


def test_the_time_index_finds_what_the_plain_filters_find():
    rng = random.Random(3)
    events = [Ev(rng.uniform(0, 1000), rng.choice([0, 1, 5, 50, 400])) for _ in range(500)]
    index = TimeIndex(events)
    for _ in range(200):
        lo = rng.uniform(-50, 1050)
        hi = lo + rng.choice([0, 1, 20, 300])
        step = Step("s", None, lo, hi - lo)
        starting = [e for e in events if step.contains(e.ts)]
        assert sorted(index.starting_in(lo, hi), key=id) == sorted(starting, key=id)
        overlapping = [e for e in events if e.end > lo and e.ts < hi]
        assert sorted(index.overlapping(lo, hi), key=id) == sorted(overlapping, key=id)
        before = [e.ts for e in events if e.ts < hi]
        last = index.last_before(hi)
        assert (last.ts if last else None) == (max(before) if before else None)


def test_gpu_work_goes_to_the_step_that_launched_it(tmp_path):
    events = [step(1, 0.0, 100.0), step(2, 100.0, 100.0),
              runtime("cudaLaunchKernel", 95, 2, 1), kernel("k1", 120, 3, 1),
              runtime("cudaLaunchKernel", 150, 2, 2), kernel("k2", 160, 3, 2),
              kernel("orphan", 500, 3, 99)]  # fmt: skip
    model = load_trace(write(tmp_path / "t.json", events))
    by_step = {i: [op.name for op in ops] for i, ops in model.gpu_ops_by_step().items()}
    assert by_step == {0: ["k1"], 1: ["k2"]}
    assert json.dumps(by_step)  # plain data
