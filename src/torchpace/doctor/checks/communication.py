"""TP507: the host blocked in a sync or a device-to-host copy that the device runs only after
a collective: the loop waits for the network on the host, not only on the device.

Read from doctor/comms.py's reading of the trace: the blocking runtime calls on the loop's
thread (stream/device/event syncs, blocking memcpys) during which collective kernels ran most
of the device's busy time, grouped by the ``record_function`` label around them (TorchRec's
``## sparse_data_dist ##``, a user's own). The saving is that blocked time per step: an upper
bound, what moving the wait off the step's critical path (prefetching the next batch's
input distribution, a non_blocking copy read later) gives back. The part of the wait in which
the device only communicated is the exposed communication, priced by TP506 and the
breakdown's collective row, and left out here: the two add up, they do not overlap.
"""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class HostBlockedBehindCollective(Check):
    """## What it sees

    In a GPU rank's trace, the loop's thread blocked in a stream, device or event synchronize,
    or a blocking memcpy, while the device ran collective kernels (NCCL) for at least half of
    its busy time inside that wait: the host needs something (a device-to-host copy of the
    all-to-all's output, a `.item()` on a reduced value) that the device only produces after the
    collective. The calls are grouped by the `record_function` label around them (TorchRec's `##
    sparse_data_dist ##`, or the user's own), and the finding names the largest group, the call
    and the collective it waited behind (doctor/comms.py).

    The saving is the host's blocked time per step, less the part of it in which the device ran
    only the collective (that part is the exposed communication, priced by TP506 and the
    breakdown's collective row: the two findings add up, they do not count a millisecond twice);
    an upper bound, what taking the wait off the step's critical path gives back. The device may
    still have to run the collective, but the host could be queueing the next work meanwhile.

    ## Why it matters

    While the host waits, nothing new is queued: the step takes the collective's time plus the
    host's own work after it, in series. A recommender's embedding all-to-all followed by a
    blocking copy of the lengths is the classic case: the sync wait is the largest row of the
    breakdown and nothing else explains it.

    ## Fix

    Start the collective one step ahead and consume its result a step later (TorchRec's
    `TrainPipelineSparseDist` overlaps the next batch's input distribution with this batch's
    forward and backward); copy what the host needs with `non_blocking=True` into pinned memory
    and wait on an event just before it is read, not on the whole stream; avoid `.item()` or
    `.cpu()` right after a collective.
    """

    code = "TP507"

    def run(self, profile: Profile) -> list[Finding]:
        comm = profile.communication
        if comm is None or not comm.host_blocked:
            return []
        blocked = comm.host_blocked_ms_per_step
        if not self.worth_reporting(profile, blocked, "device"):
            return []
        top = comm.host_blocked[0]
        where = f"in `{top.label}`" if top.label else "on the loop's thread"
        return [
            Finding(
                "TP507",
                evidence={
                    "host_blocked_ms_per_step": r(blocked, 1),
                    "largest_label": top.label or "",
                    "largest_call": top.call,
                    "largest_ms_per_step": r(top.ms_per_step, 1),
                    "behind_collective": top.behind,
                    "comm_exposed_ms_per_step": r(comm.exposed_ms_per_step, 1),
                },
                saving_ms=blocked,
                step_ms=profile.step_ms,
                cost="device",  # the host's wait for collectives (doctor/pricing.py)
                location=top.label,
                detail=f"the host waits {blocked:.1f} ms per step in syncs and copies that "
                f"the device runs after a collective; most of it {where} ({top.call}, "
                f"behind {top.behind})",
                notes=[
                    "saving: the host's blocked time per step (an upper bound: what taking "
                    "the wait off the step's critical path gives back)"
                ],
                fix=FIX,
            )
        ]


FIX = (
    "take the wait off the critical path: start the next batch's input distribution (the "
    "all-to-all) one step ahead, as TorchRec's TrainPipelineSparseDist does; copy what the "
    "host needs with non_blocking=True into pinned memory and read it after the next "
    "launches (an event, not a stream sync); avoid .item()/.cpu() right after a collective"
)

CHECKS = [HostBlockedBehindCollective()]


def run(profile: Profile) -> list[Finding]:
    return [f for c in CHECKS for f in c.run(profile)]
