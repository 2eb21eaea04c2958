"""benchmarks/ladder.py and ladder_hand.py: the hand rungs run and print parseable results;
the parent's reading of tune's report, the grid and the summary, on made-up figures."""

import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import ROOT


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ladder = _load("ladder")
hand = _load("ladder_hand")

SMALL = ["--image-size", "16", "--dataset-size", "64", "--warmup", "1", "--steps", "2"]


@pytest.mark.slow  # ~9 s on a quiet 2-core CPU (two torch imports), 20 s on a busy one
def test_hand_rungs_0_and_1_run_and_print_parseable_results(child_env):
    # Each rung is its own process, as in the benchmark; the two run side by side.
    script = str(ROOT / "benchmarks/ladder_hand.py")
    procs = {
        n: subprocess.Popen(
            [sys.executable, script, "--rung", str(n), *SMALL],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env,
        )
        for n in (0, 1)
    }
    for n, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=180)
        r = ladder.parse_result(stdout)
        assert r is not None, stderr[-2000:]
        assert r["status"] == "ok", r.get("error")
        assert r["rung"] == n and r["batch_size"] == 32 and r["samples_per_step"] == 32
        assert len(r["step_ms"]) == 2 and len(r["warmup_ms"]) == 1 and len(r["losses"]) == 2
        assert r["median_ms"] > 0
        assert r["samples_per_s"] == pytest.approx(32 / r["median_ms"] * 1000, rel=0.01)
        assert r["steps_applied"] == list(range(n + 1))
        assert r["num_workers"] == (0 if n == 0 else hand.usable_cores())


def _machine(**kw) -> dict:
    m = {"device": "cpu", "torch": "2.14.1", "cores": 2, "cpu_bf16_native": False,
         "cuda_name": None, "cuda_capability": None, "cuda_bf16": False}  # fmt: skip
    return m | kw


def test_plan_on_a_cpu_without_bf16_says_why_each_step_does_not_apply():
    rows = {r["rung"]: r for r in hand.plan(_machine(), allow_batch_size=False)}
    assert [rows[n]["status"] for n in range(10)] == [
        "run", "run", "not-applicable", "not-applicable", "run", "no-op",
        "not-applicable", "run", "not-applicable", "run",
    ]  # fmt: skip
    assert "needs CUDA" in rows[2]["reason"] and "needs CUDA" in rows[8]["reason"]
    assert "--allow-batch-size" in rows[3]["reason"]
    assert (
        rows[6]["reason"]
        == "not applicable: no native bf16 (emulated bf16 is far slower than fp32)"
    )
    # cumulative: rung 9 runs with every applicable step below it, less those left out
    assert hand.build_steps(9, list(rows.values()), set()) == {0, 1, 4, 7, 9}
    assert hand.build_steps(9, list(rows.values()), {7}) == {0, 1, 4, 9}


def test_plan_with_cuda_and_batch_size_applies_every_step():
    old = _machine(device="cuda", cuda_bf16=False, cuda_capability=[7, 0])
    rows = hand.plan(old, allow_batch_size=True)
    assert [r["status"] for r in rows if r["rung"] != 5] == ["run"] * 9
    assert rows[6]["label"] == "+ AMP fp16"
    assert hand.plan(_machine(cpu_bf16_native=True), False)[6]["label"] == "+ AMP bf16"


def test_ceiling_takes_only_the_model_side_knobs_of_tunes_best():
    best = {"num-workers": 2, "device-transforms": "normalize", "amp": "bf16",
            "compile": "default", "channels-last": True, "threads": 2,
            "batch-size": 64}  # fmt: skip
    assert hand.ceiling_settings(best, _machine()) == {
        "amp": "bf16", "compile": "default", "channels-last": True, "threads": 2,
        "batch-size": 64,
    }  # fmt: skip
    assert hand.ceiling_settings({"amp": True}, _machine(device="cuda")) == {"amp": "fp16"}
    assert hand.ceiling_settings({}, _machine()) == {}


def test_grid_is_workers_by_persistence_by_device_transforms():
    configs = ladder.grid_configs([1, 2])
    assert len(configs) == 10
    assert len(ladder.grid_configs([1, 2], ["normalize", "full"])) == 15
    assert {} in configs and {"device-transforms": "normalize"} in configs
    assert {
        "num-workers": 2,
        "persistent-workers": True,
        "device-transforms": "normalize",
    } in configs
    assert not any("persistent-workers" in c and "num-workers" not in c for c in configs)


def test_a_tune_that_wrote_no_report_is_reported_as_failed(tmp_path):
    r = ladder.read_tune(tmp_path / "tune_report.json", 1, "ModuleNotFoundError: amp", 3.0)
    assert not r["ok"] and "no tune_report.json" in r["error"] and "amp" in r["error"]
    timed_out = ladder.read_tune(tmp_path / "tune_report.json", None, "", 60.0)
    assert "timed out" in timed_out["error"]


def _report(path, best, ladder_rows):
    rows = [{"label": label, "config": config, "median_ms": 100.0, "samples_per_s": sps,
             "speedup": 1.0, "peak_bytes": None, "changes_numerics": False}
            for label, config, sps in ladder_rows]  # fmt: skip
    path.write_text(json.dumps({"ladder": rows, "best": best, "final_speedup": 1.5,
                                "trials": [], "wall_s": 9.0, "noise_pct": 2.0}))  # fmt: skip
    return path


