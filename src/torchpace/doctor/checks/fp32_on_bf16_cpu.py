"""TP314 fp32-on-bf16-cpu: fp32 training on a CPU that computes bf16 natively."""

from __future__ import annotations

from torchpace.doctor.checks._compute import probe_saving
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

PROBE = "autocast-bf16"  # capture/probes.py BF16_PROBE: the probe whose result prices it


class Fp32OnBf16Cpu(Check):
    """TP314: the model trains in float32 on a CPU that computes bf16 natively, and bf16
    autocast measured faster in this process.

    TP307 and TP311 read the GPU's kernels; on a CPU no kernel name says what bf16 would
    save, and the answer differs by machine: on this project's 2-core VMs bf16 autocast ran
    40x slower on an AVX2-only EPYC (emulated), 1.2x faster on a Zen 4 EPYC, 1.2-2x slower
    on one AVX512-BF16 Xeon and 1.8-2.1x faster on another with AMX (dcgan, ResNet-18). So
    this check never infers: it reports only what the capture's probe measured
    (`capture/probes.py`, probe `autocast-bf16`), and the probe runs only where the CPU has
    the instructions.

    ## What it does

    On a CPU run whose models train in float32 and whose script does not enter
    `torch.autocast` itself, on a CPU with AVX512-BF16, AMX-BF16 or ARM BF16, the capture
    switches bf16 autocast around the trained models' forward for a few unprofiled steps
    after the profiled window (a settling step and 3 timed steps each way, in the same
    process, by a pre-hook and a forward hook that are removed afterwards; the forward's
    outputs come back in float32, as tune's `amp` knob makes them). It fires when the steps
    under autocast are at least 10% and 1 ms faster than the script's own; the saving is the
    difference of the two medians (evidence `step_ms_fp32`, `step_ms_bf16`). A run that goes
    on training after the capture (`--continue`) is not probed: its steps are the user's;
    nor is a rank of a data-parallel job (tune's `amp` knob measures the job as a whole).

    ## Why it matters

    CPUs with AVX512-BF16 or AMX run bf16 matrix products and convolutions at up to twice
    (AVX512-BF16) or many times (AMX tiles) the fp32 rate, and move half the bytes. A model
    left in float32 leaves that on the table: on pytorch/examples' dcgan the doctor said "no
    significant bottleneck" where bf16 autocast was worth 1.8x, and on its mnist example
    bf16 was worth +48% on a Zen 4 EPYC.

    ## Example

    ```python
    for x, y in loader:
        loss = loss_fn(model(x), y)  # float32 on an AMX CPU
        loss.backward()
    ```

    ## Use instead

    ```python
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
        loss = loss_fn(out.float(), y)
        loss.backward()
    ```

    ## Fix safety

    Changes numerics: bf16 keeps float32's range with 8 bits of mantissa, so the loss curve
    moves a little; no GradScaler is needed. `torchpace tune` (knob `amp`) measures the gain
    over many steps and checks the losses against the float32 run before keeping it. The
    probe's figure is a few steps of one process: tune's is the one to act on.
    """

    code = "TP314"

    # The probe's blocks are a few steps each: a gain below these is within a shared
    # machine's step-to-step spread, and a precision change needs more than that to be named.
    MIN_PROBE_GAIN = 0.10
    MIN_SAVING_MS = 1.0

    def run(self, profile: Profile) -> list[Finding]:
        saving, probe = probe_saving(profile, PROBE)
        if probe is None or saving is None:
            return []
        if saving < max(self.MIN_SAVING_MS, self.MIN_PROBE_GAIN * probe.baseline_ms):
            return []  # measured: bf16 gains too little here, or is slower
        speedup = probe.baseline_ms / probe.probe_ms if probe.probe_ms > 0 else None
        return [
            Finding(
                "TP314",
                evidence={
                    "step_ms_fp32": r(probe.baseline_ms),
                    "step_ms_bf16": r(probe.probe_ms),
                    "probe_steps": probe.steps,
                },
                saving_ms=saving,
                step_ms=probe.baseline_ms,
                cost="unprofiled",
                knob="amp",
                detail="the model trains in float32 on a CPU with native bf16; bf16 autocast "
                f"ran {speedup:.2f}x faster in a probe of {probe.steps} steps each way",
                fix="torch.autocast('cpu', dtype=torch.bfloat16) around the forward, the "
                "loss in float32 (`torchpace tune` measures it and checks the losses)",
                notes=[
                    "saving measured by switching bf16 autocast on for a few steps; it "
                    "changes numerics (the loss check in tune compares them)"
                ],
            )
        ]
