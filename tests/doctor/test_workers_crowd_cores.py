"""TP107: DataLoader workers crowd the cores the step computes on, from the job's CPU time
per process (capture/process_cpu.py), at its thresholds, measured or estimated."""

from doctor_fakes import ProbeResult, facts, loader, process, profile

from torchpace.doctor.checks import data
from torchpace.facts.cpu_use import MAIN, OTHER, WORKER, CpuUse, ProcessCpu

WALL_S = 10.0


def cpu(workers_s: float, n: int = 8, main_s: float = 14.0, loader_of=0, others=()) -> CpuUse:
    """A phase of WALL_S seconds on 2 cores: the main process and ``n`` workers sharing
    ``workers_s`` seconds of CPU."""
    procs = [ProcessCpu(100, MAIN, "python", 11, 2, main_s)]
    procs += [ProcessCpu(200 + i, WORKER, "pt_data_worker", 3, 0, workers_s / n, loader_of)
              for i in range(n)]  # fmt: skip
    procs += list(others)
    return CpuUse(WALL_S, 2, procs)


def crowded(use: CpuUse | None, probes=(), threads: int = 2, window: CpuUse | None = None):
    f = facts(loaders=[loader(num_workers=8, location="train.py:53")], probes=probes,
              proc=process(intra_op_threads=threads))  # fmt: skip
    f.reference_cpu, f.window_cpu = use, window
    return [x for x in data.run(profile({"wall_ms": 100.0}, f)) if x.code == "TP107"]


def test_workers_taking_the_cores_are_named_with_the_measured_saving():
    probe = ProbeResult("fewer-workers", baseline_ms=110.0, probe_ms=90.0, steps=3,
                        detail="num_workers=0 instead of 8")  # fmt: skip
    (f,) = crowded(cpu(workers_s=5.0), probes=[probe])
    assert f.saving_ms == 20.0 and f.step_ms == 110.0 and f.location == "train.py:53"
    assert f.evidence["workers_share_of_cores_pct"] == 25.0  # 5 s of 2 cores x 10 s
    assert f.evidence["num_workers"] == 8 and f.knob == "num-workers"
    assert "num_workers=0" in f.fix and "8 DataLoader workers and 2 compute threads" in f.detail
    assert "saving measured" in f.notes[0]


def test_without_a_probe_the_saving_is_the_workers_share_of_the_jobs_cpu():
    (f,) = crowded(cpu(workers_s=6.0, main_s=14.0))
    assert f.saving_ms == 30.0  # 6 of 20 CPU-seconds, of a 100 ms step
    assert "estimated" in f.notes[0]


def test_a_probe_that_gains_nothing_means_no_finding():
    flat = ProbeResult("fewer-workers", baseline_ms=100.0, probe_ms=99.0, steps=3)
    assert crowded(cpu(workers_s=5.0), probes=[flat]) == []


def test_idle_workers_or_room_on_the_cores_make_no_finding():
    assert crowded(cpu(workers_s=1.0)) == []  # 5% of the cores: below the floor
    assert crowded(cpu(workers_s=5.0, n=1), threads=1) == []  # 1 worker + 1 thread on 2 cores
    assert crowded(None) == []  # no reading (not Linux)


def test_a_script_that_ended_in_its_unprofiled_steps_is_read_from_the_window():
    ended = CpuUse(WALL_S, 2, [ProcessCpu(100, MAIN, "python", 11, 2, 14.0)])
    (f,) = crowded(ended, window=cpu(workers_s=5.0))
    assert f.evidence["measured_on"] == "profiled steps"


def test_a_second_loaders_workers_and_other_processes_of_the_job_are_named():
    f0 = facts(loaders=[loader(num_workers=8, location="train.py:53"),
                        loader(num_workers=4, location="train.py:60")])  # fmt: skip
    use = cpu(workers_s=5.0)
    use.processes += [ProcessCpu(300 + i, WORKER, "pt_data_worker", 3, 0, 0.5, 1) for i in range(4)]
    use.processes.append(ProcessCpu(400, OTHER, "ffmpeg", 1, 1, 3.0))
    f0.reference_cpu = use
    (f,) = [x for x in data.run(profile({"wall_ms": 100.0}, f0)) if x.code == "TP107"]
    assert f.location == "train.py:53"  # the loader whose workers took the most
    assert any("4 more workers of the loader at train.py:60" in n for n in f.notes)
    assert any("ffmpeg (pid 400), kept 15% of the cores busy" in n for n in f.notes)
