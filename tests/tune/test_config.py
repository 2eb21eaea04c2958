"""torchpace.toml: written and read back, and every mistake named by file, line and key."""

import datetime
import os
import sys
import types

import pytest

import torchpace.knobs as registry
from torchpace.knobs import config as cfg
from torchpace.knobs.base import Knob
from torchpace.knobs.config import ConfigError, EnvironmentMismatch, TuneConfig
from torchpace.knobs.fingerprint import Fingerprint, compare, torch_minor

HERE = Fingerprint("CPU AMD EPYC 7B13", "2.14", 2, "2.14.1+cpu", "3.11.7", None)


class _TypedKnob(Knob):
    name = "typed-knob"
    title = "a knob declaring its value type (tests)"
    value_type = int


@pytest.fixture
def typed_knob(monkeypatch):
    """A knob that exists only in this test: registered in the registry and sys.modules."""
    module = types.ModuleType("torchpace.knobs.typed_knob")
    module.KNOB = _TypedKnob()
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry._MODULES, "typed-knob", "typed_knob")
    monkeypatch.setattr(registry, "NAMES", (*registry.NAMES, "typed-knob"))
    return module.KNOB


def _config(**kw) -> TuneConfig:
    values = {
        "knobs": {"num-workers": 2, "cudnn-benchmark": True},
        "fingerprint": HERE,
        "measured": {"baseline-ms-per-step": 203.6, "tuned-ms-per-step": 135.7, "speedup": 1.5},
        "script": "examples/fake_cifar_resnet.py",
    }
    values.update(kw)
    return TuneConfig(**values)


def test_written_config_reads_back_the_same(tmp_path):
    path = tmp_path / "torchpace.toml"
    cfg.write_config(path, _config(), comments=["1.50x faster: 203.6 -> 135.7 ms/step"])
    text = path.read_text()
    assert text.startswith(f"# written by torchpace tune on {datetime.date.today().isoformat()}")
    assert "# 1.50x faster: 203.6 -> 135.7 ms/step\n" in text
    assert "[knobs]\nnum-workers = 2\ncudnn-benchmark = true\n" in text
    back = cfg.load_config(path)
    assert back.knobs == {"num-workers": 2, "cudnn-benchmark": True}
    assert back.fingerprint == HERE
    assert back.measured == _config().measured
    assert back.script == "examples/fake_cifar_resnet.py"
    assert back.path == path
    assert not list(tmp_path.glob(".*.torchpace"))  # the atomic write left no temporary


def test_knobs_written_in_registry_order_and_strings_escaped(tmp_path):
    path = tmp_path / "t.toml"
    weird = 'a "quoted"\\path\twith\ncontrol\x01'
    config = _config(knobs={"cudnn-benchmark": False, "num-workers": 0}, script=weird)
    cfg.write_config(path, config)
    text = path.read_text()
    assert text.index("num-workers") < text.index("cudnn-benchmark")
    back = cfg.load_config(path)
    assert back.script == weird
    assert back.knobs == {"num-workers": 0, "cudnn-benchmark": False}


def test_writer_refuses_an_unknown_knob(tmp_path):
    with pytest.raises(ValueError, match="no tune knob named 'num_workers'"):
        cfg.write_config(tmp_path / "t.toml", _config(knobs={"num_workers": 2}))
    assert not (tmp_path / "t.toml").exists()


def test_a_file_without_environment_is_not_checked():
    config = cfg.parse_config("[knobs]\nnum-workers = 4\n", "t.toml")
    assert config.fingerprint is None
    other = Fingerprint("NVIDIA H100 80GB HBM3 (sm 9.0)", "2.3", 16)
    assert cfg.check_environment(config, current=other) == []


def _error(text: str, tmp_path) -> str:
    path = tmp_path / "torchpace.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        cfg.load_config(path)
    return str(e.value)


def test_missing_file_says_to_run_tune_first(tmp_path):
    with pytest.raises(ConfigError) as e:
        cfg.load_config(tmp_path / "torchpace.toml")
    assert str(tmp_path / "torchpace.toml") in str(e.value)
    assert "torchpace tune" in str(e.value)


def test_malformed_toml_names_file_and_line(tmp_path):
    message = _error("[torchpace]\nversion = 1\n[knobs]\nnum-workers = = 2\n", tmp_path)
    assert message.startswith(f"{tmp_path / 'torchpace.toml'}:4: not valid TOML")
    assert "torchpace tune" in message


