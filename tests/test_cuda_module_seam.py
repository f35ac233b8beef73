"""``backend.use_cuda_module``, the seam the stand-in enters by: what it replaces comes back
whole, ``cupyx`` included, whatever order the tests run in."""
import types

import standin_cupy
from tinymem import backend


def test_restoring_a_cupy_without_a_cupyx_attribute_keeps_its_cupyx(monkeypatch):
    """The real ``cupy`` module has no ``cupyx`` attribute (``get_cupy`` imports ``cupyx`` on
    its own): after a test that installed the stand-in, ``get_cupyx()`` must still be it."""
    real_cupyx = types.SimpleNamespace(scatter_add=lambda *a: None)
    real_cupy = types.SimpleNamespace(__version__="13.6.0")  # like cupy: no .cupyx
    monkeypatch.setattr(backend, "_cupy", real_cupy)
    monkeypatch.setattr(backend, "_cupyx", real_cupyx)
    with standin_cupy.installed():
        assert backend.get_cupyx() is standin_cupy.cupyx
    assert backend.get_cupy() is real_cupy
    assert backend.get_cupyx() is real_cupyx


def test_installing_twice_in_a_row_restores_each_level():
    before = backend._cupy, backend._cupyx
    with standin_cupy.installed():
        with standin_cupy.installed():
            assert backend.get_cupyx() is standin_cupy.cupyx
        assert backend.get_cupyx() is standin_cupy.cupyx
    assert (backend._cupy, backend._cupyx) == before
