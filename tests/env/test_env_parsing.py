"""The env parsers on injected text from other machines."""

from torchpace.env.cpu import CpuFacts, isas_from_flags, parse_cpuinfo, parse_lscpu
from torchpace.env.gpu import tensor_core_dtypes
from torchpace.env.process import (
    allocator_from_ld_preload,
    openmp_from_ld_preload,
    thread_env,
)

EPYC_AVX2_CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2 sha_ni vaes
physical id\t: 0
core id\t\t: 0

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx f16c fma avx2 bmi2 sha_ni vaes
physical id\t: 0
core id\t\t: 1
"""

# Two hyper-threads on each of two cores: 4 logical CPUs, 2 physical cores.
SAPPHIRE_RAPIDS_HT = "".join(
    f"processor\t: {i}\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    f"flags\t\t: avx2 avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n"
    f"physical id\t: 0\ncore id\t\t: {i // 2}\n\n"
    for i in range(4)
)

GRAVITON_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve bf16 i8mm

processor\t: 1
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve bf16 i8mm
"""

LSCPU = """\
Architecture:                            x86_64
CPU(s):                                  64
Model name:                              AMD EPYC 7763 64-Core Processor
Thread(s) per core:                      2
Core(s) per socket:                      16
Socket(s):                               2
NUMA node(s):                            4
Flags:                                   fpu avx avx2 fma
"""


def test_cpuinfo_epyc_is_avx2_without_bf16():
    info = parse_cpuinfo(EPYC_AVX2_CPUINFO)
    assert info["model"] == "AMD EPYC"
    assert info["logical_cpus"] == 2
    assert info["physical_cores"] == 2
    isas = isas_from_flags(info["flags"])
    assert isas == ("AVX2",)
    facts = CpuFacts("AMD EPYC", 2, 2, 2, 1, isas, "AVX2")
    assert facts.bf16_native is False


def test_cpuinfo_hyperthreads_count_physical_cores_once():
    info = parse_cpuinfo(SAPPHIRE_RAPIDS_HT)
    assert info["logical_cpus"] == 4
    assert info["physical_cores"] == 2
    isas = isas_from_flags(info["flags"])
    assert isas == (
        "AVX2",
        "AVX-512",
        "AVX512-VNNI",
        "AVX512-BF16",
        "AVX512-FP16",
        "AMX-BF16",
        "AMX-INT8",
    )
    assert CpuFacts(None, 4, 4, 2, 1, isas, None).bf16_native is True


def test_cpuinfo_aarch64_features_line():
    info = parse_cpuinfo(GRAVITON_CPUINFO)
    assert info["logical_cpus"] == 2
    assert info["physical_cores"] is None  # aarch64 cpuinfo has no core ids: not guessed
    assert isas_from_flags(info["flags"]) == ("NEON", "SVE", "ARM-BF16")


def test_unreadable_flags_are_unknown_not_false():
    assert CpuFacts(None, None, None, None, None, None, None).bf16_native is None


def test_lscpu_counts():
    ls = parse_lscpu(LSCPU)
    assert ls["model"] == "AMD EPYC 7763 64-Core Processor"
    assert ls["logical_cpus"] == 64
    assert ls["physical_cores"] == 32
    assert ls["numa_nodes"] == 4
    assert isas_from_flags(ls["flags"]) == ("AVX2",)


def test_lscpu_missing_fields_are_none():
    ls = parse_lscpu("Architecture: aarch64\nCPU(s): 8\n")
    assert ls["physical_cores"] is None and ls["numa_nodes"] is None


def test_ld_preload_allocators():
    assert allocator_from_ld_preload("") == "default"
    assert allocator_from_ld_preload("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2") == "jemalloc"
    assert (
        allocator_from_ld_preload("/opt/intel/libiomp5.so:/usr/lib/libtcmalloc_minimal.so.4")
        == "tcmalloc"
    )
    assert allocator_from_ld_preload("/usr/lib/libfoo.so /lib/libmimalloc.so") == "mimalloc"
    assert openmp_from_ld_preload("/opt/intel/libiomp5.so /lib/libjemalloc.so") == (
        "Intel OpenMP (libiomp5)"
    )
    assert openmp_from_ld_preload("/lib/libjemalloc.so") is None


def test_thread_env_keeps_only_threading_variables():
    env = {
        "OMP_NUM_THREADS": "4",
        "KMP_BLOCKTIME": "1",
        "PATH": "/bin",
        "MKL_NUM_THREADS": "2",
        "GOMP_CPU_AFFINITY": "0-3",
        "HOME": "/root",
    }
    assert thread_env(env) == {
        "GOMP_CPU_AFFINITY": "0-3",
        "KMP_BLOCKTIME": "1",
        "MKL_NUM_THREADS": "2",
        "OMP_NUM_THREADS": "4",
    }


def test_tensor_core_dtypes_by_capability():
    assert tensor_core_dtypes((6, 1)) == ()
    assert tensor_core_dtypes((7, 0)) == ("fp16",)
    assert tensor_core_dtypes((8, 0)) == ("fp16", "int8", "bf16", "tf32")
    assert tensor_core_dtypes((9, 0)) == ("fp16", "int8", "bf16", "tf32", "fp8")
    assert "fp4" in tensor_core_dtypes((10, 0))
