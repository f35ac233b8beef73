"""Starting ranks with ``mpiexec``, and stopping all of them when one fails.

Launch a script on N processes with the ``mpiexec`` installed next to this Python (the
``mpich`` wheel of the ``dist`` extra puts it there)::

    mpiexec -n 4 python my_training.py
    python -c "from tinymem.distributed import launch; launch.run(['my_training.py'], 4)"

Pitfall: ``Abort`` tears the job down at once, and ``mpiexec`` loses what a rank wrote that
its proxy had not yet read from the rank's stdout/stderr pipes: sometimes the very message
saying why. :func:`abort` flushes, waits (at most 2 s) until the pipes are read, then aborts.

Failure behaviour. A collective waits for every rank, so a rank that raises while the others
wait in an all-reduce would leave them waiting forever. Two guards stop that:

* :func:`install_excepthook` (call it first thing in a rank's script): an uncaught exception
  prints ``rank r of N failed: ...`` with its traceback and calls ``MPI.COMM_WORLD.Abort``;
  ``mpiexec`` then kills every rank and exits non-zero. ``sys.exit(status)`` with a non-zero
  status does the same at once (a plain exit would wait in ``MPI_Finalize`` for ranks that
  wait for it). ``raise SystemExit(3)`` bypasses both: call ``sys.exit``.
* The communicator's watchdog (:mod:`tinymem.distributed.comm`) aborts a rank whose blocking
  call outlives ``timeout`` seconds: the cure for a peer that died without raising.

:func:`run` adds a third, outside the job: a wall-clock limit after which the whole process
group of ``mpiexec`` is killed. It starts Open MPI's ``mpiexec`` as well as MPICH's, as root too
(:func:`command` says what each needs).
"""
import functools
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
import traceback


def mpiexec_path():
    """The ``mpiexec`` next to ``sys.executable`` (else the one on PATH), or ``None``."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(here):
        return here
    return shutil.which("mpiexec")


def mpi_available():
    """True when mpi4py imports and an ``mpiexec`` is found."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return mpiexec_path() is not None


def install_excepthook():
    """Make an uncaught exception, or ``sys.exit`` with a non-zero status, on any rank abort the
    whole job with a clear message."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    where = f"tinymem.distributed: rank {comm.Get_rank()} of {comm.Get_size()}"

    def hook(kind, value, tb):
        text = "".join(traceback.format_exception(kind, value, tb))
        abort(comm, f"{where} failed: {kind.__name__}: {value}\n{text}aborting every rank\n", 1)

    plain_exit = sys.exit

    def exit(status=None):
        if status is None or status == 0:
            plain_exit(status)
        code = status if isinstance(status, int) else 1
        abort(comm, f"{where} exited with status {status}: aborting every rank\n", code)

    sys.excepthook = hook
    sys.exit = exit


def abort(comm, message, code):
    """Write ``message`` to stderr, make sure mpiexec has it, then ``comm.Abort(code)``."""
    sys.stderr.write(message)
    wait_until_read((sys.stdout, sys.stderr))
    comm.Abort(code)


def wait_until_read(streams, timeout=2.0):
    """Flush ``streams`` and wait until the pipes behind them are empty (read by the process at
    the other end), or ``timeout`` seconds. Streams that are not pipes return at once."""
    fds = []
    for stream in streams:
        try:
            stream.flush()
            fds.append(stream.fileno())
        except (AttributeError, OSError, ValueError):
            continue
    deadline = time.monotonic() + timeout
    while any(_unread_bytes(fd) for fd in fds) and time.monotonic() < deadline:
        time.sleep(0.005)


def _unread_bytes(fd):
    """Bytes waiting in the pipe behind ``fd`` (Linux answers FIONREAD on either end)."""
    try:
        import fcntl
        import termios
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return 0
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except (ImportError, OSError):
        return 0


@functools.lru_cache(maxsize=None)
def implementation(mpiexec):
    """``"openmpi"``, ``"mpich"`` (MPICH and the launchers built on its Hydra, Intel MPI's too)
    or ``"unknown"``: what ``mpiexec --version`` says it is. Asked once per path."""
    try:
        done = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return implementation_of(done.stdout + done.stderr)


def implementation_of(version_text):
    """The implementation named by the text of ``mpiexec --version``."""
    text = version_text.lower()
    if "open mpi" in text or "openrte" in text or "open-mpi" in text:
        return "openmpi"
    if "mpich" in text or "hydra" in text:
        return "mpich"
    return "unknown"


def command(mpiexec, nprocs, argv, implementation, env=None, as_root=None):
    """The command line and environment that start ``python argv...`` on ``nprocs`` ranks.

    Open MPI refuses to start as root (a container's usual user) unless told twice, by the
    ``--allow-run-as-root`` option and by ``OMPI_ALLOW_RUN_AS_ROOT=1`` with
    ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``; and it refuses more ranks than cores unless told
    ``--oversubscribe`` (the tests start 4 ranks on 2-core machines). MPICH needs neither.
    ``as_root`` defaults to whether this process runs as root."""
    as_root = (hasattr(os, "geteuid") and os.geteuid() == 0) if as_root is None else as_root
    env = dict(os.environ if env is None else env)
    options = []
    if implementation == "openmpi":
        options.append("--oversubscribe")
        if as_root:
            options.append("--allow-run-as-root")
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return [mpiexec, *options, "-n", str(nprocs), sys.executable, *argv], env


class LaunchError(RuntimeError):
    """mpiexec is missing, a rank failed, or the job ran past its time limit."""


def run(argv, nprocs, timeout=300, env=None, cwd=None, check=True):
    """Run ``python argv...`` on ``nprocs`` ranks; returns the CompletedProcess (text output).

    With ``check`` a non-zero exit or a timeout raises :class:`LaunchError` carrying the end of
    the output. ``argv`` is what follows ``python``, e.g. ``["-m", "tinymem.distributed.worker", "check"]``.
    """
    mpiexec = mpiexec_path()
    if mpiexec is None:
        raise LaunchError("mpiexec not found: install the dist extra (pip install .[dist]), "
                          "which brings mpi4py and the mpich launcher")
    cmd, env = command(mpiexec, nprocs, argv, implementation(mpiexec), env)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise LaunchError(f"{' '.join(cmd)} ran past {timeout} s and was killed\n{_tail(out, err)}")
    result = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and proc.returncode != 0:
        raise LaunchError(f"{' '.join(cmd)} exited with {proc.returncode}\n{_tail(out, err)}")
    return result


def _tail(out, err, n=3000):
    return f"--- stdout ---\n{(out or '')[-n:]}\n--- stderr ---\n{(err or '')[-n:]}"
