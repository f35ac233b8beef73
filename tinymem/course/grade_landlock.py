"""Confine this process's writes to a few folders with Linux Landlock (no root needed).

``tinymem course grade`` calls :func:`confine_writes` in each student's checks process before any
of the student's code runs: from then on the process and its children may read everywhere, but
may create, write, truncate, rename or delete files only beneath the folders it names (and write
``/dev/null``). A submission that deletes or overwrites the course's files, another student's
folder or the teacher's home gets ``PermissionError`` instead.

Landlock needs Linux 5.13 or later with Landlock enabled (most distributions since 2022);
elsewhere :func:`confine_writes` returns None and nothing is confined, which the grader reports.
From Landlock ABI 6 (Linux 6.12) it may also signal only the processes it started itself, so a
submission cannot kill the grader. Reads and the network are not confined (nor signals, before
ABI 6): this is a guard against a careless or clumsy submission, not a sandbox against a hostile one.

Memory cost: none (a few kernel objects).
"""
import ctypes
import os
import sys

# The three system calls have the same numbers on every architecture (the unified table, 5.13+).
CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

WRITE_FILE, REMOVE_DIR, REMOVE_FILE = 1 << 1, 1 << 4, 1 << 5
MAKE = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
REFER, TRUNCATE = 1 << 13, 1 << 14  # Landlock ABI 2 and 3
SCOPE_SIGNAL = 1 << 1  # Landlock ABI 6 (Linux 6.12): signals only to processes inside the domain


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # struct landlock_path_beneath_attr is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi_version():
    """The kernel's Landlock ABI version, or 0 when it has none (or this is not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(int(version), 0)


def confine_writes(folders):
    """From now on, this process (and what it starts) may change files only beneath ``folders``
    (and write /dev/null). Returns the Landlock ABI version used, or None when the kernel has no
    Landlock (nothing is confined then). Cannot be undone."""
    abi = abi_version()
    if abi < 1:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    handled = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    # struct landlock_ruleset_attr: handled_access_fs, handled_access_net (none), scoped (ABI 6):
    # from 6 on, a submission cannot kill or stop the grader or any process it did not start
    attr = (ctypes.c_uint64 * 3)(handled, 0, SCOPE_SIGNAL) if abi >= 6 else (ctypes.c_uint64 * 1)(handled)
    ruleset = libc.syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        file_rights = WRITE_FILE | (TRUNCATE if abi >= 3 else 0)
        for path, rights in [(os.fspath(f), handled) for f in folders] + [("/dev/null", file_rights)]:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(rights, fd)
                if libc.syscall(ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)):
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(fd)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(RESTRICT_SELF, ruleset, ctypes.c_uint32(0)):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi
