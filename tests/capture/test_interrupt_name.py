"""What stopped a verb is named by the signal it received (issue 37 item 11: a SIGTERM was
reported as "(Ctrl-C)")."""

import os
import signal

import pytest

from torchpace.capture.signals import interrupt_name, terminate_as_interrupt


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_is_named_by_its_name(signum, monkeypatch):
    # SIGHUP points a terminal's output at /dev/null: not this test's stdout
    monkeypatch.setattr("torchpace.capture.signals._leave_the_terminal", lambda: None)
    with terminate_as_interrupt() as received:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signum)
            signal.sigtimedwait([], 1)  # the handler runs at the next bytecode boundary
        assert interrupt_name() == signal.Signals(signum).name
        assert received == [signum]
    assert interrupt_name() == "Ctrl-C"  # the next verb starts afresh


def test_without_a_stop_signal_it_is_ctrl_c():
    with terminate_as_interrupt():
        assert interrupt_name() == "Ctrl-C"