def test_tunes_final_figure_is_the_rung_of_its_chosen_configuration(tmp_path):
    rows = [("baseline", {}, 100.0), ("+ num_workers=2", {"num-workers": 2}, 150.0)]
    kept = ladder.read_tune(_report(tmp_path / "a.json", {"num-workers": 2}, rows), 0, "", 5.0)
    assert kept["ok"] and kept["final_samples_per_s"] == 150.0
    # the final check threw the combination out: tune returns the script as it is
    thrown = ladder.read_tune(_report(tmp_path / "b.json", {}, rows), 0, "", 5.0)
    assert thrown["final_samples_per_s"] == 100.0 and thrown["last_rung_samples_per_s"] == 150.0
    failed = ladder.read_tune(_report(tmp_path / "c.json", {}, []), 1, "boom", 5.0)
    assert not failed["ok"] and "no usable configuration" in failed["error"]


def test_read_tune_reads_what_tunes_report_writer_writes(tmp_path):
    from torchpace.tune.report import to_dict, write_report
    from torchpace.tune.result import Rung, TuneResult
    from torchpace.tune.trial import TrialSettings

    def rung(label, config, sps):
        return Rung(label, config, 1000 * 32 / sps, sps, sps / 100, None, False)

    result = TuneResult(
        ladder=[rung("baseline", {}, 100.0), rung("+ amp=bf16", {"amp": "bf16"}, 130.0)],
        best={"amp": "bf16"},
        final_speedup=1.3,
        wall_s=42.0,
    )
    report = to_dict(result, ["python", "x.py"], {}, TrialSettings("x.py", []))
    write_report(report, tmp_path / "tune_report.json")
    r = ladder.read_tune(tmp_path / "tune_report.json", 0, "", 50.0)
    assert r["ok"] and r["final_samples_per_s"] == 130.0 and r["final_label"] == "+ amp=bf16"
    assert r["best"] == {"amp": "bf16"} and r["tune_wall_s"] == 42.0 and r["wall_s"] == 50.0


def test_summary_states_ratios_against_their_targets():
    fig = {
        "hand_best": {"rung": 4, "label": "+ uint8", "samples_per_s": 100.0},
        "tune": {"ok": True, "best": {"amp": "bf16"}, "final_samples_per_s": 103.0, "wall_s": 60},
        "tune_over_hand": 1.03,
        "ceiling": {"status": "ok", "samples_per_s": 200.0, "settings": {}},
        "tune_over_ceiling": 0.515,
        "grid": {
            "best": {"config": {"num-workers": 2}, "samples_per_s": 100.0},
            "trials": [
                {"config": {}, "outcome": "ok", "error": None},
                {
                    "config": {"device-transforms": "normalize"},
                    "outcome": "crashed",
                    "error": "Traceback...\n  File x\nKeyError: 'device-transforms'\n",
                },
            ],
        },
        "tune_grid": {"ok": False, "error": "no tune_report.json"},
        "tune_over_grid": None,
    }
    rows = {row[0]: row[1:] for row in ladder.summary_rows(fig)}
    assert rows["tune / best hand rung"] == ("1.03", ">= 1.0", "met")
    assert rows["tune / ceiling"] == ("0.52", "(no target)", "")
    assert rows["tune --knobs / grid best"] == ("-", ">= 0.95", "not measured")
    assert rows["tune --knobs"][0] == "FAILED: no tune_report.json"
    assert (
        rows["grid configurations that failed"][0] == "1 of 2, e.g. KeyError: 'device-transforms'"
    )
    assert rows["tune: amp=bf16"] == ("103.0 samples/s", "", "")
    busy = {r[0]: r[3] for r in ladder.summary_rows({**fig, "tune_baseline_over_hand_rung0": 6.1})}
    assert busy["tune / best hand rung"] == (
        "met (unreliable: the two baselines disagree, see the check below)"
    )
    assert not ladder.targets_met(fig)
    fig["tune_grid"] = {"ok": True, "best": {"device-transforms": "full"},
                        "final_samples_per_s": 99.0}  # fmt: skip
    rows = [row[0] for row in ladder.summary_rows(fig)]
    assert (
        "tune --knobs num-workers,persistent-workers,device-transforms: device-transforms=full "
        "(a configuration outside the grid)"
    ) in rows
    assert ladder.targets_met({**fig, "tune_over_grid": 0.96})
    assert not ladder.targets_met({**fig, "tune_over_hand": 0.9, "tune_over_grid": 0.96})


def test_an_error_is_told_by_its_exception_line():
    log = (
        "Traceback (most recent call last):\n  File x\nModuleNotFoundError: No module named 'a'\n\n"
    )
    assert ladder.last_line(log) == "ModuleNotFoundError: No module named 'a'"
    assert ladder.last_line("exit 1\nsomething went wrong\n") == "something went wrong"
    assert ladder.last_line(None) == ""


def test_head_to_head_alternates_and_compares_adjacent_pairs():
    order = []

    def side(name, values):
        def measure(i):
            order.append((name, i))
            return values[i]

        return measure

    out = ladder.head_to_head(
        3, side("a", [100.0, 80.0, None]), side("b", [110.0, 90.0, 300.0]), lambda m: None,
        ("hand", "tune"),
    )  # fmt: skip
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert out["runs"] == {"hand": [100.0, 80.0], "tune": [110.0, 90.0, 300.0]}  # a failure
    assert out["medians"] == [90.0, 110.0]
    assert out["ratio_of_medians"] == pytest.approx(110 / 90, abs=1e-3)
    # round 3 has no hand run: no pair; rounds 1 and 2 pair 1.1 and 1.125
    assert out["paired_ratios"] == [1.1, 1.125]
    assert out["ratio"] == pytest.approx((1.1 + 1.125) / 2, abs=1e-3)
    low, high = out["interval90"]
    assert low < out["ratio"] < high and high - low < 0.2
    assert ladder.interval90([1.0]) is None
