"""Find the shared libraries a launch may preload: an allocator (tcmalloc, jemalloc) and
Intel OpenMP (libiomp5). None is assumed: a library is used only where a file for it is
installed, and the search says where it looked.

The places are those of torch's own CPU launcher (torch.backends.xeon.run_cpu): the conda
and virtual environments, this Python's prefix, ~/.local/lib and the system library
folders, plus what the dynamic linker's cache (`ldconfig -p`) knows.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# The library name -> what the report calls it. Preference order for the allocator is
# torch's launcher's: tcmalloc first, then jemalloc.
ALLOCATOR_LIBRARIES = ("tcmalloc", "jemalloc")
OPENMP_LIBRARY = "iomp5"


def search_dirs(environ: dict[str, str]) -> list[Path]:
    dirs = [
        environ.get("CONDA_PREFIX", ""),
        environ.get("VIRTUAL_ENV", ""),
        sys.prefix,
        sys.base_prefix,
    ]
    out = [Path(d) / "lib" for d in dirs if d]
    out += [Path.home() / ".local" / "lib"]
    out += [Path(d) for d in ("/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib64")]
    out += sorted(Path("/usr/lib").glob("*-linux-gnu"))  # Debian's multiarch folders
    seen: set[Path] = set()
    return [d for d in out if not (d in seen or seen.add(d))]


def parse_ldconfig(text: str) -> dict[str, str]:
    """`ldconfig -p` lines (``libjemalloc.so.2 (libc6,x86-64) => /usr/lib/.../libjemalloc.so.2``)
    into file name -> path."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, path = line.strip().partition(" => ")
        if sep:
            found.setdefault(name.split(" (")[0], path.strip())
    return found


def _ldconfig_text() -> str:
    ldconfig = shutil.which("ldconfig") or (
        "/sbin/ldconfig" if Path("/sbin/ldconfig").exists() else None
    )
    if ldconfig is None:
        return ""
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout if out.returncode == 0 else ""


def find_library(name: str, dirs: list[Path], ldconfig: dict[str, str] | None = None) -> str | None:
    """The path of ``lib<name>.so`` or a versioned ``lib<name>.so.N`` (distributions ship
    only the versioned file without their -dev package), first in ``dirs``, then in the
    linker's cache."""
    pattern = re.compile(rf"^lib{re.escape(name)}\.so(\.\d+)*$")
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for file in names:
            if pattern.match(file) and (d / file).is_file():
                return str(d / file)
    for file, path in sorted((ldconfig or {}).items()):
        if pattern.match(file) and Path(path).is_file():
            return path
    return None


def find_installed(environ: dict[str, str]) -> dict[str, str]:
    """Library name -> path, for each of tcmalloc, jemalloc, iomp5 found on this machine."""
    dirs = search_dirs(environ)
    cache = parse_ldconfig(_ldconfig_text())
    found = {}
    for name in (*ALLOCATOR_LIBRARIES, OPENMP_LIBRARY):
        path = find_library(name, dirs, cache)
        if path is not None:
            found[name] = path
    return found
