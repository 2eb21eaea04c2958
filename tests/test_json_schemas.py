"""Every JSON output has a schema under docs/schemas/ that is itself valid, carries the
schema_version its producer writes, and accepts real outputs (the doctor's here; tune's in
tests/tune/test_tune_e2e.py, compare's in tests/compare/)."""

import json

import pytest
from conftest import ROOT
from json_schemas import SCHEMAS, validate_output

from torchpace.cli import main
from torchpace.doctor.result import SCHEMA_VERSION as DOCTOR_VERSION
from torchpace.env.command import SCHEMA_VERSION as ENV_VERSION
from torchpace.lint.output import SCHEMA_VERSION as LINT_VERSION
from torchpace.tune.report import SCHEMA_VERSION as TUNE_VERSION

FIXTURES = ROOT / "tests" / "doctor" / "fixtures"
VERSIONS = {
    "doctor_report": DOCTOR_VERSION,
    "tune_report": TUNE_VERSION,
    "lint_report": LINT_VERSION,
    "env": ENV_VERSION,
}


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_schema_is_valid_and_names_the_version_written(name):
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema_version"] == {"const": VERSIONS[name]}


@pytest.mark.parametrize("trace", ["h100_planted.json.gz", "h100_fixed.json.gz"])
def test_doctor_report_on_real_h100_traces_is_valid(tmp_path, capsys, trace):
    out = tmp_path / "report.json"
    assert main(["doctor", "--trace", str(FIXTURES / trace), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["schema_version"] == DOCTOR_VERSION
    # the fixed loop's only finding is the host work that leaves its GPU idle 69% of the step
    codes = [f["code"] for f in report["findings"]]
    assert codes == (["TP102", "TP106", "TP307", "TP201"] if "planted" in trace else ["TP310"])
    validate_output(report, "doctor_report")


def test_a_broken_report_is_refused(tmp_path, capsys):
    """The schema can fail: a finding without its fix, a step time as text."""
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    out = tmp_path / "report.json"
    main(["doctor", "--trace", str(FIXTURES / "h100_planted.json.gz"), "--json", str(out)])
    report = json.loads(out.read_text())
    del report["findings"][0]["fix"]
    with pytest.raises(jsonschema.ValidationError, match="'fix' is a required property"):
        validate_output(report, "doctor_report")
    report = json.loads(out.read_text())
    report["step_ms"]["median"] = "fast"
    with pytest.raises(jsonschema.ValidationError):
        validate_output(report, "doctor_report")


def test_the_schemas_enums_follow_the_code():
    """A phase or status added in the code and not in the schema fails here, not in a user's
    validator."""
    from torchpace.facts.run import Status, StepPhase

    schema = json.loads((SCHEMAS / "doctor_report.schema.json").read_text())
    step = schema["properties"]["steps_recorded"]["items"]["properties"]
    assert set(step["phase"]["enum"]) == {str(p) for p in StepPhase}
    assert {str(s) for s in Status} <= set(schema["properties"]["status"]["enum"])
    from torchpace.doctor.result import BREAKDOWN, GPU_SPLIT

    for key in ("breakdown_ms", "breakdown_pct"):
        assert schema["properties"][key]["propertyNames"]["enum"] == list(BREAKDOWN)
    assert schema["properties"]["gpu_split_pct"]["propertyNames"]["enum"] == list(GPU_SPLIT)


def test_doctor_report_of_a_job_is_valid(shared_traces, tmp_path, capsys):
    """--trace DIR on the shared two-rank NCCL pair: the breakdown's rows for collectives and
    waiting for other ranks, the device's split, the cross-rank view."""
    import shutil

    for name in ("sampled_rank0.json.gz", "sampled_rank1.json.gz"):
        shutil.copy(shared_traces / name, tmp_path / name)
    out = tmp_path / "report.json"
    assert main(["doctor", "--trace", str(tmp_path), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["gpu_split_pct"]["gpu_rank_wait_ms"] > 0 and report["cross_rank"]
    validate_output(report, "doctor_report")


def test_env_json_is_valid(capsys):
    assert main(["env", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["schema_version"] == ENV_VERSION and document["verb"] == "env"
    validate_output(document, "env")


def test_lint_json_with_an_unparsable_file_is_valid(tmp_path, capsys):
    (tmp_path / "good.py").write_text("from torch.utils.data import DataLoader\nDataLoader(d)\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    main(["lint", "--format", "json", str(tmp_path)])
    document = json.loads(capsys.readouterr().out)
    assert document["files"] == 2
    assert [f["code"] for f in document["findings"]] == ["TP101"]
    assert len(document["errors"]) == 1 and "broken.py" in document["errors"][0]
    validate_output(document, "lint_report")
