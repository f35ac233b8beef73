"""Files and shared-memory segments that only this user (or a group the user names) can reach.

The shared device's lock files (``tinymem-NAME.lock`` and ``.queue`` in the temp folder) and
its table (the ``tinymem_NAME`` segment in ``/dev/shm``) have names anyone can predict, in
folders anyone can write. On a machine shared by several users, another user could create one
of them first (or plant a symbolic link under its name to a file of theirs), and this process
would then join their table: their budget, their queue. So every one of them is

- opened without following a symbolic link (``O_NOFOLLOW``; ``shm_open`` never follows one),
  and created with ``O_EXCL``, so that "create" never means "open someone else's";
- made with mode 0o600, or 0o660 and the group's ownership when a group is named (the
  ``group=`` argument, or ``$TINYMEM_SHARED_GROUP``): users of one group may then share a device;
- checked after opening (``fstat`` of the open descriptor, so nothing can be swapped in between):
  a regular file with one name (a hard link planted under the name, which ``O_NOFOLLOW`` does
  not stop where ``fs.protected_hardlinks`` is 0, is another file's second name: making it
  private would change that file's mode), owned by this user, or by the named group without
  access for other users. Anything else is refused with a :class:`PermissionError` that says whose it is and what to do.

Cost: one ``fstat`` per open (a microsecond); nothing per check of the budget.
"""
import errno
import grp
import os
import pwd
import stat

GROUP_VARIABLE = "TINYMEM_SHARED_GROUP"


def resolve_group(group=None):
    """The group id that may share this user's devices: ``group`` (a name or a gid), else
    ``$TINYMEM_SHARED_GROUP``, else None (this user only). A string of digits that names no
    group is read as a gid (the variable cannot hold an int). This user must belong to it."""
    if group is None:
        group = os.environ.get(GROUP_VARIABLE) or None
        if group is None:
            return None
    if isinstance(group, bool):  # an int to Python: False would have named group 0 (root's)
        raise TypeError(f"group= takes a group's name or gid, got {group!r}; None (the default) keeps "
                        "the device to this user")
    try:
        gid = grp.getgrgid(group).gr_gid if isinstance(group, int) else _group_by_name(group)
    except (KeyError, TypeError, OverflowError):
        raise ValueError(f"the group {group!r} named to share a device (group= or ${GROUP_VARIABLE}) "
                         "does not exist on this machine; name one of your groups (see `id`)") from None
    if gid != os.getgid() and gid not in os.getgroups():
        raise ValueError(f"the group {group!r} named to share a device (group= or ${GROUP_VARIABLE}) "
                         "is not one of yours; name one of your groups (see `id`)")
    return gid


def _group_by_name(name):
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if isinstance(name, str) and name.isascii() and name.isdigit():
            return grp.getgrgid(int(name)).gr_gid
        raise


def _name_of(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def claim(fd, gid):
    """Make a descriptor this process has just created private: mode 0o600, or 0o660 and group
    ``gid`` when one is named (the umask would otherwise decide the mode)."""
    if gid is not None:
        os.fchown(fd, -1, gid)
    os.fchmod(fd, 0o600 if gid is None else 0o660)


def check_owner(fd, what, gid):
    """Refuse an open ``what`` (a file or segment, described for the message) that is not a
    regular file of one name, owned by this user, or by group ``gid`` and closed to other users.
    One of this user's own is made private again (an older tinymem made its lock files 0o666
    less the umask); nothing is changed on a refused one."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise PermissionError(f"{what} is not a regular file: refusing to use it; remove it if it is yours")
    if st.st_nlink > 1:
        raise PermissionError(f"{what} is a hard link ({st.st_nlink} names for one file): refusing it (someone "
                              "may have planted it to have this file's mode changed); remove it if it is yours")
    if st.st_uid == os.getuid():
        claim(fd, gid)
        return
    by_group = gid is not None and st.st_gid == gid
    if not by_group or st.st_mode & 0o007:
        shared = "" if gid is None else " (nor a file of the group you named, closed to other users)"
        raise PermissionError(
            f"{what} belongs to {_name_of(st.st_uid)}, not to you{shared}: joining it would put this "
            f"process under their budget and queue. Use another device name, or share one with users "
            f"of a common group by naming it (group= or ${GROUP_VARIABLE})")


def open_private(path, what, gid):
    """Open ``path`` for reading and writing, creating it if absent, never through a link, and
    only if it is this user's (or group ``gid``'s). Returns the descriptor."""
    flags = os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(10):  # a file removed between "exists" and "open": try again
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            try:
                claim(fd, gid)
            except BaseException:
                os.close(fd)
                raise
            return fd
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _refusal(path, what, exc) from None
        try:
            check_owner(fd, what, gid)
        except BaseException:
            os.close(fd)
            raise
        return fd
    raise OSError(f"{what} kept disappearing while being opened; try again")


def _refusal(path, what, exc):
    """The error for ``path`` that could not be opened (``exc``): what is there, and what to do."""
    if exc.errno == errno.ELOOP:
        return PermissionError(f"{what} is a symbolic link: refusing to follow it (someone may have "
                               "planted it); remove it if it is yours")
    if exc.errno == errno.ENXIO:  # a socket: open() cannot open one (a FIFO opens, and fstat refuses it)
        return PermissionError(f"{what} is not a regular file: refusing to use it; remove it if it is yours")
    if exc.errno == errno.EISDIR:
        return PermissionError(f"{what} is a directory, not a file: refusing to use it; remove it if it "
                               "is yours, or use another device name")
    if exc.errno in (errno.EACCES, errno.EPERM):
        try:
            owner = _name_of(os.lstat(path).st_uid)
        except OSError:
            owner = "another user"
        return PermissionError(
            f"{what} belongs to {owner} and is closed to you: use another device name, or, to share "
            f"one device, both name a group you are in (group= or ${GROUP_VARIABLE})")
    return exc
