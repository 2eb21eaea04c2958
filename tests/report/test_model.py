"""The typed doctor report (report/model.py) against its JSON schema: every field of each
dataclass is a property of the schema and every property a field, the JSON it writes is
valid, and a saved report reads back into the same report (an older one too)."""

import dataclasses
import json

import pytest
from conftest import ROOT
from json_schemas import validate_output

from torchpace.facts.flops import ModuleWork
from torchpace.facts.memory import MemorySplit, OutOfMemory, SiteBytes
from torchpace.facts.run import LoaderFacts, ProbeResult, ProcessState
from torchpace.report import comms_model, memory_model, model, window_model

SCHEMA = json.loads((ROOT / "docs" / "schemas" / "doctor_report.schema.json").read_text())
FIXTURES = ROOT / "tests" / "doctor" / "fixtures"


def _at(path: str) -> dict:
    """The schema's object at a path of property names ("memory.batch_headroom"), through
    arrays' items, oneOf's object and $refs."""
    node = SCHEMA
    for name in path.split("."):
        node = _resolve(node)["properties"][name]
    return _resolve(node)


def _resolve(node: dict) -> dict:
    while True:
        if "$ref" in node:
            node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
        elif "oneOf" in node:
            node = next(n for n in node["oneOf"] if n.get("type") != "null")
        elif node.get("type") == "array" or "items" in node:
            node = node["items"]
        else:
            return node


def _names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


# dataclass -> where the schema describes the JSON it writes
WRITTEN_AT = {
    model.DoctorReport: "",
    model.Stat: "step_ms",
    model.Env: "env",
    model.Throughput: "throughput",
    model.Device: "device",
    memory_model.Growth: "memory.growth",
    memory_model.PeakSplitReport: "memory.split_at_peak",
    memory_model.BatchHeadroom: "memory.batch_headroom",
    memory_model.Timeline: "memory.timeline",
    memory_model.TimelineStep: "memory.timeline.steps",
    memory_model.WayOut: "memory.out_of_memory.ways_out",
    SiteBytes: "memory.top_sites",
    MemorySplit: "memory.out_of_memory.split",
    model.ReportedFinding: "findings",
    model.RecordedStep: "steps_recorded",
    model.StepAllocator: "per_step.memory",
    LoaderFacts: "loaders",
    ProcessState: "process",
    ProbeResult: "probes",
    window_model.RowCoverage: "coverage",
    window_model.WindowCheckReport: "window_check",
    comms_model.CommunicationReport: "communication",
    comms_model.CollectiveReport: "communication.collectives",
    comms_model.HostBlockReport: "communication.host_blocked",
    model.CrossRank: "cross_rank",
    model.RankFigures: "cross_rank.ranks",
    model.ProfilerLog: "profiler_log",
    model.SpeedOfLightReport: "speed_of_light",
    model.GapRow: "speed_of_light.gap",
    model.OpRoofline: "speed_of_light.ops",
    ModuleWork: "speed_of_light.modules",
    model.FilesReport: "files",
}


@pytest.mark.parametrize("cls", list(WRITTEN_AT), ids=lambda c: c.__name__)
def test_every_field_is_in_the_schema_and_back(cls):
    path = WRITTEN_AT[cls]
    node = _resolve(SCHEMA) if not path else _at(path)
    if cls is model.StepAllocator:
        node = _resolve(node["additionalProperties"])
    assert set(node["properties"]) == _names(cls), path or "the report"


def test_the_flattened_parts_are_in_the_schema_and_back():
    # the memory's peaks are written as "<device>_peak_bytes"; the out-of-memory state is
    # the run facts' OutOfMemory with the shortfall and the ways out beside it
    memory = _at("memory")
    assert set(memory["properties"]) == _names(memory_model.MemoryReport) - {"peaks"}
    assert list(memory["patternProperties"]) == [f"{memory_model.PEAK_SUFFIX}$"]
    oom = _at("memory.out_of_memory")
    failure = {f.name for f in dataclasses.fields(OutOfMemory)}
    assert set(oom["properties"]) == failure | {"shortfall_bytes", "ways_out"}
    # a profiled step: its wall time, its measured rows (any number), its allocator totals
    step = _at("per_step")
    assert set(step["properties"]) | {"parts"} == _names(model.ProfiledStep)
    assert step["additionalProperties"] == {"type": "number"}
    # the rows are the enums' values, in order
    for key in ("breakdown_ms", "breakdown_pct"):
        assert SCHEMA["properties"][key]["propertyNames"]["enum"] == [r.value for r in model.Row]
    parts = SCHEMA["properties"]["gpu_split_pct"]["propertyNames"]["enum"]
    assert parts == [p.value for p in model.GpuPart]


def test_each_row_is_named_once_and_coloured_by_each_renderer():
    from torchpace.doctor.result import BREAKDOWN
    from torchpace.report import doctor_terminal, html

    assert list(BREAKDOWN) == list(model.Row) == list(model.ROW_LABELS)
    assert list(model.GpuPart) == list(model.GPU_PART_LABELS)
    assert set(doctor_terminal.ROW_COLOURS) == set(model.Row) == set(html.PHASE_COLOURS)
    assert set(html.GPU_SPLIT_COLOURS) == set(model.GpuPart)


