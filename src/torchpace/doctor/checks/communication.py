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
