"""The shared device's lock files and table are this user's (or a named group's): a symbolic
link planted under their names, or a file or segment of another user, is refused, not joined."""
import os
import socket
import stat
import tempfile
import uuid
from multiprocessing import resource_tracker, shared_memory

import pytest

from tinymem import memory
from tinymem.memory import shared
from tinymem.memory.shared import SharedDevice

BUDGET = 10_000_000


def _lock(name, kind="lock"):
    return os.path.join(tempfile.gettempdir(), f"tinymem-{name}.{kind}")


@pytest.fixture
def name():
    device = f"test-{uuid.uuid4().hex[:12]}"
    yield device
    for path in (_lock(device), _lock(device, "queue"), f"/dev/shm/tinymem_{device}"):
        if os.path.lexists(path):
            os.remove(path)


@pytest.fixture
def another_user(monkeypatch):
    """This process now runs as another user: what the real user made belongs to someone else."""
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 4242)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _open(kind, name):
    """Open device ``name``'s table (kind "lock") or queue (kind "queue") and leave it again."""
    if kind == "lock":
        SharedDevice(name, BUDGET).close()
    else:
        with memory.device_queue(name):
            pass


def _planted_segment(name, mode=0o600, size=64):
    shm = shared_memory.SharedMemory(f"tinymem_{name}", create=True, size=size)
    resource_tracker.unregister(shm._name, "shared_memory")
    os.fchmod(shm._fd, mode)
    shm.close()


def test_a_new_device_makes_its_lock_and_table_private(name):
    old = os.umask(0)  # the mode must not depend on the umask
    try:
        device = SharedDevice(name, BUDGET)
        try:
            assert _mode(_lock(name)) == 0o600 and _mode(f"/dev/shm/tinymem_{name}") == 0o600
        finally:
            device.close()
        with memory.device_queue(name):
            assert _mode(_lock(name, "queue")) == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("kind", ["lock", "queue"])
def test_a_symbolic_link_planted_at_a_lock_path_is_refused_and_its_target_untouched(name, kind, tmp_path):
    target = tmp_path / "victim"
    target.write_text("theirs")
    os.chmod(target, 0o644)
    os.symlink(target, _lock(name, kind))
    with pytest.raises(PermissionError, match="symbolic link: refusing to follow it"):
        _open(kind, name)
    assert target.read_text() == "theirs" and _mode(target) == 0o644
    assert not os.path.exists(f"/dev/shm/tinymem_{name}")


@pytest.mark.parametrize("kind", ["lock", "queue"])
def test_a_hard_link_planted_at_a_lock_path_is_refused_and_its_file_untouched(name, kind, tmp_path):
    # Where fs.protected_hardlinks is 0 anyone may link a file of this user's there; a link to
    # one's own file is allowed everywhere, so the test plants that.
    target = tmp_path / "victim"
    target.write_text("mine")
    os.chmod(target, 0o644)
    try:
        os.link(target, _lock(name, kind))
    except OSError as exc:  # the temporary folder on another file system than tmp_path
        pytest.skip(f"cannot hard-link into {tempfile.gettempdir()}: {exc}")
    with pytest.raises(PermissionError, match="is a hard link .2 names for one file.: refusing it"):
        _open(kind, name)
    assert target.read_text() == "mine" and _mode(target) == 0o644
    assert not os.path.exists(f"/dev/shm/tinymem_{name}")


def test_a_hard_link_planted_at_the_table_is_refused_and_its_segment_untouched(name):
    other = f"{name}-other"
    _planted_segment(other, mode=0o640, size=shared._SIZE)  # a table size: joinable but for the link
    try:
        os.link(f"/dev/shm/tinymem_{other}", f"/dev/shm/tinymem_{name}")
        with pytest.raises(PermissionError, match=f"/dev/shm/tinymem_{name} is a hard link"):
            SharedDevice(name, BUDGET)
        assert _mode(f"/dev/shm/tinymem_{other}") == 0o640
        with open(f"/dev/shm/tinymem_{other}", "rb") as f:
            assert f.read() == bytes(shared._SIZE)  # nothing written into it
    finally:
        os.remove(f"/dev/shm/tinymem_{other}")


@pytest.mark.parametrize("kind", ["lock", "queue"])
def test_a_lock_file_of_another_user_is_refused(name, kind, another_user):
    with open(_lock(name, kind), "w"):
        pass
    with pytest.raises(PermissionError, match="belongs to .*, not to you: joining it would put"):
        _open(kind, name)
    assert not os.path.exists(f"/dev/shm/tinymem_{name}")


def test_a_table_of_another_user_is_refused_and_left_alone(name, another_user):
    _planted_segment(name)
    with pytest.raises(PermissionError, match=f"/dev/shm/tinymem_{name} belongs to"):
        memory.track(budget=BUDGET, shared=name, measure=False).__enter__()
    assert os.path.exists(f"/dev/shm/tinymem_{name}")  # theirs: not removed either


