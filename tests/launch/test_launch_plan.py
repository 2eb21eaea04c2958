"""The plan per rank, on described machines: threads, disjoint core sets within NUMA
nodes, libraries only where installed, the user's variables kept."""

import pytest

from torchpace.launch.libraries import find_library, parse_ldconfig
from torchpace.launch.plan import JEMALLOC_CONF, plan_launch
from torchpace.launch.rank import rank_command
from torchpace.launch.topology import build_topology, format_cpulist, parse_cpulist


def two_socket_ht():
    """2 NUMA nodes x 8 cores x 2 hyperthreads: CPUs 0-7 and 16-23 on node 0, their
    siblings 8-15 / 24-31 ... laid out as Linux numbers them on a common Xeon."""
    cores = {}
    for cpu in range(32):
        package = 0 if cpu % 16 < 8 else 1
        cores[cpu] = (package, cpu % 8)
    nodes = {0: "0-7,16-23", 1: "8-15,24-31"}
    return build_topology(list(range(32)), nodes, cores)


def flat(n):
    return build_topology(list(range(n)), {0: f"0-{n - 1}"}, {c: (0, c) for c in range(n)})


def test_cpulists_read_and_written_as_the_kernel_does():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    with pytest.raises(ValueError, match="not a CPU list"):
        parse_cpulist("0-x")


def test_hyperthread_siblings_are_not_counted_as_cores():
    topo = two_socket_ht()
    assert topo.nodes == [0, 1]
    assert topo.physical_cores(0) == list(range(8))
    assert topo.physical_cores(1) == list(range(8, 16))
    assert len(topo.physical_cores()) == 16


def test_two_ranks_on_two_sockets_get_a_node_each():
    plan = plan_launch(2, two_socket_ht(), {}, {}, numactl="/usr/bin/numactl")
    assert plan.binder == "numactl"
    (a, b) = plan.ranks
    assert a.cpus == tuple(range(8)) and a.node == 0
    assert b.cpus == tuple(range(8, 16)) and b.node == 1
    assert a.env["OMP_NUM_THREADS"] == "8"
    assert b.prefix == ("/usr/bin/numactl", "--physcpubind=8-15", "--membind=1")


def test_four_ranks_split_each_node_without_crossing_it():
    plan = plan_launch(4, two_socket_ht(), {}, {}, numactl=None)
    assert plan.binder == "sched_setaffinity"
    assert [r.cpus for r in plan.ranks] == [
        (0, 1, 2, 3),
        (4, 5, 6, 7),
        (8, 9, 10, 11),
        (12, 13, 14, 15),
    ]
    assert all(r.prefix == () and r.env["OMP_NUM_THREADS"] == "4" for r in plan.ranks)
    assert len({c for r in plan.ranks for c in r.cpus}) == 16  # disjoint


def test_one_rank_spans_the_nodes_and_binds_no_memory():
    plan = plan_launch(1, two_socket_ht(), {}, {}, numactl="numactl")
    (only,) = plan.ranks
    assert len(only.cpus) == 16 and only.node is None
    assert only.prefix == ("numactl", "--physcpubind=0-15")


def test_uneven_split_leaves_the_remainder_idle_rather_than_unequal_ranks():
    plan = plan_launch(3, flat(8), {}, {}, numactl=None)
    assert [len(r.cpus) for r in plan.ranks] == [2, 2, 2]
    assert plan.ranks[0].env["OMP_NUM_THREADS"] == "2"


def test_variables_the_user_set_are_kept_and_said():
    environ = {"OMP_NUM_THREADS": "3", "LD_PRELOAD": "/opt/mine.so"}
    libs = {"jemalloc": "/usr/lib/libjemalloc.so.2"}
    plan = plan_launch(2, flat(8), libs, environ, numactl=None)
    for rank in plan.ranks:
        assert "OMP_NUM_THREADS" not in rank.env and "LD_PRELOAD" not in rank.env
        assert "MALLOC_CONF" not in rank.env  # only with the preload torchpace adds
    notes = "\n".join(plan.notes)
    assert "OMP_NUM_THREADS=3 kept" in notes and "would set 4" in notes
    assert "LD_PRELOAD=/opt/mine.so kept" in notes


