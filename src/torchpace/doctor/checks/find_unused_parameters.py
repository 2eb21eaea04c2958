"""TP503 find-unused-parameters: DDP find_unused_parameters=True."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class FindUnusedParameters(Check):
    """TP503: DDP built with find_unused_parameters=True (a graph walk every step).

    ## In a profile (torchpace doctor)

    The capture records each `DistributedDataParallel` built with `find_unused_parameters=True`
    (and where); the doctor reports it at low severity without an estimated saving.
    """

    code = "TP503"

    def run(self, profile: Profile) -> list[Finding]:
        wrappers = profile.facts.wrappers if profile.facts else []
        hits = [w for w in wrappers if w.find_unused_parameters]
        if not hits:
            return []
        return [
            Finding(
                "TP503",
                evidence={"find_unused_parameters": "True"},
                severity="low",
                location=hits[0].location,
                detail="DDP traverses the autograd graph after every forward to find unused "
                "parameters",
                fix="find_unused_parameters=False unless some parameters really get no "
                "gradient in some steps",
            )
        ]
