"""`tinymem monitor -- command`: the process table, the CSV and the PNG, and the command's exit code."""
import sys

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
