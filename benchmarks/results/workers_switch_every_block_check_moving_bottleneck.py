"""Switched trials of num_workers=2 on moving_bottleneck, repeated: their block gains.

    PYTHONPATH=src flock /tmp/tp-cpu.lock python \
        benchmarks/results/workers_switch_every_block_check_moving_bottleneck.py 4 LABEL
"""

import statistics
import sys
import tempfile
from pathlib import Path

from torchpace.capture.runner import capture_script
from torchpace.capture.spec import CaptureSpec, Mode
from torchpace.tune.trial import from_facts

SCRIPT = str(Path(__file__).resolve().parents[1] / "jobs" / "moving_bottleneck.py")

for seed in range(int(sys.argv[1])):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "run"
        out.mkdir()
        spec = CaptureSpec(
            SCRIPT, ["--steps", "400"], out, mode=Mode.TIMING, knobs={"num-workers": 2},
            switch="num-workers", warmup=6, steps=96, seed=0, record_loss=True,
            timeout_s=240, switch_seed=seed,
        )  # fmt: skip
        facts = capture_script(spec, output=Path(d) / "o.log").facts
        gains = from_facts(facts, "w2", {"num-workers": 2}).block_gains
        median = round(statistics.median(gains), 1) if gains else None
        sd = round(statistics.stdev(gains), 1) if len(gains) > 1 else None
        print(sys.argv[2], seed, [round(g, 1) for g in gains], "median", median, "sd", sd)
