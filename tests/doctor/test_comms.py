"""Communication read per collective kind and size (doctor/comms.py), and TP507: the host
blocked behind a collective, named by its record_function label."""

from __future__ import annotations

import pytest

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.comms import bus_factor, read_communication
from torchpace.trace.model import build_model, load_trace
from torchpace.trace.steps import derive_steps

MAIN = 1


def _x(name, cat, ts, dur, tid=MAIN, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}  # fmt: skip


def _step_events(step: int, t0: float, *, blocked: bool, label: str) -> list[dict]:
    """One 10 ms step: forward kernels, then an all-to-all of 4 MiB (float32, 8 ranks) whose
    output the host copies back with a blocking memcpy inside ``label``."""
    c = 100 * step  # correlation ids of this step
    ev = [
        _x(f"ProfilerStep#{step}", "user_annotation", t0, 10_000),
        _x("aten::mm", "cpu_op", t0 + 10, 50),
        _x("cudaLaunchKernel", "cuda_runtime", t0 + 20, 5, correlation=c + 1),
        _x("sgemm", "kernel", t0 + 30, 3_000, tid=7, device=0, stream=7, correlation=c + 1),
        _x(label, "user_annotation", t0 + 100, 9_000),
        _x("record_param_comms", "cpu_op", t0 + 200, 100, **{
            "Collective name": "all_to_all", "In msg nelems": 1 << 20,
            "Out msg nelems": 1 << 20, "dtype": "Float", "Group size": 8}),
        _x("cudaLaunchKernel", "cuda_runtime", t0 + 250, 5, correlation=c + 2),
        # the all-to-all runs 3.1-7.1 ms into the step, after the matmul: exposed
        _x("ncclDevKernel_SendRecv(ncclDevComm*)", "kernel", t0 + 3_100, 4_000, tid=7,
           device=0, stream=7, correlation=c + 2),
        _x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", t0 + 7_100, 50, tid=7, device=0,
           stream=7, correlation=c + 3, bytes=4096),
    ]  # fmt: skip
    if blocked:  # the host waits from 0.4 ms until the copy is done, behind the all-to-all
        ev.append(_x("cudaMemcpyAsync", "cuda_runtime", t0 + 300, 10, correlation=c + 3))
        ev.append(_x("cudaStreamSynchronize", "cuda_runtime", t0 + 400, 6_800))
    return ev


def _model(blocked=True, label="## sparse_data_dist ##"):
    events = [e for s in range(4) for e in _step_events(s, s * 10_000.0, blocked=blocked,
                                                        label=label)]  # fmt: skip
    devices = [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 80 << 30}]
    model = build_model(events, devices)
    return model.with_steps(derive_steps(model))


def test_bus_bandwidth_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor("all_gather", 4) == pytest.approx(3 / 4)
    assert bus_factor("all_to_all", 2) == pytest.approx(1 / 2)
    assert bus_factor("broadcast", None) == 1.0
    assert bus_factor("all_reduce", None) is None


def test_a_collective_row_has_its_size_bandwidths_and_exposed_time():
    comm = read_communication(_model())
    assert comm is not None
    [row] = comm.collectives
    assert (row.kind, row.size_bytes, row.ranks) == ("all_to_all", 4 << 20, 8)
    assert row.calls_per_step == 1 and row.ms_per_step == pytest.approx(4.0)
    # the matmul ends at 3.03 ms, the all-to-all starts at 3.1 ms: nothing overlaps it
    assert row.exposed_ms_per_step == pytest.approx(4.0)
    algbw = (4 << 20) / 4_000 / 1e3  # bytes / us / 1e3 = GB/s
    assert row.algbw_gbps == pytest.approx(algbw)
    assert row.busbw_gbps == pytest.approx(algbw * 7 / 8)
    assert comm.link == "H100 NVLink" and comm.link_peak_gbps == 450.0


def test_the_host_blocked_behind_the_all_to_all_is_named_by_its_label():
    d = diagnose(_model())
    comm = d.profile.communication
    [block] = comm.host_blocked
    assert block.label == "## sparse_data_dist ##"
    assert block.call == "cudaStreamSynchronize" and block.behind == "send_recv"
    # blocked 6.8 ms, 4.0 of them while the device only ran the all-to-all (TP506's exposed
    # communication): 2.8 ms are the host's own wait behind it
    assert block.ms_per_step == pytest.approx(2.8)
    tp507 = [f for f in d.findings if f.code == "TP507"]
    assert len(tp507) == 1
    assert tp507[0].location == "## sparse_data_dist ##"
    assert tp507[0].saving_ms == pytest.approx(2.8)


def test_interval_subtraction():
    from torchpace.doctor.comms import _subtract

    assert _subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert _subtract([(0, 1), (4, 6)], []) == [(0, 1), (4, 6)]
    assert _subtract([(0, 1)], [(0, 1)]) == []


def test_no_blocked_host_no_tp507():
    d = diagnose(_model(blocked=False))
    assert d.profile.communication.host_blocked == ()
    assert not [f for f in d.findings if f.code == "TP507"]


