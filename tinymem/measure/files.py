"""Writing a file atomically: a reader sees the old file or the whole new one, never half.

Every file tinymem writes for a user (checkpoints, ONNX models, memory snapshots, timeline
pages) goes through :func:`write_atomically`: the bytes go to a temporary file in the target's
folder, are flushed to the disk, and the temporary file is renamed over the target (a rename
within one folder is atomic). When anything fails the temporary file is removed.
:func:`write_together` writes several files (a page and its snapshot) all or none.
"""
import os
import secrets
import stat


def write_atomically(path, write, suffix=""):
    """Call ``write(file)`` on a temporary file beside ``path``, flush it to the disk and rename
    it over ``path``: a reader sees the old file or the whole new one, never half of it, and the
    temporary file is removed when anything fails. A new file gets the usual permissions (0666
    less the umask); an overwritten one keeps its own. A symlink is written through: its target
    is replaced, the link kept. A FIFO or device there is refused (ValueError), not replaced."""
    write_together([(path, write, suffix)])


def write_together(files):
    """Write several files as one: ``files`` is ``[(path, write, suffix), ...]``, each written
    as :func:`write_atomically` does, except that no target is renamed over before every one of
    them is written. A failure while writing (a full disk, ``write`` raising) leaves every target
    as it was; only a failure between two renames (each atomic) could leave some renamed. One
    file named twice (through a symlink or ``./``) is refused: the second would replace the first."""
    staged, named = [], {}
    try:
        for path, write, suffix in files:
            staged.append(_staged(path, write, suffix))
            target = staged[-1][1]
            if target in named:
                raise ValueError(f"cannot write {path} and {named[target]} together: they are one file "
                                 f"({target}); give them two names")
            named[target] = path
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise


def _staged(path, write, suffix):
    """``write`` into a new temporary file beside ``path``'s target, flushed, with the target's
    mode: ``(temporary path, target)``. The temporary file is removed when anything fails."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"the path to write must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fsdecode(path)
    if not path or path.endswith(("/", os.sep)):
        raise ValueError(f"cannot write {path!r}: give a file name (e.g. 'out.html'), not an empty path or a folder")
    target = os.path.realpath(path)  # through a symlink, as open(path, "w") writes: the link stays a link
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):  # else the error names the temporary file, not the folder
        raise FileNotFoundError(f"cannot write {path}: the folder {folder} does not exist; create it first")
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot write {path}: it is a folder; give a file name inside it")
    try:
        st = os.stat(target)
    except FileNotFoundError:
        mode = None
    else:  # a FIFO or a device (/dev/null, /dev/stdout) would be replaced by a regular file
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"cannot write {path}: it is not a regular file (a FIFO, device or socket), "
                             "which a rename would replace; give a file name")
        mode = stat.S_IMODE(st.st_mode)
    fd, tmp = _create_temporary(folder, suffix, path)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return tmp, target


def _create_temporary(folder, suffix, path):
    """A new file beside the target, opened like ``open(..., "w")`` would create it (0666 less
    the umask; ``tempfile.mkstemp`` makes 0600, which the rename would hand to the target)."""
    for _ in range(100):
        tmp = os.path.join(folder, f".tmp-{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
        except PermissionError:
            raise PermissionError(f"cannot write {path}: the folder {folder} is not writable; "
                                  "choose another folder") from None
    raise FileExistsError(f"cannot create a temporary file in {folder}")
