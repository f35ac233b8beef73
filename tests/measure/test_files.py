"""write_atomically, as every file tinymem writes for a user goes: paths users give."""
import os

import pytest

from tinymem.measure.files import write_atomically


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