def test_unknown_knob_names_file_line_key_and_the_valid_names(tmp_path):
    text = "[torchpace]\nversion = 1\n\n[knobs]\ncudnn-benchmark = true\nnum-worker = 2\n"
    message = _error(text, tmp_path)
    assert message.startswith(f"{tmp_path / 'torchpace.toml'}:6: unknown knob 'num-worker'")
    assert "did you mean 'num-workers'?" in message
    assert ", ".join(registry.NAMES) in message


def test_unknown_section_and_unknown_keys_are_named_with_their_line(tmp_path):
    assert ":3: unknown section [knob]" in _error("[knobs]\n\n[knob]\nx = 1\n", tmp_path)
    message = _error('[torchpace]\nversion = 1\nscritp = "a.py"\n', tmp_path)
    assert ":3: unknown key 'scritp' in [torchpace]" in message
    assert "did you mean 'script'?" in message
    message = _error("[environment]\ndevice = 'x'\n\"core\" = 2\n", tmp_path)
    assert ":3: unknown key 'core' in [environment]" in message
    assert "device, torch, cores" in message
    assert ":1: unknown key 'stray'" in _error("stray = 1\n[knobs]\n", tmp_path)


def test_wrong_types_are_named_with_file_line_and_key(tmp_path, typed_knob):
    path = tmp_path / "torchpace.toml"
    message = _error("[knobs]\nnum-workers = [2, 4]\n", tmp_path)
    assert message.startswith(f"{path}:2: num-workers in [knobs] must be an integer, not")
    message = _error('[knobs]\n  typed-knob = "4"  # a string\n', tmp_path)
    assert message == (f'{path}:2: typed-knob in [knobs] must be an integer, not the string "4"')
    message = _error("[knobs]\ntyped-knob = true\n", tmp_path)
    assert "typed-knob in [knobs] must be an integer, not the boolean true" in message
    message = _error('[environment]\ntorch = "2.14"\ncores = "2"\n', tmp_path)
    assert message.startswith(f"{path}:3: cores in [environment] must be an integer")
    message = _error("[torchpace]\nversion = 2\n", tmp_path)
    assert f"{path}:2: version 2 is not one this torchpace reads" in message
    assert _error("knobs = 3\n", tmp_path).startswith(f"{path}:1: knobs must be a [knobs] table")


def test_every_knob_declares_what_its_values_are_and_reads_them_back(tmp_path):
    values = {
        "num-workers": 4, "persistent-workers": True, "prefetch-factor": 4, "pin-memory": True,
        "device-transforms": "full", "cudnn-benchmark": True, "matmul-precision": "high",
        "amp": "fp16", "channels-last": True, "compile": "max-autotune-no-cudagraphs",
        "fused-optimizer": "foreach", "zero-grad-set-to-none": True,
        "anomaly-detection-off": True, "threads": 1, "batch-size": 128,
        "expandable-segments": True, "host-malloc": True, "ddp-bucket-cap-mb": 100,
        "ddp-gradient-as-bucket-view": True, "ddp-static-graph": True,
        "ddp-broadcast-buffers": False, "ddp-comm-hook": "bf16", "nproc-per-node": 2,
    }  # fmt: skip
    assert set(values) == set(registry.NAMES)  # a new knob gets a line here
    path = tmp_path / "torchpace.toml"
    cfg.write_config(path, _config(knobs=values))
    assert cfg.load_config(path).knobs == values


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            'num-workers = "four"',
            'num-workers in [knobs] must be an integer, not the string "four"',
        ),
        ("cudnn-benchmark = 1", "cudnn-benchmark in [knobs] must be a boolean (true/false)"),
        ('amp = "fp8"', 'amp = "fp8" is not a value it takes; use one of: "bf16", "fp16"'),
        ('device-transforms = "gpu"', 'device-transforms = "gpu" is not a value it takes; use'),
        ("num-workers = -1", "num-workers = -1 is below its least value, 0"),
        ("batch-size = 0", "batch-size = 0 is below its least value, 1"),
        # bounded above too: a runaway value would start processes until the machine gave out
        ("num-workers = 100000", "num-workers = 100000 is above its most, "),
        ("threads = 100000", "threads = 100000 is above its most, "),
        ("prefetch-factor = 100000", "prefetch-factor = 100000 is above its most, 64"),
        ("batch-size = 100000000", "batch-size = 100000000 is above its most, 1048576"),
        ("ddp-bucket-cap-mb = 100000", "ddp-bucket-cap-mb = 100000 is above its most, 4096"),
        ("nproc-per-node = 100000", "nproc-per-node = 100000 is above its most, "),
    ],
)
def test_a_hand_edited_value_the_knob_cannot_take_is_named(tmp_path, line, said):
    message = _error(f"[knobs]\n{line}\n", tmp_path)
    assert message.startswith(f"{tmp_path / 'torchpace.toml'}:2: {said}"), message


