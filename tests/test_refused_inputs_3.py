"""Inputs to the monitoring tools that used to end in a bare exception from inside Python, or in
a silently wrong answer, and are now refused with a message naming the argument. The comment
on each case says what happened before. Everything is built inside the call, not at import."""
import numpy as np
import pytest

import tinymem as tm
from tinymem import cli, memory
from tinymem.memory.sampler import Monitor


def peak_window():
    with memory.track(measure=False) as t:
        # large enough that a small array another thread registers meanwhile is never the top
        a = tm.tensor(np.ones(10 * 1024, np.float32))
        b = tm.tensor(np.ones(20 * 1024, np.float32))
        del a, b
    return t


def enter(context):
    with context:
        pass


CASES = {
    # The sampling thread died of an OverflowError at its first wait; the window still gave a peak.
    "track(monitor=1e10)": (lambda: enter(memory.track(monitor=1e10)), ValueError, "monitor interval"),
    "track(monitor=inf)": (lambda: enter(memory.track(monitor=float("inf"))), ValueError, "monitor interval"),
    "track(monitor='fast')": (lambda: enter(memory.track(monitor="fast")), TypeError, "monitor interval"),
    "Monitor(interval=nan)": (lambda: Monitor(interval=float("nan")), ValueError, "monitor interval"),
    # A raw TypeError (None - int) / ValueError (max of nothing).
    "Monitor.peak_delta() before start()": (lambda: Monitor().peak_delta(), RuntimeError, r"call start\(\)"),
    "Monitor.mean() before start()": (lambda: Monitor().mean(), RuntimeError, r"call start\(\)"),
    # Every row but the last.
    "top(-1)": (lambda: peak_window().top(-1), ValueError, "top: n"),
    # A raw TypeError from slicing.
    "top(2.5)": (lambda: peak_window().top(2.5), ValueError, "top: n"),
    # Accepted: every path cut before its last part.
    "by_module(depth=-1)": (lambda: peak_window().by_module(depth=-1), ValueError, "depth"),
    "by_module(depth=0)": (lambda: peak_window().by_module(depth=0), ValueError, "depth"),
    # '<' not supported between 'int' and 'str'.
    "set_per_process_memory_fraction('0.5')": (lambda: memory.set_per_process_memory_fraction("0.5"),
                                               TypeError, "fraction must be a number"),
    # A busy device was waited for forever (every comparison with NaN is False).
    "device_queue(timeout=nan)": (lambda: enter(memory.device_queue("refused-nan", timeout=float("nan"))),
                                  ValueError, "timeout"),
    # Listed nothing, as if nothing were alive.
    "live_tensors(place='gpu')": (lambda: memory.live_tensors(place="gpu"), ValueError, "unknown place 'gpu'"),
    # psutil's NoSuchProcess, naming no argument.
    "CommandMonitor(no such pid)": (lambda: memory.CommandMonitor(2**22 + 1), ValueError, "cannot be watched"),
    # AttributeError: 'int' object has no attribute 'named_parameters'.
    "top(model=5)": (lambda: peak_window().top(model=5), TypeError, "model must be a Module"),
    "device_queue(timeout=-1)": (lambda: enter(memory.device_queue("refused-neg", timeout=-1)),
                                 ValueError, "timeout"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_a_message_saying_what_was_wrong(name):
    make, error, message = CASES[name]
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("interval", ["inf", "nan", "0", "1e10"])
def test_monitor_cli_refuses_an_interval_before_running_the_command(interval, tmp_path, capsys):
    """`tinymem monitor --interval inf` ran the command with a sampling thread that died at once."""
    marker = tmp_path / "ran"
    assert cli.main(["monitor", "--interval", interval, "--out", str(tmp_path / "m"), "--device", "cpu",
                     "--", "touch", str(marker)]) == 2
    assert "--interval" in capsys.readouterr().err and not marker.exists()


def test_an_error_in_the_sampling_thread_is_raised_when_the_window_closes():
    class Failing(Monitor):
        def sample(self):
            if self.baseline is not None:  # the first sample, in start(), succeeds
                raise OSError("no /proc")
            return super().sample()

    m = Failing(interval=0.001).start()
    m._thread.join(5)  # the thread has died of its error
    with pytest.raises(RuntimeError, match="sampling thread failed"):
        m.stop()


def test_the_checks_leave_valid_input_alone():
    t = peak_window()
    assert [r["bytes"] for r in t.top(1)] == [81920] and len(t.top(5)) >= 2
    assert sum(t.by_module(depth=1).values()) == t.peak()
    memory.set_per_process_memory_fraction(0.5)
    memory.set_per_process_memory_fraction(None)
    with memory.device_queue("refused-ok", timeout=0) as ticket:
        assert ticket.waited >= 0
    with memory.track(monitor=0.01, measure=False, device="cpu") as w:  # RSS: no GPU monitor needed
        pass
    assert w.process_peak() >= 0
