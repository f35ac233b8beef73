"""What ``nvidia-smi`` shows: a GPU's used memory and each process's share of it.

Read through NVML (the library behind ``nvidia-smi``, Python package ``nvidia-ml-py``, module
``pynvml``, in the ``gpu`` extra); without it, by parsing

    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits

A process's share includes its CUDA context (a few hundred MiB before the first array) and
everything its allocator caches, so it is larger than the bytes its arrays hold. In a container
the PIDs may be the host's, not the container's. Cost: one NVML call is a few microseconds;
one ``nvidia-smi`` run is tens of milliseconds, so the fallback suits sampling every 0.1 s, not
every millisecond.
"""
import shutil
import subprocess

MIB = 2**20
_QUERY_APPS = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
_QUERY_GPU = ["--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"]


class NvidiaUnavailable(RuntimeError):
    """Neither NVML nor ``nvidia-smi`` can be reached on this machine."""


def _nvml():
    """The initialised ``pynvml`` module, or ``None`` when NVML cannot be used."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:  # not installed, no driver, or no GPU: the caller falls back
        return None


def parse_apps_csv(text):
    """``{pid: bytes}`` from the CSV of ``--query-compute-apps=pid,used_memory`` (MiB, no units).

    Rows the driver cannot fill (``[N/A]``, ``[Not Supported]``) are skipped; one PID on several
    rows (one per GPU) is summed.
    """
    used = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        try:
            mib = float(parts[1].split()[0])
        except (ValueError, IndexError):
            continue
        pid = int(parts[0])
        used[pid] = used.get(pid, 0) + int(mib * MIB)
    return used


def _smi(args):
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise NvidiaUnavailable("no GPU monitor here: install nvidia-ml-py (pip install .[gpu]) "
                                "or put nvidia-smi on the PATH")
    result = subprocess.run([exe, *args], capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise NvidiaUnavailable(f"nvidia-smi failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


class GpuReader:
    """Reads GPU ``index``: :meth:`processes` ``{pid: bytes}`` and :meth:`used` ``(used, total)``.

    ``source`` is ``"nvml"`` or ``"nvidia-smi"``, whichever works first; construction raises
    :class:`NvidiaUnavailable` when neither does.
    """

    def __init__(self, index=0):
        self.index = index
        self.nvml = _nvml()
        if self.nvml is not None:
            self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            self.source = "nvml"
        else:
            _smi(_QUERY_GPU)  # raises NvidiaUnavailable when there is nothing to read
            self.source = "nvidia-smi"

    def processes(self):
        if self.nvml is None:
            return parse_apps_csv(_smi(_QUERY_APPS + [f"--id={self.index}"]))
        used = {}
        for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle):
            # usedGpuMemory is None where the driver does not report it (some containers, MIG)
            used[p.pid] = used.get(p.pid, 0) + int(p.usedGpuMemory or 0)
        return used

    def used(self):
        if self.nvml is None:
            line = _smi(_QUERY_GPU + [f"--id={self.index}"]).strip().splitlines()[0]
            used, total = (int(float(v)) * MIB for v in line.split(","))
            return used, total
        info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        return int(info.used), int(info.total)


def available():
    """True when NVML or ``nvidia-smi`` answers."""
    try:
        GpuReader()
        return True
    except (NvidiaUnavailable, OSError, subprocess.SubprocessError):
        return False


def format_processes(used, names=None, this_pid=None):
    """An ``nvidia-smi``-like process list: PID, name, used memory (``used``: ``{pid: bytes}``)."""
    names = names or {}
    lines = [f"  {'PID':>8}  {'process':<24} {'used':>16}"]
    for pid, nbytes in sorted(used.items(), key=lambda kv: -kv[1]):
        who = names.get(pid, "") + (" (this process)" if pid == this_pid else "")
        lines.append(f"  {pid:>8}  {who:<24} {nbytes:>14,d} B  ({nbytes / MIB:.1f} MiB)")
    return "\n".join(lines)
