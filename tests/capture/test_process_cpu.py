"""The job's CPU time per process from /proc (capture/process_cpu.py), and the fewer-workers
probe's switch (capture/loader_swap.py): the batches from a stand-in with fewer workers,
then from the user's own iterator where it left off, the random states untouched."""

import random
import subprocess
import sys
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torch.utils.data.dataloader import _BaseDataLoaderIter

from torchpace.capture import process_cpu
from torchpace.capture.loader_swap import LoaderSwap
from torchpace.facts.cpu_use import MAIN, OTHER, WORKER

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"


def test_each_child_and_its_cpu_time_between_two_snapshots():
    busy = subprocess.Popen([sys.executable, "-c", BUSY + "time.sleep(5)"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.05)
        a = process_cpu.snapshot()
        time.sleep(1.2)  # the busy child's 0.4 s of CPU falls in here
        b = process_cpu.snapshot()
        use = process_cpu.between(a, b, {busy.pid: 3}, cores=2)
    finally:
        busy.kill()
        idle.kill()
    by_pid = {p.pid: p for p in use.processes}
    assert by_pid[busy.pid].role == WORKER and by_pid[busy.pid].loader == 3
    assert by_pid[busy.pid].cpu_s >= 0.2 and by_pid[busy.pid].busy_threads == 1
    assert by_pid[idle.pid].role == OTHER and by_pid[idle.pid].cpu_s < 0.1
    assert use.of_role(MAIN)[0].threads >= 1 and use.cores == 2
    assert use.share_of_cores([by_pid[busy.pid]]) == pytest.approx(
        by_pid[busy.pid].cpu_s / (use.wall_s * 2)
    )
    assert process_cpu.between(None, b, {}, 2) is None


class WhoLoads(Dataset):
    """Each item says which process built it (-1: the main process) and draws nothing."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        info = get_worker_info()
        random.random()  # a transform drawing from Python's random state
        return torch.tensor([i, -1 if info is None else info.id])


def test_the_stand_in_feeds_the_switched_steps_and_the_users_iterator_resumes():
    loader = DataLoader(WhoLoads(), batch_size=4, num_workers=2)
    swap = LoaderSwap()
    swap.loader_built(0, loader)
    users = iter(loader)
    users._torchpace_index = 0
    swap.iterator_started(0, users)
    original_next = _BaseDataLoaderIter.__next__

    def take():
        return swap.next_from(users, original_next)

    first = take()
    assert (first[:, 1] >= 0).all() and set(swap.worker_pids().values()) == {0}
    assert len(swap.worker_pids()) == 2
    swap.switch(0, workers=0)
    state = random.getstate(), torch.random.get_rng_state()
    stand_in = [take(), take()]
    assert all((b[:, 1] == -1).all() for b in stand_in)  # loaded in the main process
    assert stand_in[0][0, 0] == 0  # a fresh pass over the dataset
    assert random.getstate() == state[0] and torch.equal(torch.random.get_rng_state(), state[1])
    assert len(swap.worker_pids()) == 2  # the stand-in's own would not be the user's
    swap.switch(None)
    resumed = take()
    assert resumed[0, 0] == 4 and (resumed[:, 1] >= 0).all()  # where the user's left off
    assert loader.num_workers == 2


def test_the_readings_survive_run_facts_json():
    import json

    from torchpace.facts.cpu_use import CpuUse, ProcessCpu
    from torchpace.facts.run import RunFacts, Status

    f = RunFacts([], "dataloader", [], 2.0, 1, 3, Status.COMPLETE, step_note="batches")
    f.window_cpu = CpuUse(1.5, 2, [ProcessCpu(7, WORKER, "pt_data_worker", 3, 1, 0.7, 0)])
    back = RunFacts.from_dict(json.loads(f.to_json()))
    assert back.window_cpu == f.window_cpu and back.reference_cpu is None
    assert back.step_note == "batches"


def test_the_fewer_workers_probe_is_planned_only_for_crowding_workers():
    from torchpace.capture.probes import FEWER_WORKERS, crowded_loader, plan_probes
    from torchpace.facts.cpu_use import CpuUse, ProcessCpu
    from torchpace.facts.run import LoaderFacts, ProcessState, RunFacts, Status

    def run_facts(worker_s: float, workers: int = 8, threads: int = 2) -> RunFacts:
        f = RunFacts([], "optimizer", [], 1.0, 1, 3, Status.RUNNING)
        f.process = ProcessState("cpu", False, None, False, True, None, None, False, None, None,
                                 intra_op_threads=threads, inter_op_threads=threads,
                                 usable_cpus=2, physical_cores=2)  # fmt: skip
        f.loaders = [LoaderFacts("t.py:1", 0, False, False, None, 4, False, 10, "D"),
                     LoaderFacts("t.py:9", workers, False, False, 2, 32, False, 999, "D",
                                 batches_seen=40)]  # fmt: skip
        procs = [ProcessCpu(1, MAIN, "python", 9, 2, 1.5)]
        procs += [ProcessCpu(10 + i, WORKER, "w", 3, 0, worker_s / workers, 1)
                  for i in range(workers)]  # fmt: skip
        f.window_cpu = CpuUse(1.0, 2, procs)
        return f

    crowding = crowded_loader(run_facts(worker_s=0.5))
    assert crowding == (1, 0, 8)  # the loader the loop uses, 0 workers beside 2 threads
    names = [p.name for p in plan_probes(run_facts(0.5).process, (LoaderSwap(), *crowding))]
    assert names == [FEWER_WORKERS]
    assert crowded_loader(run_facts(worker_s=0.05)) is None  # the workers hardly ran
    assert crowded_loader(run_facts(worker_s=0.5, workers=1, threads=1)) is None  # room
