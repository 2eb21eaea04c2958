"""benchmarks/tune_noise.py's reading of its rounds, on made-up figures: tuned over the best
hand configuration, that hand chosen without the round it is judged in."""

import importlib.util
import json
import sys

from conftest import ROOT


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tune_noise = _load("tune_noise")


def _runs(**step_ms: list[float | None]) -> dict[str, list[dict]]:
    return {
        name: [{"step_ms": ms, "wall_s": 1.0, "returncode": 0 if ms else 1} for ms in per_round]
        for name, per_round in step_ms.items()
    }


def test_a_hand_fast_in_one_round_only_is_not_its_round_s_reference():
    # "hand: b" is the fastest by its median only because round 2 favoured it; the same
    # round also favoured tune's run. Chosen on the rounds that judge it, it reads tune
    # slower; each round's best chosen on the other rounds, tune matches its equal ("a").
    runs = _runs(
        plain=[12.0, 12.0, 12.0],
        tuned=[8.0, 8.0, 6.0],
        **{"hand: a": [8.0, 8.0, 8.0], "hand: b": [9.0, 7.0, 5.0]},
    )
    summary = tune_noise.summarize(runs)
    assert summary["best_hand"] == "hand: b"
    assert summary["tuned_vs_best_hand_per_step_in_sample"]["median"] < 0.9
    held_out = summary["tuned_vs_best_hand_per_step"]
    # each round's reference, by its median over the two other rounds: round 0, b (6.0
    # against a's 8.0): 9/8; round 1, b (7.0 against 8.0): 7/8; round 2, a tie at 8.0 that
    # goes to the first, a: 8/6
    assert held_out["best_hand_by_round"] == ["hand: b", "hand: b", "hand: a"]
    assert held_out["rounds"] == [1.125, 0.875, 1.333]
    assert held_out["median"] == 1.125


def test_one_hand_best_in_every_round_reads_as_in_sample():
    runs = _runs(
        plain=[12.0, 11.0, 13.0],
        tuned=[8.0, 9.0, 7.0],
        **{"hand: a": [7.0, 7.5, 6.5], "hand: b": [10.0, 10.5, 9.5]},
    )
    summary = tune_noise.summarize(runs)
    held_out = summary["tuned_vs_best_hand_per_step"]
    assert held_out["best_hand_by_round"] == ["hand: a"] * 3
    assert held_out["rounds"] == summary["tuned_vs_best_hand_per_step_in_sample"]["rounds"]


def test_a_failed_run_is_neither_judged_nor_chooses():
    runs = _runs(
        plain=[12.0, 12.0, 12.0],
        tuned=[8.0, None, 8.0],
        **{"hand: a": [8.0, 8.0, None], "hand: b": [1.0, 9.0, 9.0]},
    )
    held_out = tune_noise.summarize(runs)["tuned_vs_best_hand_per_step"]
    # round 1: tune's run failed, no ratio; round 2: a's run failed, so b is its reference
    # (while in round 0, a's only other run, 8.0, beats b's 9.0)
    assert held_out["best_hand_by_round"] == ["hand: a", "hand: b"]
    assert held_out["rounds"] == [1.0, 1.125]


def test_a_round_whose_best_hand_is_tune_s_own_configuration_reads_one():
    # tune kept "a"'s very knobs: a round in which "a" is the best hand compares two runs of
    # one configuration (its ratio is the machine's noise) and reads 1; a round whose best is
    # another configuration is measured
    runs = _runs(
        plain=[12.0, 12.0, 12.0],
        tuned=[8.0, 11.0, 8.0],
        **{"hand: a": [8.0, 8.0, 9.0], "hand: b": [9.5, 9.5, 6.0]},
    )
    held_out = tune_noise.summarize(runs, frozenset({"hand: a"}))["tuned_vs_best_hand_per_step"]
    # round 0: a (8.5 over the others) against b (7.75): b, measured 9.5/8; round 1: a
    # (8.5) against b (7.75): b, 9.5/11; round 2: a (8.0) against b (9.5): a, read 1
    assert held_out["best_hand_by_round"] == ["hand: b", "hand: b", "hand: a"]
    assert held_out["rounds"] == [1.188, 0.864, 1.0]
    assert held_out["rounds_measured"] == [1.188, 0.864, 1.125]
    assert held_out["same_configuration_as_tuned"] == ["hand: a"]


def test_stored_results_are_read_again_with_this_reading(tmp_path, capsys):
    # a stored run whose tune kept hand "a"'s knobs: read again, the rounds whose best hand
    # is "a" read 1, and the done-when follows
    runs = _runs(
        plain=[12.0, 12.0, 12.0],
        tuned=[9.0, 9.0, 9.0],
        **{"hand: a": [8.0, 8.0, 8.0], "hand: b": [10.0, 10.0, 10.0]},
    )
    stored = {"runners": {"moving_bottleneck": {
        "hand": {"a": {"num-workers": 2}, "b": {"num-workers": 4}},
        "tune": {"best": {"num-workers": 2}, "wall_s": 100.0},
        "runs": runs,
    }}}  # fmt: skip
    path = tmp_path / "stored.json"
    path.write_text(json.dumps(stored))
    (tmp_path / "report.json").write_text("{}")  # a tune report beside it: passed over
    assert tune_noise.main(["--reread", str(path), str(tmp_path / "report.json")]) == 0
    out = capsys.readouterr().out
    assert "moving_bottleneck: PASS" in out
    assert "per step 1.000 (rounds 1.000, 1.000, 1.000)" in out
    assert "report.json" not in out
