"""`tinymem monitor -- command`: the process table, the CSV and the PNG, and the command's exit code."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

import tinymem
from tinymem import cli

ALLOCATES = ("import subprocess, sys, time, numpy as np; "
             "c = subprocess.Popen([sys.executable, '-c', "
             "'import numpy as np, time; a = np.ones(12_500_000); time.sleep(0.8)']); "
             "b = np.ones(2_500_000); time.sleep(0.2); c.wait()")


def test_monitor_prints_the_table_and_writes_csv_and_png(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["monitor", "--interval", "0.02", "--out", str(out), "--device", "cpu", "--",
                     sys.executable, "-c", ALLOCATES])
    assert code == 0
    text = capsys.readouterr().out
    assert "PID" in text and "peak" in text and "(together)" in text
    rows = (tmp_path / "run.csv").read_text().splitlines()
    assert rows[0] == "t,pid,rss_bytes,gpu_bytes"
    pids = {int(r.split(",")[1]) for r in rows[1:]}
    assert len(pids) == 2  # the command and its child
    child_peak = max(int(r.split(",")[2]) for r in rows[1:])
    assert child_peak >= 100 * 10**6  # the child's 100 MB array, touched
    assert (tmp_path / "run.png").stat().st_size > 5_000


def test_monitor_returns_the_commands_exit_code(tmp_path):
    assert cli.main(["monitor", "--out", str(tmp_path / "x"), "--device", "cpu", "--",
                     sys.executable, "-c", "raise SystemExit(3)"]) == 3


def test_monitor_without_a_command_says_what_to_do(capsys):
    assert cli.main(["monitor"]) == 2
    assert "after --" in capsys.readouterr().err


def test_monitor_of_a_missing_program(tmp_path, capsys):
    assert cli.main(["monitor", "--out", str(tmp_path / "x"), "--", "no-such-program-here"]) == 127
    assert "cannot run" in capsys.readouterr().err


def test_a_dollar_in_the_command_keeps_its_exit_code_and_the_png(tmp_path):
    """matplotlib read the '$' of the plot title (the command) as mathtext and failed: exit 1,
    no PNG."""
    out = tmp_path / "dollar"
    assert cli.main(["monitor", "--interval", "0.01", "--out", str(out), "--device", "cpu", "--",
                     "sh", "-c", "exit 3 # $$"]) == 3
    assert (tmp_path / "dollar.png").stat().st_size > 5_000


def test_a_short_command_has_a_peak_and_no_sample_of_its_exited_process(tmp_path, capsys):
    """`monitor -- true` reported 0 B: its samples were of the exited process, not yet reaped."""
    out = tmp_path / "short"
    assert cli.main(["monitor", "--interval", "0.01", "--out", str(out), "--device", "cpu", "--", "true"]) == 0
    together = next(line for line in capsys.readouterr().out.splitlines() if "(together)" in line)
    assert together.split()[-1] in ("KiB", "MiB")  # a program's resident set: not 0 B
    rows = (tmp_path / "short.csv").read_text().splitlines()[1:]
    assert all(int(r.split(",")[2]) > 0 for r in rows)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_command_ended_by_a_signal_exits_as_the_shell_says(tmp_path, signum):
    """128 + N, as a shell reports it (137, 143); it was 256 - N (247, 241)."""
    code = f"import os; os.kill(os.getpid(), {int(signum)})"
    assert cli.main(["monitor", "--out", str(tmp_path / "sig"), "--device", "cpu", "--",
                     sys.executable, "-c", code]) == 128 + signum


IGNORES = "import signal; [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]; "


@pytest.mark.parametrize("child,signals,status", [("", [signal.SIGTERM], 143),
                                                  (IGNORES, [signal.SIGINT, signal.SIGINT], 137)],
                         ids=["sigterm_is_passed_on", "second_ctrl_c_kills_a_command_that_ignores_it"])
def test_signals_reach_the_command_which_is_reaped_and_the_csv_is_written(tmp_path, child, signals, status):
    """SIGTERM to the monitor left the command running on its own and wrote no CSV; a second
    Ctrl-C, while the command ignored the first, did the same with a traceback."""
    root = os.path.dirname(os.path.dirname(tinymem.__file__))
    code = child + "import time; print('ready', flush=True); time.sleep(60)"
    monitor = subprocess.Popen([sys.executable, "-m", "tinymem", "monitor", "--interval", "0.02", "--out",
                                str(tmp_path / "sig"), "--device", "cpu", "--", sys.executable, "-c", code],
                               stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=root))
    command = None
    try:
        assert monitor.stdout.readline().strip() == "ready"
        command = psutil.Process(monitor.pid).children()[0]
        for signum in signals:
            monitor.send_signal(signum)
            time.sleep(1.0)  # each handled on its own: two signals pending at once are one
        assert monitor.wait(timeout=30) == status
        assert not command.is_running()
        rows = (tmp_path / "sig.csv").read_text().splitlines()
        assert rows[0] == "t,pid,rss_bytes,gpu_bytes" and any(f",{command.pid}," in r for r in rows[1:])
    finally:  # nothing left behind, whatever failed
        if command is not None and command.is_running():
            command.kill()
        if monitor.poll() is None:
            monitor.kill()



@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pseudo-terminal (pty.fork)")
def test_a_ctrl_c_from_the_terminal_is_not_passed_on_again():
    """A terminal sends Ctrl-C's SIGINT to its whole foreground process group, the command
    included: passed on as well, a second KeyboardInterrupt could cut the command's clean-up
    short. Inside a terminal's foreground group it is recognised; SIGTERM never is."""
    import pty

    from tinymem.memory.command import _from_terminal
    pid, fd = pty.fork()
    if pid == 0:  # a session leader whose controlling terminal is the pty
        me = os.getpid()
        from_terminal = _from_terminal(signal.SIGINT, me) and not _from_terminal(signal.SIGTERM, me)
        other_group = subprocess.Popen(["sleep", "5"], start_new_session=True)
        outside = _from_terminal(signal.SIGINT, other_group.pid)  # the terminal did not reach it
        other_group.kill()
        other_group.wait()
        null = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):  # no terminal on any standard stream: a SIGINT is passed on
            os.dup2(null, stream)
        os._exit(0 if from_terminal and not outside and not _from_terminal(signal.SIGINT, me) else 1)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0
