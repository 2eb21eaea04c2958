"""Precision (TP311) and layout (TP312) on a GPU, and DataParallel on one GPU (TP501).

The real case: pytorch/examples imagenet, ResNet-50, batch 128, one H100
(../shared/traces/h100_imagenet_resnet50.json.gz). Measured by hand on that machine in one
process: 70.9 ms/step as written; bf16 autocast 59.5; bf16 + channels_last 34.1. The
kernel sums pinned below were counted independently (zcat + awk over the raw events, five
steps): cuDNN layout transposes 9.0 ms/step, fp32 batch norm 24.4, fp32 elementwise 13.9,
TF32 convs/matmuls 19.8, of 70.0 ms of kernels.
"""

import pytest
from doctor_fakes import WrapperFacts, facts, process, profile

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.checks import compute, environment
from torchpace.doctor.gpu import kernel_stats
from torchpace.facts.run import CallFacts
from torchpace.trace import load_trace
from torchpace.trace.model import GpuOp

MEASURED_MS = {"as_written": 70.9, "bf16": 59.5, "bf16_channels_last": 34.1}
H100 = {"has_gpu": True, "capability": (9, 0)}


def within(estimate: float, measured: float, factor: float = 1.5) -> bool:
    return measured / factor <= estimate <= measured * factor


@pytest.fixture(scope="module")
def imagenet():
    from conftest import SHARED_TRACES

    path = SHARED_TRACES / "h100_imagenet_resnet50.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return diagnose(load_trace(path))


def test_imagenet_kernels_are_classified(imagenet):
    m = imagenet.profile.median
    assert m.layout_transpose_ms == pytest.approx(9.0, abs=0.3)
    assert m.fp32_norm_ms == pytest.approx(24.4, abs=0.5)
    assert m.fp32_elementwise_ms == pytest.approx(13.9, abs=0.5)
    assert m.matmul_tf32_ms == pytest.approx(19.8, abs=0.5)
    assert m.matmul_tf32_ms <= m.matmul_tensor_core_ms <= m.matmul_ms


def test_imagenet_first_findings_are_layout_then_precision(imagenet):
    codes = [f.code for f in imagenet.findings]
    assert codes[:2] == ["TP312", "TP311"]
    layout, precision = imagenet.findings[:2]
    assert layout.knob == "channels-last" and precision.knob == "amp"
    assert layout.severity == "high"
    # each estimate within 1.5x of the A/B measured by hand
    bf16_saving = MEASURED_MS["as_written"] - MEASURED_MS["bf16"]
    layout_on_bf16 = MEASURED_MS["bf16"] - MEASURED_MS["bf16_channels_last"]
    both = MEASURED_MS["as_written"] - MEASURED_MS["bf16_channels_last"]
    assert within(precision.saving_ms, bf16_saving)
    assert within(layout.saving_ms, layout_on_bf16)
    assert within(precision.saving_ms + layout.saving_ms, both, factor=1.1)
    # TF32 is not taken for the end of the road any more, nor fp32 outside tensor cores
    assert "TP307" not in codes


def gpu_kernel(name: str, dur_us: float) -> GpuOp:
    return GpuOp("kernel", name, 0.0, dur_us, 0, 7, None)


def test_kernel_names_are_told_apart():
    ops = [
        gpu_kernel("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc", 1000),
        gpu_kernel("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_256x64_16x4_nt>", 500),
        gpu_kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 300),
        gpu_kernel("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float>", 200),
        gpu_kernel("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 32>", 400),
        gpu_kernel("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__nv_bfloat16, float, int>", 99),
        gpu_kernel(
            "void at::native::vectorized_elementwise_kernel<4, BinaryFunctor<float, float, float>>",
            100,
        ),
        gpu_kernel(
            "void at::native::vectorized_elementwise_kernel<4, BinaryFunctor<c10::BFloat16"
            ", float>>",
            77,
        ),
        gpu_kernel(
            "void at::native::vectorized_elementwise_kernel<2, CUDAFunctorOnSelf_add<long>>", 55
        ),
        gpu_kernel(
            "void at::native::multi_tensor_apply_kernel<TensorListMetadata<2>, "
            "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>",
            33,
        ),
    ]
    k = kernel_stats(ops)
    assert k.matmul_tf32_ms == pytest.approx(1.5)
    assert k.matmul_tensor_core_ms == pytest.approx(1.8)
    assert k.layout_transpose_ms == pytest.approx(0.2)
    assert k.fp32_norm_ms == pytest.approx(0.4)
    assert k.fp32_elementwise_ms == pytest.approx(0.1)


PRECISION_STEP = {
    "wall_ms": 100.0,
    "kernel_ms": 95.0,
    "matmul_ms": 40.0,
    "matmul_tensor_core_ms": 40.0,
    "matmul_tf32_ms": 40.0,
    "fp32_norm_ms": 20.0,
    "fp32_elementwise_ms": 20.0,
}


def test_precision_counts_the_norm_half_without_transposes():
    (f,) = compute.ReducedPrecisionServes().run(profile(PRECISION_STEP, **H100))
    assert (f.code, f.knob) == ("TP311", "amp")
    assert f.saving_ms == pytest.approx(20 + 10 + 10)
    assert f.evidence["saving_fp32_norm_ms"] == 10.0


def test_precision_is_silent_where_it_cannot_apply():
    check = compute.ReducedPrecisionServes()
    assert check.run(profile(PRECISION_STEP, has_gpu=True, capability=(7, 0))) == []
    assert check.run(profile(PRECISION_STEP)) == []  # a CPU run
    bf16 = PRECISION_STEP | {"matmul_tf32_ms": 0.0, "fp32_norm_ms": 1.0, "fp32_elementwise_ms": 1}
    assert check.run(profile(bf16, **H100)) == []
    autocast = facts(proc=process())
    autocast.calls = CallFacts(autocast=True)
    assert check.run(profile(PRECISION_STEP, autocast, **H100)) == []


def test_layout_finding_takes_the_norm_half_with_transposes():
    step = PRECISION_STEP | {"layout_transpose_ms": 10.0}
    (layout,) = compute.LayoutTransposes().run(profile(step, **H100))
    (precision,) = compute.ReducedPrecisionServes().run(profile(step, **H100))
    assert (layout.code, layout.knob) == ("TP312", "channels-last")
    assert layout.saving_ms == pytest.approx(10 + 10)
    assert precision.saving_ms == pytest.approx(20 + 10)  # no norm half: it is TP312's
    # few transposes: no layout finding
    assert (
        compute.LayoutTransposes().run(profile(step | {"layout_transpose_ms": 2.0}, **H100)) == []
    )


def test_data_parallel_on_one_gpu_is_information():
    dp = [WrapperFacts("DataParallel", "main.py:150")]
    one = facts(proc=process(cuda_available=True, cuda_devices=1), wrappers=dp)
    (f,) = environment.DataParallelUsed().run(profile({"wall_ms": 70.0}, one))
    assert (f.severity, f.saving_ms) == ("low", 0.0)
    assert "several GPUs" in f.detail and f.evidence["visible_gpus"] == 1
    four = facts(proc=process(cuda_available=True, cuda_devices=4), wrappers=dp)
    (f,) = environment.DataParallelUsed().run(profile({"wall_ms": 70.0}, four))
    assert f.severity == "medium" and f.saving_ms is None