def test_a_table_too_small_to_be_ours_is_refused(name):
    _planted_segment(name)
    with pytest.raises(PermissionError, match="is 64 bytes, not a table"):
        SharedDevice(name, BUDGET)


def test_a_named_group_shares_files_closed_to_other_users(name, another_user, monkeypatch):
    gid = os.getgid()
    with open(_lock(name), "w"):
        pass
    _planted_segment(name, 0o660)
    os.chmod(_lock(name), 0o660)
    monkeypatch.delenv("TINYMEM_SHARED_GROUP", raising=False)
    with pytest.raises(PermissionError, match="belongs to"):  # no group named: another user's file
        SharedDevice(name, BUDGET)
    os.chmod(_lock(name), 0o666)  # the group's, but open to every user: refused even so
    with pytest.raises(PermissionError, match="nor a file of the group you named"):
        SharedDevice(name, BUDGET, group=gid)
    os.chmod(_lock(name), 0o660)
    with pytest.raises(PermissionError, match="is 64 bytes"):  # lock and segment's owner accepted
        SharedDevice(name, BUDGET, group=gid)


def test_a_named_group_gets_group_files(name, monkeypatch):
    monkeypatch.setenv("TINYMEM_SHARED_GROUP", _group_name())
    device = SharedDevice(name, BUDGET)
    try:
        for path in (_lock(name), f"/dev/shm/tinymem_{name}"):
            assert _mode(path) == 0o660 and os.stat(path).st_gid == os.getgid()
    finally:
        device.close()


def _group_name():
    import grp
    return grp.getgrgid(os.getgid()).gr_name


def test_an_older_private_file_of_ours_is_made_private_again(name):
    with open(_lock(name, "queue"), "w"):
        pass
    os.chmod(_lock(name, "queue"), 0o666)
    with memory.device_queue(name):
        pass
    assert _mode(_lock(name, "queue")) == 0o600


def test_a_group_that_does_not_exist_or_is_not_ours_is_refused(name, monkeypatch):
    with pytest.raises(ValueError, match="does not exist on this machine"):
        SharedDevice(name, BUDGET, group="no-such-group-tinymem")
    monkeypatch.setattr(os, "getgroups", lambda: [])
    monkeypatch.setattr(os, "getgid", lambda: 4242)
    with pytest.raises(ValueError, match="is not one of yours"):
        with memory.device_queue(name, group=0):
            pass
    assert not os.path.exists(_lock(name)) and not os.path.exists(_lock(name, "queue"))


@pytest.mark.parametrize("kind", ["lock", "queue"])
def test_a_directory_at_a_lock_path_is_refused_with_what_to_do(name, kind):
    os.mkdir(_lock(name, kind))
    try:
        with pytest.raises(PermissionError, match="is a directory, not a file: refusing"):
            _open(kind, name)
        assert not os.path.exists(f"/dev/shm/tinymem_{name}")
    finally:
        os.rmdir(_lock(name, kind))


@pytest.mark.parametrize("kind", ["lock", "queue"])
@pytest.mark.parametrize("planted", ["fifo", "socket"])
def test_a_fifo_or_socket_at_a_lock_path_is_refused_with_what_to_do(name, kind, planted):
    # Before, a socket there raised a bare OSError ("[Errno 6] No such device or address").
    path = _lock(name, kind)
    if planted == "fifo":
        os.mkfifo(path)
    else:
        socket.socket(socket.AF_UNIX).bind(path)
    with pytest.raises(PermissionError, match="is not a regular file: refusing to use it; remove it if it is yours"):
        _open(kind, name)
    assert stat.S_IFMT(os.lstat(path).st_mode) == (stat.S_IFIFO if planted == "fifo" else stat.S_IFSOCK)
    assert not os.path.exists(f"/dev/shm/tinymem_{name}")
    # Removed, the path is a good lock again.
    os.remove(path)
    _open(kind, name)
    assert _mode(path) == 0o600


@pytest.mark.parametrize("kind", ["lock", "queue"])
def test_a_lock_file_closed_to_this_user_names_its_owner(name, kind, monkeypatch):
    # Another user's 0o600 file: os.open fails with EACCES (as root it would not, so it is played).
    import errno
    with open(_lock(name, kind), "w"):
        pass
    real_open = os.open

    def closed(path, flags, *args):
        if path == _lock(name, kind) and not flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", closed)
    with pytest.raises(PermissionError, match=r"belongs to \S+ and is closed to you: use another device name"):
        _open(kind, name)


def test_a_bool_is_no_group(name):
    for flag in (False, True):  # False was read as gid 0, the root group
        with pytest.raises(TypeError, match=f"group= takes a group's name or gid, got {flag}"):
            SharedDevice(name, BUDGET, group=flag)
    assert not os.path.exists(_lock(name))


def test_the_group_variable_may_hold_a_gid(name, monkeypatch):
    monkeypatch.setenv("TINYMEM_SHARED_GROUP", str(os.getgid()))
    with memory.device_queue(name):
        assert _mode(_lock(name, "queue")) == 0o660 and os.stat(_lock(name, "queue")).st_gid == os.getgid()
