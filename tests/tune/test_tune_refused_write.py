"""A trial whose write the file guard refused (a file's original could not be saved first:
a full disk) stops the tune, says why, and exits 1: never "each put back as it was"."""

from __future__ import annotations

import io

from rich.console import Console
from test_search import FakeKnob, Machine, fake_registry, tuner  # noqa: F401 (a fixture)

from torchpace.tune import report as tune_report
from torchpace.tune.trial import Outcome, TrialResult

REFUSED = "/p/ckpt.pt: No space left on device"


def test_a_refused_write_stops_the_tune_and_says_so(monkeypatch, fake_registry):  # noqa: F811
    fake_registry.add(FakeKnob("workers", [1, 2]))
    fake_registry.add(FakeKnob("other", [True]))
    plain = Machine(lambda config: 100.0)

    def machine(settings, config, label, out_dir):
        if config:  # the first knob's trial: its script's write was refused
            return TrialResult(label, dict(config), Outcome.CRASHED, error="OSError",
                               files={"refused": [REFUSED], "protected": True})  # fmt: skip
        result = plain(settings, config, label, out_dir)
        result.files = {"changed": ["/p/log.txt"], "restored": True, "protected": True}
        return result

    result = tuner(monkeypatch, machine).run()
    assert result.stopped == "files"
    assert result.stopped_by == "a file's original could not be saved"
    assert len([t for t in result.trials if t.config]) == 1  # no trial after it
    assert result.files.refused == [REFUSED] and result.files.restored is False
    text = io.StringIO()
    tune_report.render(result, Console(file=text, width=300))
    said = " ".join(text.getvalue().split())
    assert "NOT changed: /p/ckpt.pt" in said and "stopped the tune" in said
