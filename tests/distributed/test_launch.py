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