def test_a_trace_without_collectives_has_no_communication():
    events = [_x("ProfilerStep#0", "user_annotation", 0, 1000), _x("aten::mm", "cpu_op", 1, 5)]
    assert read_communication(build_model(events, [])) is None


def test_shared_nccl_trace_reads_sizes_from_record_param_comms(shared_traces):
    model = load_trace(shared_traces / "nccl_2rank_rank0.json.gz")
    comm = read_communication(model.with_steps(derive_steps(model)))
    kinds = {row.kind for row in comm.collectives}
    assert {"all_reduce", "broadcast"} <= kinds
    reduce_rows = [row for row in comm.collectives if row.kind == "all_reduce"]
    assert all(row.size_bytes and row.ranks == 2 for row in reduce_rows)
    # two ranks: an all-reduce's busbw equals its algbw (2(n-1)/n = 1)
    assert all(row.busbw_gbps == pytest.approx(row.algbw_gbps) for row in reduce_rows)
    # HTA's comm/comp overlap on this trace reads little overlap: most of it is exposed
    assert comm.exposed_ms_per_step > 0.7 * comm.ms_per_step
    assert comm.ms_per_step == pytest.approx(sum(row.ms_per_step for row in comm.collectives))


def test_exposed_communication_of_a_tenth_of_the_step_is_explained_whatever_its_gpu_share():
    """The recommender's case: NCCL a third of the GPU's busy time (below TP506's 50%), but
    28 of a 216 ms step exposed, 2% overlapped: the breakdown's row gets its finding."""
    from doctor_fakes import profile

    from torchpace.doctor.checks.environment import CommunicationBound

    metrics = dict(wall_ms=216.0, gpu_idle_ms=136.0, gpu_comm_ms=28.6, gpu_comm_alone_ms=28.0,
                   gpu_rank_wait_ms=0.0, gpu_compute_ms=52.0)  # fmt: skip
    [f] = CommunicationBound().run(profile(metrics, has_gpu=True))
    assert f.code == "TP506" and f.saving_ms == pytest.approx(28.0)
    assert f.evidence["comm_share_of_gpu_pct"] == 36 and f.evidence["overlap_pct"] == 2
    # overlapped well (half of it under compute): not reported however large
    metrics.update(gpu_comm_ms=56.0)
    assert CommunicationBound().run(profile(metrics, has_gpu=True)) == []


def _annotated_model(distributed: dict | None):
    """Two steps of one all-reduce of 8 MiB known only from the backend's ``nccl:`` annotation
    (no record_param_comms, so no Group size): busbw's n can only come from the trace's
    distributedInfo."""
    events = []
    for step in range(2):
        t0, c = step * 10_000.0, 100 * step
        events += [
            _x(f"ProfilerStep#{step}", "user_annotation", t0, 10_000),
            _x("nccl:all_reduce", "user_annotation", t0 + 100, 200,
               **{"Input Dims": [[1 << 21]], "Input type": ["float"]}),
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 150, 5, correlation=c + 1),
            _x("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "kernel", t0 + 300,
               2_000, tid=7, device=0, stream=7, correlation=c + 1),
        ]  # fmt: skip
    model = build_model(events, [], distributed=distributed)
    return model.with_steps(derive_steps(model))


def test_busbw_takes_the_world_size_from_distributed_info():
    [row] = read_communication(_annotated_model({"rank": 0, "world_size": 8})).collectives
    algbw = (8 << 20) / 2_000 / 1e3
    assert row.ranks == 8 and row.algbw_gbps == pytest.approx(algbw)
    assert row.busbw_gbps == pytest.approx(algbw * 2 * 7 / 8)
    # without it, n is unknown: no busbw rather than a guess
    [row] = read_communication(_annotated_model(None)).collectives
    assert row.ranks is None and row.busbw_gbps is None


def test_several_process_groups_leave_an_unnamed_collectives_group_unknown():
    groups = [{"pg_name": "0", "pg_size": 16}, {"pg_name": "3", "pg_size": 4}]
    info = {"rank": 0, "world_size": 16, "pg_config": groups}
    [row] = read_communication(_annotated_model(info)).collectives
    assert row.ranks is None  # which of the two groups ran it is not in the trace
    assert _annotated_model(info).distributed.group_size("3") == 4


def test_a_damaged_world_size_is_a_trace_error():
    from torchpace.trace.loader import TraceError

    with pytest.raises(TraceError, match="world_size"):
        build_model([], [], distributed={"rank": 0, "world_size": "eight"})


def test_shared_traces_carry_their_world_size(shared_traces):
    model = load_trace(shared_traces / "sampled_rank1.json.gz")
    assert (model.distributed.rank, model.distributed.world_size) == (1, 128)
    comm = read_communication(model.with_steps(derive_steps(model)))
    reduces = [row for row in comm.collectives if row.kind == "all_reduce"]
    assert reduces and all(row.ranks == 128 and row.busbw_gbps for row in reduces)
