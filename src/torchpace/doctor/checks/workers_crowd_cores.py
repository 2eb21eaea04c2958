"""TP107 workers-crowd-cores: DataLoader workers take the cores from the step's compute."""

from __future__ import annotations

from collections import defaultdict

from torchpace.doctor.checks._compute import probe_saving
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile
from torchpace.facts.cpu_use import OTHER, WORKER, CpuUse

# the capture's A/B probe of this problem (capture/probes.py: FEWER_WORKERS)
PROBE = "fewer-workers"


class WorkersCrowdCores(Check):
    """TP107: loader workers and compute threads outnumber the usable cores, and the workers
    used a measurable share of them during the steps. The batches are ready (no data wait):
    the cost shows as slower forward and backward, where TP101's does not look.

    ## What it does

    Reads, from `/proc`, the CPU time each process of the job used during the timed steps (the
    unprofiled steps where they ran, else the profiled window): the main process and its threads,
    each DataLoader worker and its threads, any other child process (capture/process_cpu.py).
    Reports a loader whose workers, with the compute threads (`torch.get_num_threads()`) and the
    job's other busy processes, outnumber the cores this process may use (its affinity mask), when
    the workers kept at least 10% of those cores busy during the steps.

    The finding names the loader (its line, its `num_workers`), the share of the cores its workers
    took, the threads each worker runs, and the fix. Its saving is measured where the capture could:
    after the window, a few steps take their batches from a stand-in iterator of the same loader
    with the workers that fit beside the compute threads (`cores - threads`, often 0), alternated
    with the user's own iterator, each block after two settling steps (capture/loader_swap.py);
    a probe gaining under 3% of the step means the crowding costs nothing here, and no finding is
    made. Without a probe the saving is estimated as the workers' share of the job's CPU time in
    the steps times the step (an upper bound: loading in the main process adds its own time back).
    Workers of a second loader running at the same time (an evaluation loader) and other busy
    processes of the job are named in the notes.

    ## Why it matters

    On a small machine, a trainer's default worker count (16 in some reference scripts) puts many
    processes on few cores. The batches are ready, so the loop never waits for data: TP101 and the
    data-wait row see nothing. The workers' decoding and augmenting take the cores from the step's
    compute threads instead, and OpenMP's parallel regions wait at every barrier for a thread that
    was descheduled: forward and backward get slower, often by more than the workers' share.

    ## Example

    ```python
    # on a 2-core machine
    loader = DataLoader(images, batch_size=32, shuffle=True, num_workers=16)
    ```

    ## Use instead

    ```python
    cores = len(os.sched_getaffinity(0))
    loader = DataLoader(images, batch_size=32, shuffle=True, num_workers=0)  # or 1..cores-1
    torch.set_num_threads(max(1, cores - loader.num_workers))
    ```

    Each worker should run one thread: torch sets its own to 1 in workers; OpenCV and NumPy's BLAS
    used by transforms need `cv2.setNumThreads(0)` or `OMP_NUM_THREADS=1` in a `worker_init_fn`.

    ## Fix safety

    Safe: the worker count changes speed, not the batches or their order (with a seeded sampler).
    The right number is measured (`torchpace tune`, knob `num-workers`).
    """

    code = "TP107"

    # The workers' CPU time during the steps, as a share of what the usable cores could
    # give: below a tenth, whatever they crowd costs less than the step's own noise.
    MIN_WORKER_SHARE = 0.10
    # A probe gaining less than this share of the step measured no cost: no finding.
    MIN_PROBE_GAIN = 0.03
    # Another process of the job is named when it took this share of the cores.
    MIN_OTHER_SHARE = 0.05

    def run(self, profile: Profile) -> list[Finding]:
        facts, state = profile.facts, profile.process
        if facts is None or state is None or not state.usable_cpus:
            return []
        cpu, phase = _cpu_use(facts)
        if cpu is None:
            return []
        workers = cpu.of_role(WORKER)
        share = cpu.share_of_cores(workers)
        cores, threads = state.usable_cpus, state.intra_op_threads
        others = [p for p in cpu.of_role(OTHER) if cpu.share_of_cores([p]) >= self.MIN_OTHER_SHARE]
        if not workers or share is None or share < self.MIN_WORKER_SHARE:
            return []
        if len(workers) + len(others) + threads <= cores:
            return []
        by_loader = _cpu_by_loader(workers)
        index = max(by_loader, key=by_loader.get)
        loader = facts.loaders[index] if index is not None else None
        fit = max(0, cores - threads)
        saving, probe = probe_saving(profile, PROBE)
        if probe is not None and saving < self.MIN_PROBE_GAIN * probe.baseline_ms:
            return []  # measured: the crowding costs nothing here
        step = _step_ms(profile, phase)
        evidence: dict = {
            "num_workers": loader.num_workers if loader else len(workers),
            "worker_processes": len(workers),
            "compute_threads": threads,
            "usable_cpus": cores,
            "workers_share_of_cores_pct": r(100 * share, 1),
            "os_threads_per_worker": max(p.threads for p in workers),
            "measured_on": phase,
        }
        if probe is not None:
            evidence |= {"step_ms_now": r(probe.baseline_ms), "step_ms_fewer_workers":
                         r(probe.probe_ms)}  # fmt: skip
            step = probe.baseline_ms
        else:
            saving = step * _workers_share_of_job(cpu) if step else None
        detail = (
            f"{len(workers)} DataLoader workers and {threads} compute threads share {cores} "
            f"usable cores: during the {phase} the workers kept {100 * share:.0f}% of the "
            "cores busy, taken from the step's compute (the batches were ready: this shows as "
            "slower forward and backward, not as data wait)"
        )
        fix = (
            f"DataLoader(..., num_workers={fit}) here; keep workers + compute threads within "
            f"the {cores} cores (num_workers 0..{cores - 1} with torch.set_num_threads(cores "
            "- num_workers)), one thread per worker"
        )
        notes = _notes(probe, facts, by_loader, index, others, cpu, workers)
        where = loader.location if loader else None
        finding = Finding("TP107", evidence, fix, saving, step, location=where,
                          knob="num-workers", detail=detail, notes=notes)  # fmt: skip
        return [finding]