def test_a_declared_value_type_is_accepted(tmp_path, typed_knob):
    config = cfg.parse_config("[knobs]\ntyped-knob = 4\n", tmp_path / "t.toml")
    assert config.knobs == {"typed-knob": 4}


def test_undecodable_file_is_a_config_error(tmp_path):
    path = tmp_path / "torchpace.toml"
    path.write_bytes(b"[knobs]\nnum-workers = 2 # \xff\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        cfg.load_config(path)


def test_fingerprint_differences_are_named_and_informative_fields_ignored():
    h100 = Fingerprint("NVIDIA H100 80GB HBM3 (sm 9.0)", "2.14", 16, "2.14.0+cu128", "3.10", "12.8")
    same_but_patch = Fingerprint(
        "NVIDIA H100 80GB HBM3 (sm 9.0)", "2.14", 16, "2.14.1+cu130", "3.12", "13.0"
    )
    assert compare(h100, same_but_patch) == []
    diffs = compare(h100, HERE)
    assert diffs == [
        "device: tuned on NVIDIA H100 80GB HBM3 (sm 9.0), this is CPU AMD EPYC 7B13",
        "cores: tuned with 16 usable CPU cores, this process may use 2",
    ]
    assert compare(Fingerprint(None, "2.13", None), HERE) == [
        "torch: tuned with torch 2.13, this is torch 2.14"
    ]
    assert torch_minor("2.14.0a0+git1234") == "2.14"


def test_check_environment_refuses_unless_forced():
    config = _config(fingerprint=Fingerprint("CPU Other", "2.14", 2), path="x/torchpace.toml")
    with pytest.raises(EnvironmentMismatch) as e:
        cfg.check_environment(config, current=HERE, force_hint="--force")
    assert e.value.differences == ["device: tuned on CPU Other, this is CPU AMD EPYC 7B13"]
    assert "x/torchpace.toml was measured in another environment" in str(e.value)
    assert "--force" in str(e.value)
    assert cfg.check_environment(config, force=True, current=HERE) == e.value.differences
    assert cfg.check_environment(_config(), current=HERE) == []


def test_current_fingerprint_reads_this_process():
    from torchpace.knobs.fingerprint import current

    here = current()
    assert here.torch == torch_minor(here.torch_version)
    assert here.cores == len(os.sched_getaffinity(0))
    assert here.device


def test_num_workers_per_loader_location_reads_writes_and_is_checked(tmp_path):
    """Each DataLoader its own value, keyed by the line that builds it; a plain number still
    means every loader (the files written before stay valid)."""
    text = '[knobs]\nnum-workers = { "train.py:42" = 0, "data/eval.py:7" = 2 }\n'
    config = cfg.parse_config(text, "t.toml")
    assert config.knobs == {"num-workers": {"train.py:42": 0, "data/eval.py:7": 2}}
    path = tmp_path / "torchpace.toml"
    cfg.write_config(path, TuneConfig(dict(config.knobs), None))
    assert 'num-workers = { "train.py:42" = 0, "data/eval.py:7" = 2 }' in path.read_text()
    assert cfg.load_config(path).knobs == config.knobs
    assert cfg.parse_config("[knobs]\nnum-workers = 4\n", "t.toml").knobs == {"num-workers": 4}
    with pytest.raises(ConfigError, match=r"'train\.py' is not a location"):
        cfg.parse_config('[knobs]\nnum-workers = { "train.py" = 0 }\n', "t.toml")
    with pytest.raises(ConfigError, match="below its least value"):
        cfg.parse_config('[knobs]\nnum-workers = { "train.py:4" = -1 }\n', "t.toml")
    with pytest.raises(ConfigError, match="must be an integer"):
        cfg.parse_config('[knobs]\nnum-workers = { "train.py:4" = "two" }\n', "t.toml")
    with pytest.raises(ConfigError, match="must be a boolean"):  # not a per-location knob
        cfg.parse_config('[knobs]\ncudnn-benchmark = { "train.py:4" = true }\n', "t.toml")


def test_a_huge_toml_is_refused_before_it_is_parsed(tmp_path):
    """Issue 37: a 50 MB toml took 37 s and 1 GB to be parsed; it is refused at once."""
    import time

    path = tmp_path / "torchpace.toml"
    with path.open("w") as f:
        f.write("[knobs]\n")
        for i in range(2_000_000):  # 50 MB of keys
            f.write(f"k{i:020d} = 1\n")
    start = time.monotonic()
    with pytest.raises(ConfigError, match=r"over 1 MiB, far more than a configuration holds"):
        cfg.load_config(path)
    assert time.monotonic() - start < 1.0
