"""write_atomically and write_together, as every file tinymem writes for a user goes: paths users give."""
import os
import stat

import pytest

from tinymem.measure.files import write_atomically, write_together


def _hi(f):
    f.write(b"hi")


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    (tmp_path / "real.html").write_text("old")
    os.symlink("real.html", tmp_path / "link.html")
    write_atomically(tmp_path / "link.html", _hi)
    assert os.path.islink(tmp_path / "link.html") and (tmp_path / "real.html").read_text() == "hi"
    assert sorted(os.listdir(tmp_path)) == ["link.html", "real.html"]


def test_a_bytes_path_is_written(tmp_path):
    write_atomically(os.fsencode(tmp_path / "b.html"), _hi)
    assert (tmp_path / "b.html").read_text() == "hi"


@pytest.mark.parametrize("name", ["", "new.html/"])
def test_an_empty_path_or_one_ending_in_a_slash_is_refused_naming_it(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="give a file name"):
        write_atomically(name, _hi)
    assert os.listdir(tmp_path) == [] and not any(f.startswith(".tmp-") for f in os.listdir(tmp_path.parent))


def test_files_written_together_are_all_or_none(tmp_path):
    (tmp_path / "page.html").write_text("old page")

    def fails(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_together([(tmp_path / "page.html", _hi, ".html"), (tmp_path / "step.pickle", fails, ".pickle")])
    assert os.listdir(tmp_path) == ["page.html"] and (tmp_path / "page.html").read_text() == "old page"
    write_together([(tmp_path / "page.html", _hi, ".html"), (tmp_path / "step.pickle", _hi, ".pickle")])
    assert sorted(os.listdir(tmp_path)) == ["page.html", "step.pickle"]
    assert (tmp_path / "page.html").read_text() == (tmp_path / "step.pickle").read_text() == "hi"


@pytest.mark.parametrize("second", ["page.html", "./page.html", "link.html"])
def test_one_file_named_twice_in_files_written_together_is_refused_and_nothing_written(tmp_path, second):
    # Before, both were written and the second silently replaced the first: one of two was lost.
    (tmp_path / "page.html").write_text("old page")
    os.symlink("page.html", tmp_path / "link.html")
    with pytest.raises(ValueError, match=f"cannot write {tmp_path / second} and {tmp_path / 'page.html'} together: "
                                         "they are one file"):
        write_together([(tmp_path / "page.html", _hi, ".html"), (tmp_path / second, lambda f: f.write(b"b"), "")])
    assert sorted(os.listdir(tmp_path)) == ["link.html", "page.html"]
    assert (tmp_path / "page.html").read_text() == "old page"


def test_a_fifo_or_device_at_the_path_is_refused_and_left_as_it_is(tmp_path):
    # Before, the temporary file was renamed over it: a FIFO (or, as root, /dev/null) became a
    # regular file holding the page.
    os.mkfifo(tmp_path / "fifo")
    nodes = ["fifo"]
    if os.geteuid() == 0:  # only root may make a device node: a copy of /dev/null's
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        nodes.append("null")
    for name in nodes:
        kind = stat.S_IFMT(os.lstat(tmp_path / name).st_mode)
        with pytest.raises(ValueError, match=f"cannot write {tmp_path / name}: it is not a regular file"):
            write_atomically(tmp_path / name, _hi)
        assert stat.S_IFMT(os.lstat(tmp_path / name).st_mode) == kind
    assert sorted(os.listdir(tmp_path)) == sorted(nodes)
    write_atomically(tmp_path / "page.html", _hi)
    assert (tmp_path / "page.html").read_text() == "hi"
