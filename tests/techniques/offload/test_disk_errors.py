"""Where disk offload cannot write, it says so (not a raw OSError, not a wrong reason)."""
import errno
import os
import tempfile

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem.techniques import offload
from tinymem.techniques.offload import OffloadError


def test_a_file_where_the_directory_should_be_is_named_as_such(tmp_path):
    path = tmp_path / "not_a_folder"
    path.write_text("x")
    with pytest.raises(OffloadError, match="is a file, not a directory"):
        with offload.save_on_disk(str(path)):
            pass
    with pytest.raises(OffloadError, match="does not exist"):
        with offload.save_on_disk(str(tmp_path / "nowhere")):
            pass


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_a_folder_that_cannot_be_created_raises_an_offload_error(code, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    with pytest.raises(OffloadError, match=rf"{os.strerror(code)}.*writable directory="):
        with offload.save_on_disk(str(tmp_path)):
            pass


def test_a_read_only_file_system_at_write_time_raises_an_offload_error(tmp_path, monkeypatch):
    from tinymem.techniques.offload import store

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path)
    monkeypatch.setattr(store, "open", read_only, raising=False)
    model = tm.models.MLP([8, 16, 4])
    x = tm.tensor(np.ones((4, 8), np.float32))
    with pytest.raises(OffloadError, match="Read-only file system"):
        with offload.save_on_disk(str(tmp_path), prefetch=0):
            F.cross_entropy(model(x), np.zeros(4, np.int64)).backward()
    assert os.listdir(tmp_path) == []
