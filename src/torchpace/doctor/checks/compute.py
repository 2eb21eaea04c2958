"""Compute and precision: TP304 (debug APIs), TP307 (fp32 on tensor cores), TP308 (cudnn
benchmark), TP310 (launch-bound eager), TP311 (fp32/TF32 where bf16 serves), TP312 (layout
transposes around NCHW convs), TP313 (launch-bound optimizer step)."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


def probe_saving(profile: Profile, name: str):
    """(saving ms, probe) from the capture's A/B probe of that name, or (None, None)."""
    for probe in profile.facts.probes if profile.facts else []:
        if probe.name == name:
            return max(0.0, probe.baseline_ms - probe.probe_ms), probe
    return None, None


class AnomalyDetectionOn(Check):
    """TP304: torch.autograd anomaly detection left on in a training run."""

    def run(self, profile: Profile) -> list[Finding]:
        state = profile.process
        if state is None or not state.anomaly_detection:
            return []
        saving, probe = probe_saving(profile, "anomaly-detection-off")
        evidence: dict = {"anomaly_detection": "on"}
        if probe is not None:
            evidence |= {
                "step_ms_on": r(probe.baseline_ms),
                "step_ms_off": r(probe.probe_ms),
                "probe_steps": probe.steps,
            }
        return [
            Finding(
                "TP304",
                evidence=evidence,
                saving_ms=saving,
                step_ms=probe.baseline_ms if probe else profile.step_ms,
                severity=None if saving is not None else "medium",
                knob="anomaly-detection-off",
                detail="torch.autograd.set_detect_anomaly(True) records a traceback for every "
                "op and checks every gradient for NaN",
                fix="remove set_detect_anomaly(True) / detect_anomaly() from the training run; "
                "turn it on only while hunting a NaN",
                notes=["saving measured by switching it off for a few steps in the window"]
                if probe
                else ["no A/B probe ran: the saving is not estimated"],
            )
        ]


class Fp32OnTensorCores(Check):
    """TP307: matmuls and convs run in fp32 on a GPU that has tensor cores."""

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
        if not self.worth_reporting(profile, saving):
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


class CudnnBenchmarkOff(Check):
    """TP308: convolutions on CUDA with torch.backends.cudnn.benchmark off."""

    def run(self, profile: Profile) -> list[Finding]:
        state = profile.process
        if state is None or state.cudnn_benchmark is not False or state.cudnn_deterministic:
            return []
        if not gpu_run(profile) or not profile.has_convs:
            return []
        return [
            Finding(
                "TP308",
                evidence={
                    "cudnn_benchmark": "off",
                    "conv_kernels_per_step": r(profile.median.conv_kernels, 0),
                },
                severity="low",
                knob="cudnn-benchmark",
                detail="cuDNN picks conv algorithms by heuristics instead of timing them",
                fix="torch.backends.cudnn.benchmark = True when input shapes are fixed",
                notes=[
                    "the saving is not estimated: `torchpace tune` measures it; it re-tunes "
                    "on every new input shape"
                ],
            )
        ]


class LaunchBoundEager(Check):
    """TP310: many tiny kernels/ops whose launch overhead outweighs their work."""

    # GPU: at least this many kernels per step, most of them tiny, before calling it
    # launch-bound; a ResNet step is ~900 kernels with a third tiny and is not.
    MIN_KERNELS = 300
    MIN_TINY_KERNEL_SHARE = 0.6
    # CPU: tiny top-level ops (see steps.TINY_CPU_OP_US) taking this share of the step.
    MIN_TINY_CPU_SHARE = 0.30
    MIN_TINY_CPU_OPS = 100
    # Share of tiny ops' time torch.compile removes by fusing them (dispatch and memory
    # round-trips go, the arithmetic stays).
    FUSION_RECOVERABLE = 0.5

    def run(self, profile: Profile) -> list[Finding]:
        step = profile.step_ms
        if not step:
            return []
        if gpu_run(profile):
            kernels, tiny = profile.median.kernels, profile.median.tiny_kernels
            saving = profile.median.launch_gap_ms
            if kernels < self.MIN_KERNELS or tiny / kernels < self.MIN_TINY_KERNEL_SHARE:
                return []
            evidence = {
                "kernels_per_step": r(kernels, 0),
                "tiny_kernel_pct": r(100 * tiny / kernels, 1),
                "launch_gaps_ms": r(saving),
            }
        else:
            ops, tiny_ms = profile.median.tiny_cpu_ops, profile.median.tiny_cpu_ops_ms
            if ops < self.MIN_TINY_CPU_OPS or tiny_ms / step < self.MIN_TINY_CPU_SHARE:
                return []
            saving = tiny_ms * self.FUSION_RECOVERABLE
            evidence = {"tiny_ops_per_step": r(ops, 0), "tiny_ops_ms": r(tiny_ms)}
        if not self.worth_reporting(profile, saving):
            return []
        return [
            Finding(
                "TP310",
                evidence=evidence,
                saving_ms=saving,
                step_ms=step,
                knob="compile",
                detail="the step is made of many tiny ops: launch/dispatch overhead dominates",
                fix="model = torch.compile(model) (pays back its compile time within a few "
                "hundred steps when shapes are fixed)",
            )
        ]


# On sm80+ the bf16/fp16 tensor-core rate is twice the TF32 one, and a bf16 tensor is half
# the bytes of an fp32 one: both parts of the precision gain are this factor.
BF16_SPEEDUP = 2.0
BF16_CAPABILITY = (8, 0)


