"""How close to this machine's limit does the bundled example run, before and after tune?

1. `torchpace doctor` on examples/fake_cifar_resnet.py as written: its counted FLOPs per
   step, the measured peak, the MFU and the gap to the speed of light by cause.
2. `torchpace tune` on the same script: each rung of its ladder as a fraction of the same
   peak (tune_report.json's speed_of_light), the baseline first and the final result last.

    flock /tmp/torchpace-bench.lock python benchmarks/mfu.py [--image-size 32] [--json OUT]

Defaults are sized for a 2-core CPU (32 px images; tune stops trying after --time-budget
seconds). Every figure is from this run; on a busy machine read them with the noise tune
reports beside its ladder and the load averages recorded with them. Run it from a copy of
the tree that does not change while it runs (`git archive HEAD | tar -x -C DIR`): tune
imports torchpace afresh in every trial.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "fake_cifar_resnet.py"


def torchpace(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "120"
    cmd = [sys.executable, "-m", "torchpace", *args]
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=3600)


def script_args(args) -> list[str]:
    return [str(EXAMPLE), "--image-size", str(args.image_size), "--dataset-size",
            str(args.dataset_size), "--print-every", "0"]  # fmt: skip


def run_doctor(args, work: Path) -> dict:
    out = work / "doctor.json"
    proc = torchpace("doctor", "--out", str(work / "doctor"), "--json", str(out),
                     *script_args(args), cwd=work)  # fmt: skip
    if not out.is_file():
        return {"ok": False, "error": proc.stderr[-2000:]}
    sol = json.loads(out.read_text())["speed_of_light"]
    return {"ok": sol is not None, "speed_of_light": sol, "terminal": proc.stdout[-6000:]}


def run_tune(args, work: Path) -> dict:
    out = work / "tune.json"
    proc = torchpace("tune", "--out", str(work / "tune"), "--json", str(out), "--time-budget",
                     str(args.time_budget), *script_args(args), cwd=work)  # fmt: skip
    if not out.is_file():
        return {"ok": False, "error": proc.stderr[-2000:]}
    report = json.loads(out.read_text())
    return {
        "ok": True,
        "speed_of_light": report.get("speed_of_light"),
        "ladder": [
            {k: r[k] for k in ("label", "median_ms", "samples_per_s", "speedup")}
            for r in report["ladder"]
        ],
        "best": report["best"],
        "final_speedup": report["final_speedup"],
        "noise_pct": report["noise_pct"],
    }


def summary(fig: dict) -> list[str]:
    lines = []
    sol = (fig.get("doctor") or {}).get("speed_of_light")
    if sol:
        lines.append(
            f"doctor: {sol['flops_per_step'] / 1e9:.2f} GFLOP/step, peak "
            f"{sol['peak_flop_per_s'] / 1e9:.1f} GFLOP/s, step {sol['step_ms']:.1f} ms "
            f"({sol['step_source']}), MFU {100 * sol['mfu']:.2f}%"
        )
        gap = sorted(sol["gap"], key=lambda g: -g["ms"])
        lines.append("  gap: " + ", ".join(f"{g['cause']} {g['ms']:.1f} ms" for g in gap))
    tune = (fig.get("tune") or {}).get("speed_of_light")
    if tune:
        for r in tune["rungs"]:
            frac = "-" if r["fraction"] is None else f"{100 * r['fraction']:.2f}%"
            lines.append(f"tune rung {r['label']}: MFU {frac}")
        if tune["final_fraction"] is not None:
            lines.append(f"after tune: MFU {100 * tune['final_fraction']:.2f}%")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-size", type=int, default=32, help="Resize target (32)")
    p.add_argument("--dataset-size", type=int, default=4000, help="images (4000)")
    p.add_argument("--time-budget", type=float, default=900, help="tune's --time-budget (900 s)")
    p.add_argument("--skip-tune", action="store_true")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args(argv)
    fig: dict = {
        "benchmark": "mfu",
        "date": datetime.date.today().isoformat(),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "settings": vars(args) | {"json": str(args.json) if args.json else None},
    }
    # the machine's load around each part: a shared machine's neighbours slow every figure
    fig["load_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="torchpace-mfu-") as tmp:
        work = Path(tmp)
        fig["doctor"] = run_doctor(args, work)
        fig["load_after_doctor"] = os.getloadavg()
        if not args.skip_tune:
            fig["tune"] = run_tune(args, work)
            fig["load_after_tune"] = os.getloadavg()
    for line in summary(fig):
        print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(fig, indent=2, default=str))
    return 0 if fig["doctor"].get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
