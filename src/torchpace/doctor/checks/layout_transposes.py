"""TP312 layout-transposes: NCHW convs: cuDNN transposes every tensor to NHWC and back."""

from __future__ import annotations

from torchpace.doctor.checks._compute import (
    BF16_CAPABILITY,
    BF16_SPEEDUP,
)
from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class LayoutTransposes(Check):
    """TP312: cuDNN transposes NCHW tensors to NHWC and back around each conv.

    ## What it does

    Sums the time of cuDNN's layout-transpose kernels in each step (`nchwToNhwcKernel`,
    `nhwcToNchwKernel`, `nchw2nhwc`, `nhwc2nchw`). On tensor-core GPUs cuDNN's fastest conv
    kernels take NHWC tensors: a model in the default NCHW layout has every conv input, output
    and gradient transposed on the way in and out. The finding fires when these transposes take
    at least 5% of the GPU time.

    ## How the saving is estimated

    `saving = transposes' time` (channels_last removes them), plus, in an fp32 run on sm80+,
    half the fp32 normalisation time: with NHWC tensors cuDNN's NHWC batch-norm kernels run, and
    those halve in bf16 where the NCHW ones measured did not. That second part needs bf16
    autocast as well (TP311), and the notes say so.

    Checked on pytorch/examples imagenet, ResNet-50, batch 128, one H100
    (`../shared/traces/h100_imagenet_resnet50.json.gz`): transposes 9.0 ms/step (13% of GPU
    time), fp32 batch norm 24.4 ms. Estimated 9.0 + 12.2 = 21.2 ms; measured by hand,
    channels_last on top of bf16 autocast saved 25.4 ms (59.5 → 34.1 ms/step). TP312 and TP311
    are then the doctor's first two findings, and together (38.1 ms estimated) they are the
    biggest measured win on that job (70.9 → 34.1 ms/step, 2.08×), where the doctor used to put
    `nn.DataParallel` first.

    ## Example

    ```python
    model = torchvision.models.resnet50().cuda()
    out = model(x.cuda())
    ```

    ## Use instead

    ```python
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x.cuda(non_blocking=True).to(memory_format=torch.channels_last))
    ```

    ## Fix safety

    Numerics unchanged (a layout, not a precision). Custom ops that assume contiguous NCHW
    (`.view` on a conv output) may need `.contiguous()`; `torchpace tune` (knob `channels-last`)
    measures it and checks the loss.
    """

    code = "TP312"

    # Transposes taking this share of the device's time are worth a layout change.
    MIN_TRANSPOSE_SHARE = 0.05

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        m = profile.median
        if not m.kernel_ms or m.layout_transpose_ms / m.kernel_ms < self.MIN_TRANSPOSE_SHARE:
            return []
        # With NHWC tensors cuDNN's NHWC batch norm runs, which halves in bf16 where its NCHW
        # kernels did not (see precision_parts): that half is counted here, with bf16.
        calls = profile.facts.calls if profile.facts else None
        fp32_run = not (calls is not None and calls.autocast)
        capable = profile.capability is not None and profile.capability >= BF16_CAPABILITY
        norm_half = m.fp32_norm_ms * (1 - 1 / BF16_SPEEDUP) if fp32_run and capable else 0.0
        saving = m.layout_transpose_ms + norm_half
        if not self.worth_reporting(profile, saving, "device"):
            return []
        notes = ["saving: the transposes' time, which channels_last removes"]
        if norm_half:
            notes.append(
                f"+ {norm_half:.1f} ms: the fp32 normalisation halved, which needs bf16 "
                "autocast too (TP311): NHWC batch norm halves in bf16, NCHW did not"
            )
        return [
            Finding(
                "TP312",
                evidence={
                    "layout_transpose_ms": r(m.layout_transpose_ms),
                    "layout_transpose_pct_of_gpu": r(100 * m.layout_transpose_ms / m.kernel_ms, 1),
                    "fp32_normalisation_ms": r(m.fp32_norm_ms),
                    "saving_transposes_ms": r(m.layout_transpose_ms),
                    "saving_normalisation_with_bf16_ms": r(norm_half),
                },
                saving_ms=saving,
                step_ms=profile.step_ms,
                cost="device",  # kernel time (doctor/pricing.py)
                knob="channels-last",
                detail=f"cuDNN's NCHW<->NHWC transposes take {m.layout_transpose_ms:.1f} ms "
                f"per step ({100 * m.layout_transpose_ms / m.kernel_ms:.0f}% of GPU time)",
                fix="model = model.to(memory_format=torch.channels_last) and "
                "x = x.to(device, memory_format=torch.channels_last), best with bf16 autocast",
                notes=notes,
            )
        ]