def precision_parts(profile: Profile) -> dict[str, float]:
    """What bf16 autocast saves per step, by part, estimated from the kernels (ms):
    TF32 matmuls at twice the rate; fp32 elementwise traffic halved; fp32 normalisation
    halved, but only where the convs take NHWC tensors: with layout transposes in the step
    (NCHW convs) that part comes with channels_last (TP312), not with autocast alone."""
    m = profile.median
    keep = 1 - 1 / BF16_SPEEDUP
    parts = {
        "tf32_matmul": m.matmul_tf32_ms * keep,
        "fp32_elementwise": m.fp32_elementwise_ms * keep,
        "fp32_norm": m.fp32_norm_ms * keep,
    }
    if m.layout_transpose_ms > 0:
        parts["fp32_norm"] = 0.0
    return parts


class ReducedPrecisionServes(Check):
    """TP311: an sm80+ GPU trains in fp32/TF32 where bf16 autocast serves.

    TF32 is a tensor-core format, so TP307 (fp32 outside tensor cores) stays silent on it;
    yet on sm80+ bf16 runs matmuls at twice the TF32 rate, and the fp32 normalisation and
    elementwise kernels around them move twice the bytes they would in bf16.
    """

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
        if not self.worth_reporting(profile, saving):
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
                knob="amp",
                detail=f"{100 * fp32_ms / m.kernel_ms:.0f}% of GPU time is TF32 matmul/conv "
                "and fp32 normalisation/elementwise work that bf16 halves",
                fix="torch.autocast('cuda', dtype=torch.bfloat16) around forward + loss (no "
                "GradScaler needed with bf16)",
                notes=notes,
            )
        ]


class LayoutTransposes(Check):
    """TP312: cuDNN transposes NCHW tensors to NHWC and back around each conv."""

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
        if not self.worth_reporting(profile, saving):
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
                knob="channels-last",
                detail=f"cuDNN's NCHW<->NHWC transposes take {m.layout_transpose_ms:.1f} ms "
                f"per step ({100 * m.layout_transpose_ms / m.kernel_ms:.0f}% of GPU time)",
                fix="model = model.to(memory_format=torch.channels_last) and "
                "x = x.to(device, memory_format=torch.channels_last), best with bf16 autocast",
                notes=notes,
            )
        ]


class LaunchBoundOptimizer(Check):
    """TP313: the optimizer step launches many small kernels and its phase is bound by the
    launches, not by the device: a fused (or multi-tensor) implementation does the same
    update in a few kernels.

    The saving is the optimizer phase's host time above its device time: once fused, the
    update is bound by its memory traffic, which the present kernels already do no faster.
    """

    MIN_PHASE_SHARE = 0.10  # the optimizer's share of the step
    # per step: a fused update is one or two kernels per device and dtype; a foreach one
    # (torch's default on CUDA) a handful per parameter group, whose Python still costs
    MIN_KERNELS = 5
    # The device is busy less than this share of the phase: the host's launches pace it.
    MAX_BUSY_SHARE = 0.5
    # torch's optimizers with a fused CUDA implementation, and with a foreach one (as in
    # tune's fused-optimizer knob); another optimizer (Shampoo, an EMA wrapper) has neither
    FUSED = ("SGD", "Adam", "AdamW", "Adagrad")
    FOREACH = (*FUSED, "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop")

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile) or not profile.step_ms:
            return []
        m = profile.median
        phase, busy = m.optimizer_ms, m.optimizer_kernel_ms
        if phase / profile.step_ms < self.MIN_PHASE_SHARE:
            return []
        if m.optimizer_kernels < self.MIN_KERNELS:
            return []
        if busy >= self.MAX_BUSY_SHARE * phase:
            return []
        details = profile.facts.optimizer_details if profile.facts else []
        if any(o.fused for o in details):
            return []  # already fused
        saving = phase - busy
        if not self.worth_reporting(profile, saving):
            return []
        seen = profile.facts.optimizers if profile.facts else profile.optimizer_classes
        names = sorted({o.class_name for o in details} or set(seen))
        if not names or not all(n in self.FOREACH for n in names):
            return []  # not torch's own optimizers: no fused or foreach switch to offer
        evidence = {
            "optimizer_ms": r(phase),
            "optimizer_pct_of_step": r(100 * phase / profile.step_ms, 1),
            "optimizer_kernels_per_step": r(m.optimizer_kernels, 0),
            "optimizer_gpu_busy_ms": r(busy),
        }
        evidence["optimizers"] = ", ".join(names)
        fusable = any(n in self.FUSED for n in names)
        fix = (
            "torch.optim.Adam(..., fused=True) (also SGD, AdamW, Adagrad): one kernel per "
            "device and dtype for the whole update"
            if fusable
            else "foreach=True on the optimizer (multi-tensor kernels), or torch.compile the "
            "optimizer step"
        )
        return [
            Finding(
                "TP313",
                evidence=evidence,
                saving_ms=saving,
                step_ms=profile.step_ms,
                location=details[0].location if details else None,
                knob="fused-optimizer",
                detail=f"the optimizer step takes {100 * phase / profile.step_ms:.0f}% of the "
                f"step launching {m.optimizer_kernels:.0f} kernels that keep the GPU busy "
                f"{busy:.1f} of its {phase:.1f} ms",
                fix=fix,
                notes=[
                    "saving: the optimizer phase's time above its kernels' busy time (a fused "
                    "update is bound by its memory traffic, which these kernels already move)"
                ],
            )
        ]


CHECKS = [
    AnomalyDetectionOn(),
    Fp32OnTensorCores(),
    CudnnBenchmarkOff(),
    LaunchBoundEager(),
    ReducedPrecisionServes(),
    LayoutTransposes(),
    LaunchBoundOptimizer(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
