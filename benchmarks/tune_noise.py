"""Does tune keep what really makes a script faster, on a quiet and on a loaded machine?

For each runner (a script, its arguments, and the configurations a person would try by
hand): `torchpace tune` on the unmodified script; then, in one alternated measurement, the
script as written (`python script.py`), tune's kept configuration through `torchpace run
--config`, and each hand configuration (the same knobs written to a torchpace.toml, run the
same way), in an order drawn at random each round. Each run is timed end to end (process
start to exit) and per step (an optimizer-step hook, installed by a sitecustomize on
PYTHONPATH in every variant alike: the interval between two steps' ends). Reported:

- tune's own verdicts: what it kept, its final speedup, the smallest change it could have
  seen, its trials and wall time, whether it stopped early;
- per step: each variant's median ms/step (the median over rounds of each run's median step
  after WARMUP_STEPS), and the ratios tuned / plain and tuned / best hand (paired per round);
- end to end: each variant's median wall seconds, tuned / plain.

    flock /tmp/torchpace-bench.lock python benchmarks/tune_noise.py [--runner fake_cifar]
        [--rounds 5] [--time-budget 300] [--load] [--out benchmarks/results/NAME.json]

A corpus runner's tune is told the job's length (`--job-steps`, its run's steps), as a user
who knows it would: torch.compile's 25 s of compilation on makemore's 300 steps made the tuned
job slower end to end while faster per step.

--load runs a competing CPU-bound process (`python -c 'while 1: pass'`) for the whole
benchmark, tune included. More runners: add a Runner to RUNNERS (a script elsewhere, e.g.
../shared/corpus, with its arguments and hand configurations); `--runner` picks them.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
WARMUP_STEPS = 3  # per-step medians skip the first steps of each run (allocation, caches)
RUN_TIMEOUT_S = 900

# Installed in every measured process (plain, tuned, hand alike) through PYTHONPATH: when torch
# is imported, a global optimizer-step hook records each step's end; at exit the times go to
# $TP_BENCH_STEPS. Nothing else changes in the script's process.
SITECUSTOMIZE = r"""
import atexit, importlib.abc, importlib.util, json, os, sys, time

_out = os.environ.get("TP_BENCH_STEPS")
_ends = []


def _install():
    import torch.optim.optimizer as opt

    opt.register_optimizer_step_post_hook(lambda *a, **k: _ends.append(time.perf_counter()))


