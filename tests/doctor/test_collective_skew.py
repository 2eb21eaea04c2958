"""The collectives' wait for the last rank apart from the transfer (doctor/skew.py), on
generated per-rank GPU traces whose clocks are offset from one another as traces of
different hosts are."""

from __future__ import annotations

import gzip
import json

import pytest

from torchpace.cli import main
from torchpace.doctor.ranks import cross_rank_findings
from torchpace.doctor.skew import collective_skew, rank_collectives
from torchpace.trace.model import build_model
from torchpace.trace.steps import derive_steps

STEP_US = 20_000.0
TRANSFER_US = 2_000.0  # the all-reduce's own time, once every rank has arrived
BROADCAST_US = 300.0


def _x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": args}  # fmt: skip


def rank_events(rank: int, work_us, offset_us: float = 0.0) -> list[dict]:
    """One rank's steps: its own compute for ``work_us[rank][step]``, then one all-reduce of
    a 4 MiB bucket that ends, in true time, when the busiest rank's work is done plus the
    transfer (the moment every rank leaves it); then a broadcast. ``offset_us``: this
    rank's clock against the others'."""
    events = []
    for step, works in enumerate(work_us):
        t0 = step * STEP_US + offset_us
        last_arrival = t0 + 100 + max(works)
        c = 10 * step
        start = t0 + 100 + works[rank]
        events += [
            _x(f"ProfilerStep#{step}", "user_annotation", t0, STEP_US - 10),
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 10, 5, correlation=c + 1),
            _x("sgemm", "kernel", t0 + 100, works[rank], tid=7, device=0, stream=7,
               correlation=c + 1),
            _x("record_param_comms", "cpu_op", t0 + 20, 10, **{
                "Collective name": "allreduce", "In msg nelems": 1 << 20, "dtype": "Float",
                "Group size": len(works), "Process Group Name": "0"}),
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 25, 5, correlation=c + 2),
            _x("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", "kernel", start,
               last_arrival + TRANSFER_US - start, tid=7, device=0, stream=8,
               correlation=c + 2),
            # a broadcast's root leaves first: never split, whatever its times
            _x("cudaLaunchKernel", "cuda_runtime", t0 + 40, 5, correlation=c + 3),
            _x("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*)", "kernel",
               last_arrival + TRANSFER_US + 50 * (rank + 1), BROADCAST_US * (rank + 1),
               tid=7, device=0, stream=8, correlation=c + 3),
        ]  # fmt: skip
    return events


def write_job(folder, work_us, offsets=None):
    ranks = len(work_us[0])
    for rank in range(ranks):
        data = {
            "traceEvents": rank_events(rank, work_us, (offsets or {}).get(rank, 0.0)),
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"rank": rank, "world_size": ranks, "backend": "nccl"},
        }
        with gzip.open(folder / f"rank{rank}.json.gz", "wt") as f:
            json.dump(data, f)
    return folder


def skew_of(work_us, offsets=None):
    ranks = []
    for rank in range(len(work_us[0])):
        events = rank_events(rank, work_us, (offsets or {}).get(rank, 0.0))
        model = build_model(events, [])
        ranks.append(rank_collectives(model.with_steps(derive_steps(model)), rank))
    return collective_skew(ranks)


# rank 3 works 6 ms more than the others in every step
STRAGGLER = [[4_000, 4_100, 3_900, 10_000]] * 4
# the busiest rank changes every step: imbalance, no straggler
ROTATING = [[9_000 if r == s % 4 else 3_000 for r in range(4)] for s in range(4)]


def test_the_wait_for_the_last_rank_is_apart_from_the_transfer():
    [reduce] = skew_of(STRAGGLER)  # the broadcast is not split
    assert reduce.kind == "all_reduce" and reduce.calls_per_step == 1
    # every rank's kernel lasts the transfer plus its wait for rank 3's 10 ms of work
    waits = [10_000 - w for w in STRAGGLER[0]]
    assert reduce.wait_ms_per_step == pytest.approx(sum(waits) / 4 / 1000)
    assert reduce.transfer_ms_per_step == pytest.approx(TRANSFER_US / 1000)
    assert reduce.ms_per_step == pytest.approx(reduce.wait_ms_per_step + 2.0)
    assert reduce.slowest_rank == 3 and reduce.slowest_share == 1.0


def test_clock_offsets_between_the_traces_change_nothing():
    offsets = {1: 1_234_567.0, 2: -3_500.0, 3: 77.5}
    assert skew_of(STRAGGLER, offsets) == skew_of(STRAGGLER)


def test_a_rotating_busiest_rank_is_imbalance_without_a_name():
    [reduce] = skew_of(ROTATING)
    assert reduce.wait_ms_per_step == pytest.approx(3 * 6.0 / 4)
    assert reduce.slowest_rank is None and reduce.slowest_share == pytest.approx(0.25)


