"""TP106 float-input-transfer: Inputs converted to float before the copy."""

from __future__ import annotations

from torchpace.doctor.checks._data import MIB, _device_transforms_apply
from torchpace.doctor.checks.base import Check, gpu_run, main_loader, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class FloatInputTransfer(Check):
    """TP106: float32 batches of shape (N, 1|3, H, W) copied to the device every step.

    It claims only what its evidence shows. With evidence that the floats came from 8-bit
    images (the loader's transform or ``__getitem__`` converts them, or the first batch's
    values lie on a k/255 grid: capture/batch_origin.py), the fix is to copy uint8 and
    convert on the device: a quarter of the bytes. Without it the floats may be data that is
    float by nature: the finding then speaks of the bytes on the bus and of halving them
    (fp16/bf16 on the host), never of images or uint8.

    ## What it does

    Reports host-to-device copies of float32 batches shaped `(N, 1 or 3, H, W)`, at least 1 MiB
    per step, on GPU runs (shape and dtype from the `aten::to` op that issued each copy in the
    trace, recorded with shapes), when the estimated saving clears the doctor's floors (0.5 ms
    and 2% of the step).

    **It claims only what its evidence shows.** A float32 tensor of that shape may be an image
    converted on the host, or data that is float by nature (audio features, simulated fields).
    The capture looks for evidence of an 8-bit origin (`capture/batch_origin.py`, recorded as
    the loader's `uint8_evidence`):

    - the dataset's transform has `ToTensor`, `ConvertImageDtype` or v2
      `ToDtype`/`ToImageTensor`;
    - its `__getitem__` source divides by 255 (`/ 255`, `div(255)`, `* (1/255)`);
    - the first batch's values lie on at most 256 evenly spaced levels per channel: `k/255`
      after any per-channel affine map such as `Normalize` (checked on up to 65,536 values per
      channel; float data by nature has far more levels).

    With such evidence: "float32 **images**", the fix is uint8 on the bus and the conversion on
    the device, the saving 75% of the copy time, and the knob `device-transforms` when the
    loader has a torchvision transform. Without it: "float32 **bytes** on the bus", the fix is
    to send half the bytes (bf16/fp16 on the host, back to float32 on the device) where the
    values allow, the saving 50% of the copy time, no uint8 and no knob. The pageable-copy
    finding (TP102) ranks first whenever it is estimated to cost more, as it did on an H100 job
    with 192 MiB of float32 data per step (measured: pinned memory with `non_blocking` 20%
    faster; fp16 on the host 7%).

    ## Why it matters

    uint8 pixels are a quarter of the bytes of float32: the copy shrinks by 75%, and the CPU
    skips the per-pixel float conversion and normalisation, which then run on the GPU in
    microseconds. Article 002 measured this as a separate step of its optimisation ladder.

    ## Example

    ```python
    transform = T.Compose([T.ToTensor(), T.Normalize(mean, std)])   # float32 on the CPU
    for x, y in loader:
        x = x.to("cuda")
    ```

    ## Use instead

    ```python
    transform = T.PILToTensor()                                      # uint8 on the CPU
    mean = torch.tensor(mean, device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor(std, device="cuda").view(1, 3, 1, 1) * 255
    for x, y in loader:
        x = (x.to("cuda", non_blocking=True).float() - mean) / std
    ```

    ## Fix safety

    Manual: the transform must be split into a host part (decode, crop, flip) and a device part
    (convert, normalise), and random augmentations that need float math must move too. The
    estimated saving counts only the smaller copy.
    """

    code = "TP106"

    # uint8 is a quarter of float32: the copy shrinks by this share...
    UINT8_SHRINK = 0.75
    # ...and fp16/bf16 half of it.
    HALF_SHRINK = 0.5
    MIN_BYTES = 1 * MIB  # per step; below it the copy is not worth reshaping the transform

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        nbytes = profile.median.float_image_h2d_bytes
        copy_ms = profile.median.float_image_h2d_ms
        if nbytes < self.MIN_BYTES:
            return []
        loader = main_loader(profile)
        origin = loader.uint8_evidence if loader is not None else None
        if origin:
            saving = copy_ms * self.UINT8_SHRINK
            detail = f"{nbytes / MIB:.1f} MiB of float32 images per step cross the bus"
            fix = (
                "return uint8 tensors from the dataset (no ToTensor/Normalize there), copy "
                "them, then x = x.to(device, non_blocking=True).float().div_(255) and "
                "normalise on the device"
            )
            notes = [
                f"8-bit origin: {origin}",
                "saving counts only the smaller copy; the host also skips the float math",
            ]
        else:
            saving = copy_ms * self.HALF_SHRINK
            detail = f"{nbytes / MIB:.1f} MiB of float32 per step cross the bus"
            fix = (
                "send half the bytes: cast the batch to bfloat16/float16 on the host (or in "
                "the dataset) and back to float32 on the device, if its values allow; pin "
                "the memory first when the copy is pageable (TP102)"
            )
            notes = [
                "no evidence that these floats came from 8-bit images (no ToTensor or /255 "
                "in the loader, values not on a k/255 grid): uint8 is not offered",
                "saving: half the copy time (half the bytes)",
            ]
        if not self.worth_reporting(profile, saving, "device"):
            return []
        evidence = {"float32_h2d_mib_per_step": r(nbytes / MIB), "copy_ms": r(copy_ms)}
        if origin:
            evidence["uint8_origin"] = origin
        common = dict(
            evidence=evidence,
            saving_ms=saving,
            step_ms=profile.step_ms,
            cost="device",  # the copy's time (doctor/pricing.py)
            location=loader.location if loader else None,
            detail=detail,
            fix=fix,
            notes=notes,
        )
        if origin and _device_transforms_apply(loader):
            return [Finding("TP106", knob="device-transforms", **common)]
        return [Finding("TP106", **common)]
