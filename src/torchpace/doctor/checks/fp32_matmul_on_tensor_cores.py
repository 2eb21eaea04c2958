"""TP307 fp32-matmul-on-tensor-cores: Matmul/conv in fp32 on a tensor-core GPU."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class Fp32OnTensorCores(Check):
    """TP307: matmuls and convs run in fp32 on a GPU that has tensor cores.

    ## What it does

    On a GPU with tensor cores (compute capability 7.0 or newer), classifies the step's
    matrix-multiply and convolution kernels (cuBLAS, cuDNN, CUTLASS names) into tensor-core
    kernels (MMA shapes `884`/`1688`/`16816`, `hmma`, `wgmma`, `tensorop`, tf32/fp16/bf16 in the
    name) and plain fp32 ones (`sgemm`, `scudnn`, ...). Fires when matmul/conv kernels take at
    least 20% of the device time and most of that time is outside tensor cores. Where the trace
    has shapes, the input dtypes of the matmul/conv ops are listed.

    The fix it offers follows the GPU: on sm 7.x (V100, T4) fp16 autocast with `GradScaler`,
    since those tensor cores run neither bf16 nor TF32; from sm 8.0 bf16 autocast, or TF32
    matmuls (`torch.set_float32_matmul_precision('high')`, offered only when TF32 matmuls are
    not already on). Its tune knob is `amp`; TF32 is the `matmul-precision` knob.

    ## Why it matters

    Tensor cores run bf16/fp16 (and tf32 on sm80+) at 8-16× the fp32 peak. The doctor estimates
    the saving conservatively as half of the fp32 matmul/conv time (`EXPECTED_SPEEDUP = 2`),
    because memory-bound layers gain far less than the peak ratio. On the shared ResNet trace
    (V100) all 59.6 ms/step of matmul/conv ran as `volta_sgemm`/`scudnn`: an estimated 29.8
    ms/step (31%).

    ## Example

    ```python
    for x, y in loader:
        loss = loss_fn(model(x.cuda()), y.cuda())
        loss.backward()
    ```

    ## Use instead

    ```python
    # in the loop's body; fp16 with torch.amp.GradScaler before sm80
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x.cuda()), y.cuda())
    loss.backward()
    # or, keeping fp32 storage (sm80+): torch.set_float32_matmul_precision("high")  # TF32
    ```

    ## Fix safety

    Changes numerics: bf16 autocast is usually safe for training; fp16 needs `GradScaler`; some
    models need fp32 for specific layers (losses, softmax over large ranges). `torchpace tune`
    checks that the loss still behaves before keeping it.
    """

    code = "TP307"

    # Tensor cores exist from compute capability 7.0 (Volta) on, for fp16 only; bf16 and
    # TF32 from 8.0 (Ampere) on. The fix offers only what this GPU runs.
    MIN_CAPABILITY = (7, 0)
    BF16_TF32_CAPABILITY = (8, 0)
    # Matmul/conv kernels must be a real part of the device's time for precision to matter.
    MIN_MATMUL_SHARE = 0.20
    # A conservative end-to-end speed-up of matmul/conv kernels moved to tensor cores
    # (bf16/fp16 peak is 8-16x fp32; memory-bound layers gain far less).
    EXPECTED_SPEEDUP = 2.0

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile) or profile.capability is None:
            return []
        if profile.capability < self.MIN_CAPABILITY:
            return []
        matmul, tc = profile.median.matmul_ms, profile.median.matmul_tensor_core_ms
        kernel = profile.median.kernel_ms
        fp32 = matmul - tc
        if not kernel or matmul / kernel < self.MIN_MATMUL_SHARE or fp32 <= tc:
            return []
        saving = fp32 * (1 - 1 / self.EXPECTED_SPEEDUP)
        if not self.worth_reporting(profile, saving, "device"):
            return []
        evidence = {
            "matmul_conv_ms": r(matmul),
            "fp32_not_tensor_core_ms": r(fp32),
            "tensor_core_pct": r(100 * tc / matmul, 1),
            "compute_capability": ".".join(map(str, profile.capability)),
        }
        if profile.matmul_dtypes:
            evidence["matmul_input_dtypes"] = ", ".join(sorted(profile.matmul_dtypes))
        return [
            Finding(
                "TP307",
                evidence=evidence,
                saving_ms=saving,
                step_ms=profile.step_ms,
                cost="device",  # kernel time (doctor/pricing.py)
                knob="amp",
                detail=f"{100 * fp32 / matmul:.0f}% of matmul/conv time runs outside tensor cores",
                fix=self._fix(profile),
                notes=[f"saving assumes a {self.EXPECTED_SPEEDUP:g}x speed-up of those kernels"],
            )
        ]

    def _fix(self, profile: Profile) -> str:
        if profile.capability < self.BF16_TF32_CAPABILITY:
            return (
                "torch.autocast('cuda', dtype=torch.float16) around forward+loss, with "
                "torch.amp.GradScaler for backward and step (this GPU's tensor cores run fp16, "
                "not bf16 or TF32)"
            )
        fix = "torch.autocast('cuda', dtype=torch.bfloat16) around forward+loss"
        state = profile.process
        if state is None or not state.tf32_matmul:  # offered only where it is not on already
            fix += (
                ", or TF32 for the fp32 matmuls, keeping fp32 storage: "
                "torch.set_float32_matmul_precision('high') (`torchpace tune` knob "
                "matmul-precision)"
            )
        return fix
