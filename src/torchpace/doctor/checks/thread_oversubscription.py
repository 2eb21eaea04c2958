"""TP601 thread-oversubscription: More compute threads than cores."""

from __future__ import annotations

from torchpace.doctor.checks._compute import probe_saving
from torchpace.doctor.checks._environment import _thread_notes
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class ThreadOversubscription(Check):
    """TP601: more intra-op threads than the cores this process may use.

    ## What it does

    Reports a process whose intra-op thread count (`torch.get_num_threads()`, set by
    `OMP_NUM_THREADS`/`MKL_NUM_THREADS` or `torch.set_num_threads`) exceeds the CPUs this
    process may run on (its affinity mask or cgroup quota). When the capture ran its A/B probe
    (threads set to the usable cores for a few steps inside the window), the saving is that
    measured difference; a probe that gains less than 3% of the step means the extra threads
    cost nothing here, and no finding is reported.

    ## Why it matters

    OpenMP threads that outnumber cores preempt each other in the middle of parallel regions;
    every barrier then waits for a descheduled thread. On CPU training and on CPU-heavy data
    pipelines this can double the step time. Several processes per machine (DDP, DataLoader
    workers) multiply the problem: each one starts as many threads as there are cores.

    ## Example

    ```bash
    OMP_NUM_THREADS=32 python train.py      # in a container limited to 4 CPUs
    ```

    ## Use instead

    ```bash
    # cores / processes per machine; `torchpace launch` sets it
    OMP_NUM_THREADS=4 python train.py
    ```

    ## Fix safety

    Safe: the thread count changes speed, not results (up to floating-point summation order in
    some reductions). The right number is measured, not assumed.
    """

    code = "TP601"

    # A probe that gains less than this share of the step is noise: no finding then...
    MIN_PROBE_GAIN = 0.03
    # ...unless the threads are this many times the cores: a setting that costs little in
    # this one process but multiplies with every process and DataLoader worker started.
    FAR_ABOVE = 2

    def run(self, profile: Profile) -> list[Finding]:
        state = profile.process
        if state is None or not state.usable_cpus:
            return []
        if state.intra_op_threads <= state.usable_cpus:
            return []
        saving, probe = probe_saving(profile, "threads-to-cores")
        far_above = state.intra_op_threads >= self.FAR_ABOVE * state.usable_cpus
        if probe is not None and saving < self.MIN_PROBE_GAIN * probe.baseline_ms:
            if not far_above:
                return []  # measured: the extra threads cost nothing here
            saving = 0.0  # far above the cores: worth knowing, though it costs ~0 here
        evidence: dict = {
            "intra_op_threads": state.intra_op_threads,
            "usable_cpus": state.usable_cpus,
        }
        evidence |= {k: v for k, v in state.thread_env.items() if k.endswith("NUM_THREADS")}
        if probe is not None:
            evidence |= {
                "step_ms_now": r(probe.baseline_ms),
                "step_ms_threads_to_cores": r(probe.probe_ms),
            }
        return [
            Finding(
                "TP601",
                evidence=evidence,
                saving_ms=saving,
                step_ms=probe.baseline_ms if probe else profile.step_ms,
                severity=None if saving is not None else "low",
                cost="unprofiled" if probe else "host",
                knob="threads",
                detail=f"{state.intra_op_threads} compute threads share {state.usable_cpus} "
                "usable cores: they preempt each other",
                fix=f"OMP_NUM_THREADS={state.usable_cpus} (or torch.set_num_threads); with "
                "several processes, cores / processes each (`torchpace launch` sets it)",
                notes=_thread_notes(probe, saving),
            )
        ]