def test_libraries_only_where_installed_tcmalloc_first_kmp_only_with_iomp():
    none = plan_launch(2, flat(4), {}, {}, numactl=None)
    assert "LD_PRELOAD" not in none.ranks[0].env and "KMP_BLOCKTIME" not in none.ranks[0].env
    assert any("no tcmalloc or jemalloc" in n for n in none.notes)

    both = {"tcmalloc": "/l/libtcmalloc.so", "jemalloc": "/l/libjemalloc.so"}
    env = plan_launch(2, flat(4), both, {}, numactl=None).ranks[0].env
    assert env["LD_PRELOAD"] == "/l/libtcmalloc.so" and "MALLOC_CONF" not in env

    je_iomp = {"jemalloc": "/l/libjemalloc.so.2", "iomp5": "/l/libiomp5.so"}
    env = plan_launch(2, flat(4), je_iomp, {}, numactl=None).ranks[1].env
    assert env["LD_PRELOAD"] == "/l/libjemalloc.so.2:/l/libiomp5.so"
    assert env["MALLOC_CONF"] == JEMALLOC_CONF
    assert env["KMP_BLOCKTIME"] == "1" and env["KMP_AFFINITY"].startswith("granularity=fine")


def test_more_processes_than_cores_is_said_and_nothing_is_bound():
    plan = plan_launch(3, flat(2), {}, {}, numactl="numactl")
    assert plan.binder == "none"
    assert all(r.cpus == () and r.prefix == () for r in plan.ranks)
    assert plan.ranks[0].env["OMP_NUM_THREADS"] == "1"
    assert any("3 processes on 2 physical cores" in n for n in plan.notes)


def test_binding_left_to_torchrun_when_asked():
    plan = plan_launch(2, flat(4), {}, {}, numactl="numactl", bind=False)
    assert plan.binder == "none" and plan.ranks[0].env["OMP_NUM_THREADS"] == "2"


def test_plan_travels_as_json_and_gives_each_rank_its_command():
    plan = plan_launch(2, two_socket_ht(), {}, {}, numactl="numactl")
    import json

    command, env = rank_command(json.loads(plan.to_json()), 1, ["python", "-u", "t.py"])
    assert command == ["numactl", "--physcpubind=8-15", "--membind=1", "python", "-u", "t.py"]
    assert env == {"OMP_NUM_THREADS": "8"}
    with pytest.raises(SystemExit, match="LOCAL_RANK=2 but the plan has 2 ranks"):
        rank_command(json.loads(plan.to_json()), 2, ["python"])


def test_libraries_found_versioned_in_folders_or_in_the_linker_cache(tmp_path):
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")
    (tmp_path / "libjemalloc_pic.a").write_bytes(b"")
    assert find_library("jemalloc", [tmp_path / "missing", tmp_path]) == str(
        tmp_path / "libjemalloc.so.2"
    )
    assert find_library("tcmalloc", [tmp_path]) is None
    lib = tmp_path / "libtcmalloc.so.4"
    lib.write_bytes(b"")
    cache = parse_ldconfig(
        f"3 libs found in cache\n\tlibtcmalloc.so.4 (libc6,x86-64) => {lib}\n"
        "\tlibtcmalloc_minimal.so.4 (libc6,x86-64) => /nowhere/libtcmalloc_minimal.so.4\n"
    )
    assert find_library("tcmalloc", [], cache) == str(lib)


def test_each_rank_captures_into_its_own_folder(tmp_path, monkeypatch):
    import json

    from torchpace.launch.rank import capture_command

    template = tmp_path / "capture_spec.json"
    template.write_text(json.dumps({"out_dir": str(tmp_path), "target": "t.py", "args": []}))
    monkeypatch.setenv("RANK", "3")
    command = capture_command(str(template), "python")
    spec = tmp_path / "rank3" / "capture_spec.json"
    assert command == ["python", "-m", "torchpace.capture.child", str(spec)]
    assert json.loads(spec.read_text())["out_dir"] == str(tmp_path / "rank3")
    assert json.loads(template.read_text())["out_dir"] == str(tmp_path)  # template untouched