def _cpu_use(facts) -> tuple[CpuUse | None, str]:
    """The unprofiled steps' reading where it saw the workers (the profiler slows the main
    process and not the workers), else the profiled window's: a script that ends during the
    unprofiled steps shuts its workers down before the reading at their end, and a process
    that ended is lost with its time."""
    reference, window = facts.reference_cpu, facts.window_cpu
    if reference is not None and (reference.of_role(WORKER) or window is None):
        return reference, "unprofiled steps"
    return window, "profiled steps"


def _step_ms(profile: Profile, phase: str) -> float:
    measured = profile.throughput
    if phase == "unprofiled steps" and measured is not None and measured.unprofiled:
        return measured.step_ms_mean
    return profile.step_ms


def _cpu_by_loader(workers) -> dict[int | None, float]:
    out: dict[int | None, float] = defaultdict(float)
    for p in workers:
        out[p.loader] += p.cpu_s
    return out


def _workers_share_of_job(cpu: CpuUse) -> float:
    """The workers' part of the job's CPU time in the steps: the estimate where no probe ran
    (an upper bound on what fewer workers give back; loading in the main process adds its
    own time to the step)."""
    total = sum(p.cpu_s for p in cpu.processes)
    return sum(p.cpu_s for p in cpu.of_role(WORKER)) / total if total else 0.0


def _notes(probe, facts, by_loader, index, others, cpu, workers) -> list[str]:
    notes = []
    if probe is not None:
        notes.append(
            f"saving measured: {probe.steps} steps each way, {probe.detail}, switched in "
            "this process (the user's workers idle meanwhile)"
        )
    else:
        notes.append(
            "saving estimated from the workers' share of the job's CPU time in the steps: "
            "loading in the main process adds its own time back; measure with `torchpace tune`"
        )
    for other, cpu_s in by_loader.items():
        if other != index and other is not None:
            where = facts.loaders[other].location or "another DataLoader"
            count = sum(1 for p in workers if p.loader == other)
            notes.append(f"{count} more workers of the loader at {where} ran at the same time "
                         f"({cpu_s:.2f} s of CPU)")  # fmt: skip
    for p in others:
        notes.append(f"another process of this job, {p.name} (pid {p.pid}), kept "
                     f"{100 * cpu.share_of_cores([p]):.0f}% of the cores busy")  # fmt: skip
    return notes
