"""The memory a CPU process may use: host RAM, RLIMIT_AS, RLIMIT_DATA and the cgroup's limit,
each with what it counts; the one with the least room binds. Parsers on other machines'
files; the rlimits read in a child process that really runs under them."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

from conftest import ROOT

from torchpace.capture.memory_limits import (
    MemoryLimit,
    _parse_status,
    binding,
    cgroup_limit,
    read_limits,
)

GIB = 2**30
MIB = 2**20


def test_status_and_meminfo_are_read_in_bytes():
    status = "Name:\tpython\nVmPeak:\t 3080000 kB\nVmSize:\t 3000000 kB\nVmData:\t  760000 kB\n"
    assert _parse_status(status) == {
        "VmPeak": 3080000 * 1024,
        "VmSize": 3000000 * 1024,
        "VmData": 760000 * 1024,
    }


def test_the_limit_with_the_least_room_binds_not_the_smallest():
    # a torch process: 3 GiB of address space, 0.8 GiB of data
    space = MemoryLimit("RLIMIT_AS", 4 * GIB, 3 * GIB, "")
    data = MemoryLimit("RLIMIT_DATA", 3 * GIB, int(0.8 * GIB), "")
    ram = MemoryLimit("host RAM", 24 * GIB, 2 * GIB, "")
    assert binding([ram, data, space]) is space  # 1 GiB of room, under the larger limit
    assert binding([ram, data]) is data
    assert binding([]) is None


def _cgroup_v2(root, limit="2147483648"):
    folder = root / "sys" / "fs" / "cgroup" / "job.slice" / "train"
    folder.mkdir(parents=True)
    (folder / "memory.max").write_text(limit + "\n")
    (folder / "memory.current").write_text(str(900 * MIB))
    (folder / "memory.stat").write_text(f"anon {600 * MIB}\ninactive_file {100 * MIB}\n")
    (folder.parent / "memory.max").write_text("max\n")
    mountinfo = f"41 31 0:38 / {root}/sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"
    return "0::/job.slice/train\n", mountinfo


def test_cgroup_v2_memory_max_with_its_working_set(tmp_path):
    cgroup, mountinfo = _cgroup_v2(tmp_path)
    found = cgroup_limit(cgroup, mountinfo)
    assert found == MemoryLimit(
        "cgroup memory.max", 2 * GIB, 800 * MIB, found.counts
    )  # usage less the inactive file cache
    assert "working set" in found.counts


def test_cgroup_v2_unlimited_and_a_parent_limit(tmp_path):
    cgroup, mountinfo = _cgroup_v2(tmp_path, limit="max")
    assert cgroup_limit(cgroup, mountinfo) is None
    # a parent's limit binds its children
    parent = tmp_path / "sys" / "fs" / "cgroup" / "job.slice"
    (parent / "memory.max").write_text(str(GIB))
    assert cgroup_limit(cgroup, mountinfo).limit == GIB


def test_cgroup_v1_limit_in_bytes(tmp_path):
    folder = tmp_path / "memory" / "docker" / "abc"
    folder.mkdir(parents=True)
    (folder / "memory.limit_in_bytes").write_text(str(4 * GIB))
    (folder / "memory.usage_in_bytes").write_text(str(GIB))
    (folder / "memory.stat").write_text(f"cache 0\ntotal_inactive_file {256 * MIB}\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")
    mountinfo = (
        f"31 23 0:28 / {tmp_path} rw - tmpfs tmpfs rw\n"
        f"35 31 0:32 / {tmp_path}/memory rw,relatime - cgroup cgroup rw,memory\n"
    )
    cgroup = "5:devices:/docker/abc\n4:memory:/docker/abc\n0::/\n"
    found = cgroup_limit(cgroup, mountinfo)
    assert (found.kind, found.limit, found.used) == (
        "cgroup memory.limit_in_bytes",
        4 * GIB,
        GIB - 256 * MIB,
    )
    # inside a container the mount is the container's own cgroup: /docker/abc is not there
    inside = f"35 31 0:32 /docker/abc {folder} rw,relatime - cgroup cgroup rw,memory\n"
    assert cgroup_limit(cgroup, inside).limit == 4 * GIB
    # no limit set (the root's 2^63)
    assert cgroup_limit("4:memory:/\n", mountinfo) is None


def test_this_process_has_host_ram_and_only_the_rlimits_it_has():
    kinds = {x.kind: x for x in read_limits()}
    ram = kinds["host RAM"]
    assert ram.limit > 0 and 0 < ram.used < ram.limit
    for name in ("RLIMIT_AS", "RLIMIT_DATA"):
        unlimited = resource.getrlimit(getattr(resource, name))[0] == resource.RLIM_INFINITY
        assert (name in kinds) is not unlimited


def _limits_in_a_child(which: str, room_mib: int) -> list[dict]:
    """A python child that caps itself (``which``: AS or DATA) at what it uses plus room,
    then reads its limits as the capture would."""
    code = f"""
import dataclasses, json, resource
import torch  # a torch process: gigabytes of address space, hundreds of MiB of data
from torchpace.capture.memory_limits import _parse_status, read_limits, binding
key = {{"AS": "VmSize", "DATA": "VmData"}}["{which}"]
used = _parse_status(open("/proc/self/status").read())[key]
resource.setrlimit(resource.RLIMIT_{which}, (used + {room_mib} * 2**20, resource.RLIM_INFINITY))
limits = read_limits()
print(json.dumps([dataclasses.asdict(x) for x in limits] + [binding(limits).kind]))
"""
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout)


def test_rlimit_as_and_rlimit_data_read_in_a_capped_child():
    for which, key in (("AS", "RLIMIT_AS"), ("DATA", "RLIMIT_DATA")):
        *limits, bound = _limits_in_a_child(which, 200)
        assert bound == key
        capped = next(x for x in limits if x["kind"] == key)
        room = capped["limit"] - capped["used"]
        assert 150 * MIB < room <= 200 * MIB, (key, room / MIB)  # a little used since
