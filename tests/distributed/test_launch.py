"""The launcher's guards that need no MPI: a rank's last words reach the pipe's reader before
the abort (``wait_until_read``)."""
import os
import threading
import time

from tinymem.distributed import launch


class _Pipe:
    def __init__(self, fd):
        self.fd = fd

    def fileno(self):
        return self.fd

    def flush(self):
        pass


def test_wait_until_read_returns_once_the_reader_has_the_bytes():
    r, w = os.pipe()
    os.write(w, b"rank 1 of 2 failed: ...\n")
    got = []
    reader = threading.Timer(0.3, lambda: got.append(os.read(r, 1024)))
    start = time.monotonic()
    reader.start()
    launch.wait_until_read([_Pipe(w)], timeout=10)
    waited = time.monotonic() - start
    reader.join()
    os.close(r)
    os.close(w)
    assert got == [b"rank 1 of 2 failed: ...\n"]
    assert 0.25 <= waited < 5


def test_wait_until_read_gives_up_after_its_timeout_and_ignores_non_pipes(tmp_path):
    r, w = os.pipe()
    os.write(w, b"nobody reads this")
    start = time.monotonic()
    launch.wait_until_read([_Pipe(w)], timeout=0.2)
    assert 0.15 <= time.monotonic() - start < 2
    with open(tmp_path / "log", "w") as f:
        start = time.monotonic()
        launch.wait_until_read([f, object()], timeout=5)
        assert time.monotonic() - start < 0.5
    os.close(r)
    os.close(w)


OPEN_MPI_4 = "mpiexec (OpenRTE) 4.1.2\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
OPEN_MPI_5 = "mpiexec (Open MPI) 5.0.3\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
MPICH = "HYDRA build details:\n    Version:                                 4.2.0\n    Release Date: ...\n"


def test_the_implementation_is_read_from_mpiexec_version():
    assert launch.implementation_of(OPEN_MPI_4) == launch.implementation_of(OPEN_MPI_5) == "openmpi"
    assert launch.implementation_of(MPICH) == "mpich"
    assert launch.implementation_of("some other launcher 1.0") == "unknown"


def test_the_implementation_of_a_real_launcher_comes_from_running_it(tmp_path):
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\nprintf '{OPEN_MPI_5.splitlines()[0]}\\n'\n")
    fake.chmod(0o755)
    assert launch.implementation(str(fake)) == "openmpi"
    assert launch.implementation(str(tmp_path / "missing")) == "unknown"


def test_open_mpi_as_root_is_told_twice_and_may_oversubscribe():
    cmd, env = launch.command("/usr/bin/mpiexec", 4, ["-m", "w"], "openmpi", env={"PATH": "/bin"}, as_root=True)
    assert cmd[:5] == ["/usr/bin/mpiexec", "--oversubscribe", "--allow-run-as-root", "-n", "4"]
    assert cmd[-2:] == ["-m", "w"]
    assert env == {"PATH": "/bin", "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    cmd, env = launch.command("/usr/bin/mpiexec", 2, ["x.py"], "openmpi", env={}, as_root=False)
    assert "--allow-run-as-root" not in cmd and "--oversubscribe" in cmd and env == {}


def test_mpich_gets_the_plain_command_as_root_or_not():
    for as_root in (True, False):
        cmd, env = launch.command("mpiexec", 2, ["x.py"], "mpich", env={"A": "1"}, as_root=as_root)
        assert cmd[:3] == ["mpiexec", "-n", "2"] and cmd[-1] == "x.py" and env == {"A": "1"}