class _After(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.optim" or not _out:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _install()

        loader.exec_module = exec_module
        return spec


if _out:
    sys.meta_path.insert(0, _After())
    atexit.register(lambda: open(_out, "w").write(json.dumps(_ends)))
"""


@dataclass
class Runner:
    name: str
    script: str  # relative to cwd
    args: list[str]
    cwd: Path = REPO
    # configurations a person would try by hand (knob -> value, as in torchpace.toml)
    hand: dict[str, dict] = field(default_factory=dict)
    # a script of ../shared/corpus: copied with its generated data into the work folder
    # (benchmarks/corpus_runners.py), which becomes cwd, script and args
    corpus: str | None = None
    corpus_steps: int = 0  # the run's length in its own steps (the plain job, end to end)
    # told to tune (--job-steps), as a user who knows the job's length would: a knob whose
    # one-time cost the job does not repay is refused (None: not told)
    job_steps: int | None = None

    def prepared(self, work: Path) -> Runner:
        if self.corpus is None:
            return self
        sys.path.insert(0, str(REPO / "benchmarks"))
        from corpus_runners import RUNNERS as CORPUS_RUNNERS

        source = CORPUS_RUNNERS[self.corpus]
        if not source.available():
            raise SystemExit(f"{source.source} is not here (../shared/corpus): no {self.name}")
        ready = source.prepare(work / "job", steps=self.corpus_steps)
        return Runner(self.name, ready.script, ready.args, ready.folder, self.hand,
                      job_steps=self.corpus_steps)  # fmt: skip


RUNNERS = {
    "fake_cifar": Runner(
        name="fake_cifar",
        script="examples/fake_cifar_resnet.py",
        args=["--image-size", "32", "--dataset-size", "512", "--print-every", "0"],
        hand={
            "workers=1": {"num-workers": 1},
            "workers=2": {"num-workers": 2},
            "device-transforms": {"device-transforms": "normalize"},
            "workers=1 device-transforms": {"num-workers": 1, "device-transforms": "normalize"},
            "host-malloc": {"host-malloc": True},
        },
    ),
    # karpathy/makemore: 4 loader workers by default (0 is what a person tries first on 2
    # cores), AdamW built without fused/foreach
    "makemore": Runner(
        name="makemore",
        script="",
        args=[],
        corpus="makemore",
        corpus_steps=300,
        hand={
            "workers=0": {"num-workers": 0},
            "workers=1": {"num-workers": 1},
            "fused AdamW": {"fused-optimizer": "fused"},
            "workers=0 fused AdamW": {"num-workers": 0, "fused-optimizer": "fused"},
            "workers=0 foreach AdamW": {"num-workers": 0, "fused-optimizer": "foreach"},
        },
    ),
    # karpathy/ng-video-lecture's gpt.py: a loop with no arguments and no DataLoader
    "gpt": Runner(
        name="gpt",
        script="",
        args=[],
        corpus="gpt",
        corpus_steps=300,
        hand={
            "fused AdamW": {"fused-optimizer": "fused"},
            "foreach AdamW": {"fused-optimizer": "foreach"},
        },
    ),
}


def env(extra: dict | None = None) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), e.get("PYTHONPATH", "")) if p)
    e.update(extra or {})
    return e


def write_toml(path: Path, knobs: dict) -> None:
    sys.path.insert(0, str(SRC))
    from torchpace.knobs import fingerprint
    from torchpace.knobs.config import TuneConfig, write_config

    write_config(path, TuneConfig(knobs=dict(knobs), fingerprint=fingerprint.current()), [])


def run_tune(runner: Runner, work: Path, time_budget: float) -> dict:
    out = work / "tune"
    job = ["--job-steps", str(runner.job_steps)] if runner.job_steps else []
    cmd = [sys.executable, "-m", "torchpace", "tune", "--out", str(out), "--quiet",
           "--time-budget", str(time_budget), *job, runner.script, *runner.args]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=runner.cwd, env=env(), capture_output=True, text=True,
                          timeout=time_budget * 2 + 600)  # fmt: skip
    wall = time.perf_counter() - start
    (work / "tune.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    report_path = out / "tune_report.json"
    if not report_path.is_file():
        return {
            "returncode": done.returncode,
            "wall_s": round(wall, 1),
            "error": done.stderr[-2000:],
        }
    report = json.loads(report_path.read_text())
    return {
        "returncode": done.returncode,
        "wall_s": round(wall, 1),
        "command": cmd[2:],
        "best": report["best"],
        "final_speedup": report["final_speedup"],
        # what tune shows the user: the final check's speedup, or after a budget stop (no
        # final check) its last rung's against the baseline's runs
        "speedup": (report.get("figures") or {}).get("speedup"),
        "figures": report.get("figures"),
        "detectable_pct": report.get("detectable_pct"),
        "pair_sd_pct": report.get("pair_sd_pct"),
        "noise_pct": report.get("noise_pct"),
        "steps": report["settings"]["steps"],
        "trials": len(report["trials"]),
        "disturbed_runs": sum(t["verdict"].startswith("disturbed") for t in report["trials"]),
        "stopped": report["stopped"],
        "knobs": {
            k["knob"]: [k["status"], k["value"], k["gain_pct"], k["reason"][:200]]
            for k in report["knobs"]
            if k["status"] != "not-applicable"
        },
        "toml": str(out / "torchpace.toml"),
    }


def measure_once(runner: Runner, toml: Path | None, work: Path, tag: str) -> dict:
    steps_file = work / f"steps-{tag}.json"
    steps_file.unlink(missing_ok=True)
    if toml is None:
        cmd = [sys.executable, runner.script, *runner.args]
    else:
        cmd = [sys.executable, "-m", "torchpace", "run", "--config", str(toml), runner.script,
               *runner.args]  # fmt: skip
    extra = {"TP_BENCH_STEPS": str(steps_file)}
    e = env(extra)
    e["PYTHONPATH"] = os.pathsep.join([str(work / "site"), e["PYTHONPATH"]])
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=runner.cwd, env=e, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)  # fmt: skip
    wall = time.perf_counter() - start
    ends = json.loads(steps_file.read_text()) if steps_file.is_file() else []
    steps = [1000 * (b - a) for a, b in itertools.pairwise(ends)][WARMUP_STEPS:]
    return {
        "returncode": done.returncode,
        "wall_s": round(wall, 3),
        "step_ms": round(statistics.median(steps), 3) if steps else None,
        "steps": len(steps),
        "error": done.stderr[-800:] if done.returncode else None,
    }


def measure(runner: Runner, variants: dict[str, Path | None], rounds: int, work: Path, say):
    rng = random.Random(0)
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants)
        rng.shuffle(order)
        for name in order:
            one = measure_once(runner, variants[name], work, f"{r}-{len(runs[name])}")
            one["round"] = r
            runs[name].append(one)
            one["loadavg"] = loadavg()
            say(f"round {r}: {name:<32} {one['step_ms']} ms/step  {one['wall_s']} s")
    return runs


def summarize(runs: dict[str, list[dict]]) -> dict:
    def med(name, key):
        values = [x[key] for x in runs[name] if x[key] is not None and not x["returncode"]]
        return round(statistics.median(values), 3) if values else None

    def paired(a: str, b: str, key: str) -> dict | None:
        """b's time over a's, round by round: > 1 means a is faster."""
        ratios = [
            y[key] / x[key]
            for x, y in zip(runs[a], runs[b], strict=False)
            if x[key] and y[key] and not x["returncode"] and not y["returncode"]
        ]
        if not ratios:
            return None
        return {"median": round(statistics.median(ratios), 3),
                "min": round(min(ratios), 3), "max": round(max(ratios), 3),
                "rounds": [round(v, 3) for v in ratios]}  # fmt: skip

    table = {n: {"step_ms": med(n, "step_ms"), "wall_s": med(n, "wall_s")} for n in runs}
    hands = [n for n in runs if n.startswith("hand: ") and table[n]["step_ms"]]
    best_hand = min(hands, key=lambda n: table[n]["step_ms"]) if hands else None
    out = {
        "variants": table,
        "best_hand": best_hand,
        "tuned_speedup_per_step": paired("tuned", "plain", "step_ms"),
        "tuned_speedup_end_to_end": paired("tuned", "plain", "wall_s"),
    }
    out["per_variant_speedup"] = {
        n: (paired(n, "plain", "step_ms") or {}).get("median") for n in runs if n != "plain"
    }
    if best_hand:
        out["tuned_vs_best_hand_per_step"] = paired("tuned", best_hand, "step_ms")
        out["best_hand_speedup_per_step"] = paired(best_hand, "plain", "step_ms")
    return out


def hand_wins_found(summary: dict, hand: dict[str, dict], tune: dict) -> dict:
    """Each hand configuration that won >= 5% per step over plain (its median paired ratio):
    are its knobs in tune's kept configuration (any value: tune may find a better one)?"""
    found = {}
    kept = tune.get("best") or {}
    for label, knobs in hand.items():
        ratio = summary.get("per_variant_speedup", {}).get(f"hand: {label}")
        if ratio is not None and ratio >= 1.05:
            found[label] = {"speedup": ratio, "knobs_kept": sorted(set(knobs) & set(kept)),
                            "all_found": set(knobs) <= set(kept)}  # fmt: skip
    return found


def loadavg() -> float | None:
    """The machine's 1-minute load average: what else ran (other users of a shared VM)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def competing_load(on: bool):
    if not on:
        yield None
        return
    # it ends with the benchmark however that ends (a SIGTERM skips `finally`): a busy
    # loop that checks its parent every million turns (a stale one, left by a killed run,
    # doubled the next run's load: 1 s steps in place of 15 ms)
    busy = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
    busy += "    for _ in range(1_000_000): pass\n"
    proc = subprocess.Popen([sys.executable, "-c", busy])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runner", action="append", choices=sorted(RUNNERS), help="(all)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--time-budget", type=float, default=300.0, help="tune's (300 s)")
    p.add_argument("--load", action="store_true", help="a competing CPU-bound process")
    p.add_argument("--out", type=Path, help="the results' JSON")
    p.add_argument("--work", type=Path, help="kept: tune's run folder, the tomls (a temp dir)")
    args = p.parse_args(argv)

    def say(message: str) -> None:
        print(f"[tune_noise] {message}", file=sys.stderr, flush=True)

    results = {"condition": "loaded" if args.load else "quiet", "cpus": os.cpu_count(),
               "date": time.strftime("%Y-%m-%d %H:%M"), "runners": {}}  # fmt: skip
    tmp = args.work or Path(tempfile.mkdtemp(prefix="tp-tune-noise-"))
    with competing_load(args.load):
        for name in args.runner or sorted(RUNNERS):
            work = Path(tmp) / name
            runner = RUNNERS[name].prepared(work)
            (work / "site").mkdir(parents=True, exist_ok=True)
            (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
            hands = {}  # written first: a hand configuration that is not valid fails now
            for label, knobs in runner.hand.items():
                hands[f"hand: {label}"] = work / f"hand-{len(hands)}.toml"
                write_toml(hands[f"hand: {label}"], knobs)
            say(f"{name}: tune (--time-budget {args.time_budget:g})")
            load_before = loadavg()
            tune = run_tune(runner, work, args.time_budget)
            tune["loadavg"] = [load_before, loadavg()]
            say(f"{name}: tune kept {tune.get('best')} ({tune.get('speedup')}x), "
                f"{tune.get('trials')} trials in {tune.get('wall_s')} s")  # fmt: skip
            variants: dict[str, Path | None] = {"plain": None}
            # tune's own torchpace.toml, as a user runs it (per-loader values and all)
            tuned = Path(tune["toml"]) if tune.get("toml") else work / "tuned.toml"
            if not tuned.is_file():
                write_toml(tuned, tune.get("best") or {})
            variants["tuned"] = tuned
            variants.update(hands)
            runs = measure(runner, variants, args.rounds, work, say)
            summary = summarize(runs)
            summary["hand_wins_found"] = hand_wins_found(summary, runner.hand, tune)
            results["runners"][name] = {
                "command": [runner.script, *runner.args],
                "tune": tune,
                "hand": runner.hand,
                "summary": summary,
                "runs": runs,
            }
            print(json.dumps(results["runners"][name]["summary"], indent=1))
    results["work"] = str(tmp)
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        say(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