def test_collectives_that_do_not_line_up_are_not_compared():
    """A rank whose n-th collective of the step is of another kind (a different program
    order) has nothing to be compared with there."""
    ranks = []
    for rank in range(2):
        events = rank_events(rank, [[4_000, 9_000]])
        if rank == 1:  # its all-reduce reads as an all-gather
            for e in events:
                if e["name"] == "record_param_comms":
                    e["args"]["Collective name"] = "allgather"
        model = build_model(events, [])
        ranks.append(rank_collectives(model.with_steps(derive_steps(model)), rank))
    assert collective_skew(ranks) == ()


def test_doctor_on_a_rank_folder_reports_the_split_and_the_imbalance(tmp_path, capsys, monkeypatch):
    from json_schemas import validate_output

    monkeypatch.setenv("COLUMNS", "200")  # the terminal's tables unwrapped
    job = write_job(tmp_path, ROTATING, offsets={2: 5e6})
    out = tmp_path / "report.json"
    assert main(["doctor", "--trace", str(job), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    validate_output(report, "doctor_report")
    [reduce] = report["cross_rank"]["collective_skew"]
    assert reduce["wait_ms_per_step"] == pytest.approx(4.5)
    assert report["cross_rank"]["straggler"] is None  # no rank is the busiest every step
    [tp505] = [f for f in report["findings"] if f["code"] == "TP505"]
    assert tp505["saving_ms"] == pytest.approx(4.5) and "load imbalance" in tp505["detail"]
    assert "rank" not in tp505["evidence"]
    shown = capsys.readouterr().out
    assert "waiting for the last rank vs transfer" in shown and "changes: imbalance" in shown


def test_a_steady_straggler_is_one_finding_with_its_collectives_wait(tmp_path, capsys):
    job = write_job(tmp_path, STRAGGLER)
    out = tmp_path / "report.json"
    assert main(["doctor", "--trace", str(job), "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    [tp505] = [f for f in report["findings"] if f["code"] == "TP505"]
    assert tp505["evidence"]["rank"] == 3
    assert tp505["evidence"]["collective_wait_ms"] == pytest.approx(4.5)


@pytest.mark.parametrize("wait_ms, finding", [(0.5, False), (2.5, True)])
def test_skew_is_a_finding_once_it_outweighs_the_transfer(wait_ms, finding):
    from torchpace.report.model import CollectiveSkew, CrossRank, RankFigures

    ranks = tuple(
        RankFigures(rank=r, path="", step_ms=(20.0,) * 4, median_step_ms=20.0,
                    collective_ms=2.0 + wait_ms, collective_on="gpu", work_ms=18.0 - wait_ms,
                    work_per_step=(18.0 - wait_ms,) * 4, allreduce_calls=1, synced_backwards=1,
                    comm_share_of_gpu=None, comm_overlap=None, comm_overlap_per_step=())
        for r in range(2)
    )  # fmt: skip
    skew = CollectiveSkew("all_reduce", 1, 2.0 + wait_ms, wait_ms, 2.0, 1, 1.0, (wait_ms,) * 4)
    cross = CrossRank(ranks, 4, None, 0.0, 0.0, (), (skew,))
    found = cross_rank_findings(cross)
    assert [f.code for f in found] == (["TP505"] if finding else [])
    if finding:
        assert found[0].evidence["rank"] == 1 and found[0].saving_ms == wait_ms


def test_a_wait_in_one_step_only_is_noise_not_a_finding(tmp_path):
    """One step of four where rank 3 was descheduled for 15 ms: as much wait on the mean as a
    steady imbalance would give, but a busy machine's, not the job's."""
    spike = [[3_000, 3_000, 3_000, 3_000]] * 3 + [[3_000, 3_000, 3_000, 18_000]]
    [reduce] = skew_of(spike)
    assert reduce.wait_ms_per_step > reduce.transfer_ms_per_step
    assert reduce.wait_ms_by_step == pytest.approx((0, 0, 0, 3 * 15 / 4))
    out = tmp_path / "report.json"
    assert main(["doctor", "--trace", str(write_job(tmp_path, spike)), "--json", str(out)]) == 0
    assert not [f for f in json.loads(out.read_text())["findings"] if f["code"] == "TP505"]


def test_the_shared_128_rank_pair_splits_its_collectives(shared_traces):
    """Two real ranks of a 128-rank job (HTA's test data): every all-reduce, all-to-all and
    all-gather is matched across the pair; the all-reduces wait for rank 1 alone."""
    from torchpace.trace.model import load_trace

    pair = []
    for rank in (0, 1):
        model = load_trace(shared_traces / f"sampled_rank{rank}.json.gz")
        pair.append(rank_collectives(model.with_steps(derive_steps(model)), rank))
    skew = {c.kind: c for c in collective_skew(pair)}
    assert set(skew) == {"all_to_all", "all_reduce", "all_gather"}
    for c in skew.values():
        assert c.wait_ms_per_step + c.transfer_ms_per_step == pytest.approx(c.ms_per_step)
    assert skew["all_reduce"].slowest_rank == 1 and skew["all_reduce"].slowest_share == 1.0
    assert skew["all_reduce"].wait_ms_per_step == pytest.approx(13.93, abs=0.01)