@pytest.mark.parametrize("trace", ["h100_fixed.json.gz", "h100_planted.json.gz"])
def test_a_report_reads_back_as_written(trace):
    from torchpace.doctor.analyze import diagnose
    from torchpace.doctor.result import build_report
    from torchpace.trace import load_trace

    report = build_report(diagnose(load_trace(FIXTURES / trace)))
    written = json.loads(json.dumps(report.to_dict(), default=str))
    validate_output(written, "doctor_report")
    again = model.DoctorReport.from_dict(written)
    assert again == report
    assert again.to_dict() == written


def test_a_report_of_an_earlier_version_reads():
    """compare reads saved reports: keys an earlier torchpace did not write read as None."""
    old = {
        "schema_version": 1, "verb": "doctor", "status": "complete",
        "step_ms": {"median": 10.0, "min": 9.0, "max": 12.0},
        "breakdown_ms": {"data_wait_ms": {"median": 4.0, "min": 3.0, "max": 5.0},
                         "a_row_from_elsewhere_ms": {"median": 1.0, "min": 1.0, "max": 1.0}},
        "memory": {"growth": [{"source": "trace cpu", "bytes_per_step": 0.0}],
                   "cpu_peak_bytes": 2**20},
        "loaders": [{"location": "t.py:3", "num_workers": 0, "pin_memory": False,
                     "batch_size": 8, "batches_seen": 9}],
        "findings": [{"code": "TP101", "severity": "high", "title": "t", "detail": "d",
                      "evidence": {}, "fix": "f", "saving_ms": 3.0, "location": None}],
        "per_step": [{"wall_ms": 10.0, "data_wait_ms": 4.0, "memory": {}}],
    }  # fmt: skip
    report = model.DoctorReport.from_dict(old)
    assert report.breakdown_ms == {model.Row.DATA_WAIT: model.Stat(4.0, 3.0, 5.0)}
    assert report.memory.peaks == {"cpu": 2**20} and report.memory.batch_headroom is None
    assert report.largest_loader().batch_size == 8
    assert report.findings[0].saving_pct is None and report.findings[0].notes == ()
    assert report.per_step[0].parts == {"data_wait_ms": 4.0}
    assert report.throughput is None and report.steps_recorded == ()


def test_the_speed_of_light_and_the_files_are_typed_and_written_as_before():
    """The sections that were plain dicts are typed; their JSON keys are in the order the
    dicts had (the fields' order, as the schema lists them) and the files' are capture's
    FilesTouched.to_dict(), key for key."""
    from torchpace.capture.file_restore import FilesTouched
    from torchpace.doctor.analyze import diagnose
    from torchpace.doctor.result import build_report
    from torchpace.trace import load_trace

    d = diagnose(load_trace(FIXTURES / "h100_fixed.json.gz"))
    op = model.OpRoofline("aten::mm", 2.0, 1.5, 4e9, 3e6, 2.6e12, 2e9, 1333.3, "compute", 0.2, True)
    d.speed_of_light = model.SpeedOfLightReport(
        "trace", "cuda:0", "NVIDIA H100", 1e10, None, None, 3e6, {"tf32": 1e10}, 32, 10.0,
        "profiled", 10.0, 1e12, 4e14, 4.9e14, 2e12, 3.3e12, False, "datasheet", 0.025,
        0.0025, 0.002, gap=(model.GapRow("data loading", 9.0, "the loader"),
                            model.GapRow("other", 0.975)),
        ops=(op,), modules=(ModuleWork("Net.fc", 10, 20),), uncounted_ops=("aten::foo",),
        uncounted_ms=0.1, uncounted_share=0.01, notes=("a note",),
    )  # fmt: skip
    touched = FilesTouched(changed=["/u/a.txt"], created=["/u/new"], note="n")
    report = build_report(d, files=model.FilesReport.from_dict(touched.to_dict()))
    assert report.speed_of_light is d.speed_of_light
    assert report.files.changed == ("/u/a.txt",) and report.files.restored is False
    written = report.to_dict()
    sol = written["speed_of_light"]
    assert list(sol) == _at("speed_of_light")["required"]
    assert list(sol["gap"][1]) == ["cause", "ms", "detail"] and sol["gap"][1]["detail"] == ""
    assert list(sol["ops"][0]) == _at("speed_of_light.ops")["required"]
    assert sol["modules"] == [{"name": "Net.fc", "flops_forward": 10, "flops_backward": 20}]
    assert sol["notes"] == ["a note"] and sol["flops_by_dtype"] == {"tf32": 1e10}
    assert json.dumps(written["files"]) == json.dumps(touched.to_dict())
    saved = json.loads(json.dumps(written, default=str))
    validate_output(saved, "doctor_report")
    again = model.DoctorReport.from_dict(saved)
    assert again == report and again.to_dict() == saved
