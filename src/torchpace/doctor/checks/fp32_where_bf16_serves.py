"""TP311 fp32-where-bf16-serves: TF32/fp32 training on a GPU that runs bf16 at twice the rate."""

from __future__ import annotations

from torchpace.doctor.checks._compute import (
    BF16_CAPABILITY,
    BF16_SPEEDUP,
    precision_parts,
)
from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class ReducedPrecisionServes(Check):
    """TP311: an sm80+ GPU trains in fp32/TF32 where bf16 autocast serves.

    TF32 is a tensor-core format, so TP307 (fp32 outside tensor cores) stays silent on it;
    yet on sm80+ bf16 runs matmuls at twice the TF32 rate, and the fp32 normalisation and
    elementwise kernels around them move twice the bytes they would in bf16.

    ## What it does

    On an sm 8.0+ GPU (A100, H100, ...) in a run that does not use autocast, sums from the
    kernels of each step:

    - the **TF32** matmul/conv time (cuBLAS/cuDNN kernels with `tf32` in the name, CUTLASS
      `s1688`/`s16816` tensor-op kernels). TF32 runs on tensor cores, so TP307 (fp32 *outside*
      tensor cores) stays silent about it; but on sm80+ the bf16/fp16 tensor-core rate is
      **twice** the TF32 one;
    - the **fp32 normalisation** time (cuDNN `bn_fw*`/`bn_bw*`, ATen batch/layer/group norm
      kernels templated on `float`);
    - the **fp32 elementwise/reduction** time (ATen `elementwise_kernel`/`reduce_kernel` on
      `float`: activations, residual adds, losses). The optimizer's multi-tensor kernels are not
      counted: autocast leaves the optimizer in fp32.

    It fires when these take at least 25% of the GPU time and the tensor-core matmuls are mostly
    TF32 (not bf16/fp16 already).

    ## How the saving is estimated

    `saving = 0.5 × TF32 matmul/conv + 0.5 × fp32 elementwise + 0.5 × fp32 normalisation`: bf16
    doubles the matmul rate and halves the bytes the memory-bound kernels move. One exception,
    from measurement: when the step has cuDNN layout transposes (NCHW convs, see TP312), the
    normalisation half is **not** counted here, because cuDNN's NCHW batch-norm kernels did not
    speed up in bf16; that half is counted under TP312, which needs bf16 too. The evidence lists
    each part (`saving_tf32_matmul_ms`, ...).

    Checked on pytorch/examples imagenet, ResNet-50, batch 128, one H100
    (`../shared/traces/h100_imagenet_resnet50.json.gz`, measured by hand in one process): 70.9
    ms/step as written, **59.5 with bf16 autocast (11.4 ms saved)**; the doctor estimates 16.9
    ms (TF32 convs 19.8 ms → 9.9, fp32 elementwise 13.9 ms → 7.0), within the factor 1.5 the
    doctor is held to. With channels_last as well the step is 34.1 ms (36.8 saved); TP311 +
    TP312 estimate 38.1 ms together.

    ## Example

    ```python
    model = torchvision.models.resnet50().cuda()
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())   # TF32 convs, fp32 BatchNorm and ReLU
        loss.backward()
    ```

    ## Use instead

    ```python
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()                                 # no GradScaler with bf16
    ```

    ## Fix safety

    Changes numerics. bf16 autocast is usually safe for training (autocast keeps losses, softmax
    and reductions it knows in fp32); `torchpace tune` (knob `amp`) checks that the loss still
    behaves before keeping it.
    """

    code = "TP311"

    # The parts autocast would halve must be a real share of the device's time.
    MIN_FP32_SHARE = 0.25

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile) or profile.capability is None:
            return []
        if profile.capability < BF16_CAPABILITY:
            return []  # TP307 covers fp16 on sm7x
        m = profile.median
        calls = profile.facts.calls if profile.facts else None
        if calls is not None and calls.autocast:
            return []
        fp32_ms = m.matmul_tf32_ms + m.fp32_elementwise_ms + m.fp32_norm_ms
        if not m.kernel_ms or fp32_ms / m.kernel_ms < self.MIN_FP32_SHARE:
            return []
        if m.matmul_ms and m.matmul_tf32_ms < 0.5 * m.matmul_ms:
            return []  # mostly bf16/fp16 already, or plain fp32 outside tensor cores (TP307)
        parts = precision_parts(profile)
        saving = sum(parts.values())
        if not self.worth_reporting(profile, saving, "device"):
            return []
        evidence = {
            "tf32_matmul_conv_ms": r(m.matmul_tf32_ms),
            "fp32_normalisation_ms": r(m.fp32_norm_ms),
            "fp32_elementwise_ms": r(m.fp32_elementwise_ms),
            "kernel_ms": r(m.kernel_ms),
            "compute_capability": ".".join(map(str, profile.capability)),
        }
        evidence |= {f"saving_{k}_ms": r(v) for k, v in parts.items()}
        notes = [
            f"saving: TF32 matmul/conv time x {1 - 1 / BF16_SPEEDUP:g} (bf16 runs at "
            f"{BF16_SPEEDUP:g}x the TF32 rate on sm80+) + fp32 elementwise and normalisation "
            "time x 0.5 (half the bytes)"
        ]
        if m.layout_transpose_ms > 0 and m.fp32_norm_ms > 0:
            notes.append(
                "the normalisation half is left out: with NCHW convs (layout transposes in "
                "the step) it came only with channels_last too, counted under TP312"
            )
        return [
            Finding(
                "TP311",
                evidence=evidence,
                saving_ms=saving,
                step_ms=profile.step_ms,
                cost="device",  # kernel time (doctor/pricing.py)
                knob="amp",
                detail=f"{100 * fp32_ms / m.kernel_ms:.0f}% of GPU time is TF32 matmul/conv "
                "and fp32 normalisation/elementwise work that bf16 halves",
                fix="torch.autocast('cuda', dtype=torch.bfloat16) around forward + loss (no "
                "GradScaler needed with bf16)",
                notes=notes,
            )
        ]
