"""The memory a process may really use on a CPU run: the least room left under the host's RAM,
its own RLIMIT_AS and RLIMIT_DATA (``ulimit -v`` / ``ulimit -d``, ``resource.setrlimit``) and
its cgroup's memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, a container's
``--memory``).

Each limit is read with what it counts at the moment, in its own terms: the address space
(VmSize) for RLIMIT_AS, the private writable mappings (VmData) for RLIMIT_DATA, the cgroup's
working set (usage minus inactive file cache) for a cgroup, the host's memory in use
(MemTotal - MemAvailable) for host RAM. The one that binds is the one with the least room
left, not the smallest: a 4 GiB RLIMIT_AS leaves less room to a torch process (3 GiB of
address space for its libraries) than a 3 GiB RLIMIT_DATA (0.8 GiB of data).

Plain text parsers (tests feed them other machines' files); nothing here imports torch.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path

# A limit at or above this is "no limit" (cgroup v1 writes 2^63 rounded to a page).
UNLIMITED = 2**60


@dataclass(frozen=True)
class MemoryLimit:
    kind: str  # "host RAM", "RLIMIT_AS", "RLIMIT_DATA", "cgroup memory.max", ...
    limit: int  # bytes
    used: int | None  # what the limit counts now, in bytes (see ``counts``)
    counts: str  # what ``used`` is

    @property
    def room(self) -> int:
        return self.limit - (self.used or 0)


def read_limits(proc: str = "/proc", self_dir: str = "/proc/self") -> list[MemoryLimit]:
    """Every memory limit this process lives under, with what each counts now."""
    status = _parse_status(_read(f"{self_dir}/status"))
    limits = []
    meminfo = _parse_status(_read(f"{proc}/meminfo"))
    if "MemTotal" in meminfo:
        total = meminfo["MemTotal"]
        available = meminfo.get("MemAvailable")
        used = total - available if available is not None else None
        counts = "the host's memory in use (MemTotal - MemAvailable)"
        limits.append(MemoryLimit("host RAM", total, used, counts))
    for kind, which, key, counts in (
        ("RLIMIT_AS", resource.RLIMIT_AS, "VmSize", "the process's address space (VmSize)"),
        ("RLIMIT_DATA", resource.RLIMIT_DATA, "VmData", "its private writable memory (VmData)"),
    ):
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY and 0 < soft < UNLIMITED:
            limits.append(MemoryLimit(kind, soft, status.get(key), counts))
    cgroup = cgroup_limit(_read(f"{self_dir}/cgroup"), _read(f"{self_dir}/mountinfo"))
    if cgroup is not None:
        limits.append(cgroup)
    return limits


def binding(limits: list[MemoryLimit]) -> MemoryLimit | None:
    """The limit with the least room left: the one an allocation would hit first."""
    return min(limits, key=lambda x: x.room, default=None)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _parse_status(text: str) -> dict[str, int]:
    """``/proc/self/status`` or ``/proc/meminfo``: "VmSize:  123 kB" -> {"VmSize": bytes}."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[key] = int(parts[0]) * 1024
    return out


def _stat(text: str) -> dict[str, int]:
    """A cgroup ``memory.stat``: "key value" lines."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _number(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None  # "max" (v2) is no limit


def cgroup_limit(cgroup: str, mountinfo: str) -> MemoryLimit | None:
    """The memory limit of this process's cgroup (v2, else v1), the least along its path up
    to the mount's root (a parent's limit binds its children), with its working set."""
    mounts = _cgroup_mounts(mountinfo)
    for line in cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "" and "cgroup2" in mounts:
            found = _walk(mounts["cgroup2"], path, _v2_limit)
            if found is not None:
                return found
        elif "memory" in controllers.split(",") and "memory" in mounts:
            found = _walk(mounts["memory"], path, _v1_limit)
            if found is not None:
                return found
    return None


def _cgroup_mounts(mountinfo: str) -> dict[str, tuple[str, str]]:
    """{"cgroup2" | "memory": (the mount's root in the hierarchy, its mount point)}."""
    mounts = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 3 or dash < 5:
            continue
        root, point, fstype = fields[3], fields[4], fields[dash + 1]
        options = fields[dash + 3].split(",") if len(fields) > dash + 3 else []
        if fstype == "cgroup2":
            mounts.setdefault("cgroup2", (root, point))
        elif fstype == "cgroup" and "memory" in options:
            mounts.setdefault("memory", (root, point))
    return mounts


def _walk(mount: tuple[str, str], path: str, read) -> MemoryLimit | None:
    """The least limit from the process's cgroup folder up to the mount point."""
    root, point = mount
    relative = path
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        relative = path[len(root) :]
    folder = Path(point) / relative.lstrip("/")
    if not folder.is_dir():  # a cgroup namespace, or a mount of the process's own cgroup
        folder = Path(point)
    best = None
    while True:
        found = read(folder)
        if found is not None and (best is None or found.limit < best.limit):
            best = found
        if folder == Path(point) or folder.parent == folder:
            return best
        folder = folder.parent


def _v2_limit(folder: Path) -> MemoryLimit | None:
    limit = _number(_read(str(folder / "memory.max")))
    if limit is None or limit >= UNLIMITED:
        return None
    current = _number(_read(str(folder / "memory.current")))
    inactive = _stat(_read(str(folder / "memory.stat"))).get("inactive_file", 0)
    used = current - inactive if current is not None else None
    return MemoryLimit("cgroup memory.max", limit, used, _WORKING_SET)


def _v1_limit(folder: Path) -> MemoryLimit | None:
    stat = _stat(_read(str(folder / "memory.stat")))
    limit = _number(_read(str(folder / "memory.limit_in_bytes")))
    if limit is None or limit >= UNLIMITED:
        return None
    usage = _number(_read(str(folder / "memory.usage_in_bytes")))
    inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
    used = usage - inactive if usage is not None else None
    return MemoryLimit("cgroup memory.limit_in_bytes", limit, used, _WORKING_SET)


_WORKING_SET = "the cgroup's working set (usage minus inactive file cache), every process in it"
