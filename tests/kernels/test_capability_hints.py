"""A missing optional kernel language names the extra to install, by local path: our
distributions are not on an index (PyPI's `tensorplay` is an unrelated project)."""

from __future__ import annotations

import importlib.util

from tensorplay.kernels import _capability


def test_missing_triton_names_the_local_extra(monkeypatch):
    monkeypatch.setattr(_capability, "_triton_installed", lambda: False)
    why = _capability.triton_unavailable_reason("cpu")
    assert why == (
        "Triton is not installed (pip install './packages/tensorplay-kernels[triton]' "
        "from a TensorPlay checkout)"
    )


def test_missing_tilelang_names_the_local_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "tilelang" else real(name, *a)
    )
    _capability.tilelang_unavailable_reason.cache_clear()
    try:
        why = _capability.tilelang_unavailable_reason()
    finally:
        _capability.tilelang_unavailable_reason.cache_clear()
    assert why.startswith(
        "TileLang is not installed (pip install './packages/tensorplay-kernels[tilelang]' "
        "from a TensorPlay checkout; it requires torch"
    ), why
