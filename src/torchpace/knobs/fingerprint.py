"""The environment a configuration was measured on, and whether this one is the same.

A tuned configuration is a measurement: four DataLoader workers were fastest on *that*
machine, with *that* torch. Three facts decide whether the measurement still holds, and a
difference in any of them makes ``torchpace run`` and ``torchpace.apply()`` refuse (unless
forced):

- the device the model trains on: the GPU's name and compute capability, or, on a machine
  without CUDA, the CPU's model name;
- torch's major.minor version (kernels, the compiler and defaults change between minors;
  a patch release does not move them);
- the number of CPU cores this process may use (its affinity mask): workers and threads
  were chosen for that many.

The full torch version, Python's and the CUDA toolkit's are recorded too, for the reader;
they never cause a refusal.

Reading the current fingerprint imports torch (the GPU's name needs CUDA); the comparison
and the serialization do not.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass

# [environment] keys in torchpace.toml -> Fingerprint fields, in the order they are written.
KEYS = {
    "device": "device",
    "torch": "torch",
    "cores": "cores",
    "torch-version": "torch_version",
    "python": "python",
    "cuda": "cuda",
}
# The keys whose difference refuses a configuration; the rest are informative.
DECIDING = ("device", "torch", "cores")
KEY_TYPES = {
    "device": str,
    "torch": str,
    "cores": int,
    "torch-version": str,
    "python": str,
    "cuda": str,
}


@dataclass(frozen=True)
class Fingerprint:
    """None is a fact that was not recorded (or could not be read): it is not compared."""

    device: str | None  # "NVIDIA H100 80GB HBM3 (sm 9.0)" or "CPU AMD EPYC 7B13 64-Core ..."
    torch: str | None  # "2.14": major.minor
    cores: int | None  # usable CPU cores (the process's affinity mask)
    torch_version: str | None = None  # "2.14.0+cu128", informative
    python: str | None = None  # informative
    cuda: str | None = None  # the CUDA toolkit torch was built with, informative

    def to_table(self) -> dict:
        """The [environment] table, facts that are None left out (TOML has no null)."""
        table = {}
        for key, attr in KEYS.items():
            value = getattr(self, attr)
            if value is not None:
                table[key] = value
        return table

    @classmethod
    def from_table(cls, table: dict) -> Fingerprint:
        """From an [environment] table already checked by knobs/config.py."""
        return cls(**{attr: table.get(key) for key, attr in KEYS.items()})


def torch_minor(version: str) -> str | None:
    """'2.14.0+cu128' -> '2.14'."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux: all of them
        return os.cpu_count()


def cpu_model() -> str | None:
    from torchpace.env.cpu import parse_cpuinfo

    try:
        with open("/proc/cpuinfo") as f:
            model = parse_cpuinfo(f.read())["model"]
    except OSError:
        model = None
    if model is None:
        # lscpu, or the platform's own name for it (macOS, Windows)
        from torchpace.env.cpu import read_cpu_facts

        model = read_cpu_facts().model or platform.processor() or None
    return " ".join(model.split()) if model else None


def current() -> Fingerprint:
    """This process's fingerprint (imports torch; initializes CUDA when it is available)."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        device = f"{torch.cuda.get_device_name(0)} (sm {major}.{minor})"
    else:
        model = cpu_model()
        device = f"CPU {model}" if model else None
    return Fingerprint(
        device=device,
        torch=torch_minor(torch.__version__),
        cores=usable_cores(),
        torch_version=torch.__version__,
        python=platform.python_version(),
        cuda=torch.version.cuda,
    )


def compare(saved: Fingerprint, current: Fingerprint) -> list[str]:
    """The differences that make a saved configuration not apply here, one sentence each.

    A fact missing on either side is not a difference: nothing proves the machines differ.
    """
    out = []
    if saved.device and current.device and saved.device != current.device:
        out.append(f"device: tuned on {saved.device}, this is {current.device}")
    if saved.torch and current.torch and saved.torch != current.torch:
        out.append(f"torch: tuned with torch {saved.torch}, this is torch {current.torch}")
    if saved.cores is not None and current.cores is not None and saved.cores != current.cores:
        out.append(
            f"cores: tuned with {saved.cores} usable CPU cores, this process may use "
            f"{current.cores}"
        )
    return out
