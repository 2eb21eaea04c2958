"""A doctor finding: one problem seen in a profile, with its evidence and its estimated cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from torchpace import catalog
from torchpace.knobs import NAMES as KNOB_NAMES
from torchpace.knobs import is_knob

SEVERITIES = ("high", "medium", "low")
# A finding costing at least this share of the step is "high", at least the second "medium":
# a quarter of the step is the biggest single win a user usually gets from one fix, a tenth
# is still worth an afternoon; below that it is worth knowing, not worth chasing first.
HIGH_SHARE = 0.25
MEDIUM_SHARE = 0.10

# What a finding's saving is made of, which says how it moves from the profiled window to
# the unprofiled step (doctor/pricing.py): host time, which the profiler slows; device
# idle or device time, which it does not; or a figure already measured on unprofiled steps.
COST_SIDES = ("host", "idle", "device", "unprofiled")


def severity_for_share(share: float | None, default: str = "low") -> str:
    if share is None:
        return default
    if share >= HIGH_SHARE:
        return "high"
    if share >= MEDIUM_SHARE:
        return "medium"
    return "low"


@dataclass
class Finding:
    code: str
    evidence: dict[str, float | int | str]  # named numbers: what was measured
    fix: str
    saving_ms: float | None = None  # estimated saving per step; None when it cannot be estimated
    step_ms: float | None = None  # the median step the saving is a share of
    severity: str | None = None  # derived from the saving's share of the step when None
    location: str | None = None  # the user's source line, where known
    knob: str | None = None  # the tune knob that would test the fix (tune/knobs registry)
    detail: str = ""  # one sentence: what was seen
    notes: list[str] = field(default_factory=list)  # caveats (semantics change, estimate basis)
    # How the job ends, for a finding that ends it (a leak that reaches capacity, an
    # out-of-memory, a timeout): "the job runs out of device memory at step ~76". Its cost
    # is the job, not ms per step: such a finding comes before every speed finding.
    ends_job: str | None = None
    # what the saving is made of (COST_SIDES): how doctor/pricing.py puts it on the
    # unprofiled step; "host" (scaled with the step) unless the check says otherwise
    cost: str = "host"
    # the step the saving and its share are of, in words (set by doctor/pricing.py)
    basis: str | None = None
    # True when the severity came from the share (so that pricing derives it anew)
    severity_from_share: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        entry = catalog.get(self.code)  # fails loudly on a code not in the catalog
        self.code = entry.code
        if self.cost not in COST_SIDES:
            raise ValueError(f"{self.code}: cost {self.cost!r} is not one of {COST_SIDES}")
        self.severity_from_share = self.severity is None and not self.ends_job
        if self.severity is None:
            self.severity = "high" if self.ends_job else severity_for_share(self.saving_share)
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {SEVERITIES}")
        # A knob tune does not have would send the user to a test that cannot be run.
        if self.knob is not None and not is_knob(self.knob):
            raise ValueError(
                f"{self.code}: knob {self.knob!r} is not a tune knob; the knobs are: "
                f"{', '.join(KNOB_NAMES)}"
            )

    @property
    def title(self) -> str:
        return catalog.get(self.code).title

    @property
    def practices(self) -> list[str]:
        return list(catalog.get(self.code).practices)

    @property
    def saving_share(self) -> float | None:
        if self.saving_ms is None or not self.step_ms:
            return None
        return min(1.0, self.saving_ms / self.step_ms)

    def rank_key(self) -> tuple:
        """Most important first: a finding that ends the job, then the severity band, then
        the estimated saving. A job that dies saves nothing from being faster: a leak that
        fills the device in 76 steps outranks a layout change worth 6 ms a step."""
        return (
            self.ends_job is None,
            SEVERITIES.index(self.severity),
            -(self.saving_ms or 0.0),
            self.code,
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["severity_from_share"]
        d.update(
            title=self.title,
            practices=self.practices,
            saving_pct=None if self.saving_share is None else round(100 * self.saving_share, 1),
            doc=catalog.get(self.code).doc_path,
        )
        return d


def rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=Finding.rank_key)


def fail_on_matcher(value: str) -> Callable[[Finding], bool] | None:
    """The --fail-on test: a code (TP101) matches that code, a severity matches findings of
    that severity or worse; None when the value is neither."""
    v = value.strip()
    if v.lower() in SEVERITIES:
        level = SEVERITIES.index(v.lower())
        return lambda f: SEVERITIES.index(f.severity) <= level
    if v.upper() in catalog.CODES:
        code = v.upper()
        return lambda f: f.code == code
    return None
