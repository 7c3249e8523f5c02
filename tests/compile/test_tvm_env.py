"""Finding apache-tvm: missing install, tilelang's bundled tvm (simulated), targets."""

from __future__ import annotations

import sys
import types

import pytest

import tensorplay as tp
from tensorplay.compiler import list_backends, tvm_status
from tensorplay.compiler._tvm_env import load_tvm


def test_missing_apache_tvm_is_listed_and_fails_on_first_call(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm", None)  # `import tvm` raises ImportError
    assert "tvm" in list_backends()
    cf = tp.compile(lambda x: x * 2, backend="tvm")  # building nothing yet: no error
    with pytest.raises(RuntimeError) as info:
        cf(tp.ones(2))
    msg = str(info.value)
    assert "apache-tvm" in msg and "install" in msg
    status = tvm_status()
    assert not status and "apache-tvm" in status.reason


def _fake_bundled_tvm() -> types.ModuleType:
    """What tilelang's bundled tvm looks like to us: an older API without tvm.tirx."""
    fake = types.ModuleType("tvm")
    fake.__file__ = "/site-packages/tilelang/3rdparty/tvm/python/tvm/__init__.py"
    fake.__version__ = "0.20.dev0"
    fake.te = types.SimpleNamespace(create_prim_func=None)
    fake.tir = types.SimpleNamespace()
    fake.build = lambda *a, **k: None
    return fake


def test_tilelang_bundled_tvm_raises_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tilelang", types.ModuleType("tilelang"))
    monkeypatch.setitem(sys.modules, "tvm", _fake_bundled_tvm())
    cf = tp.compile(lambda x: x + 1, backend="tvm")
    with pytest.raises(RuntimeError) as info:
        cf(tp.ones(2))
    msg = str(info.value)
    assert "tilelang" in msg and "tilelang/3rdparty/tvm" in msg
    assert "tvm.tirx" in msg and "backend='eager'" in msg


def test_an_old_tvm_without_tilelang_says_to_upgrade(monkeypatch):
    monkeypatch.delitem(sys.modules, "tilelang", raising=False)
    monkeypatch.setitem(sys.modules, "tvm", _fake_bundled_tvm())
    with pytest.raises(RuntimeError, match="apache-tvm >= 0.25.*pip install"):
        load_tvm()


def test_tilelang_loaded_next_to_a_real_apache_tvm_still_works(tvm, monkeypatch):
    # tilelang imported but `import tvm` resolves to apache-tvm: the backend runs correctly
    monkeypatch.setitem(sys.modules, "tilelang", types.ModuleType("tilelang"))
    cf = tp.compile(lambda x: (x * 2).exp(), backend="tvm")
    x = tp.randn(8)
    assert tp.allclose(cf(x), (x * 2).exp(), rtol=1e-5)
    assert cf.report().rows[0].route == "tvm"


def test_targets_resolve(tvm):
    from tensorplay.compiler._tvm_env import resolve_target

    cpu = resolve_target(tvm, None, "cpu")
    assert cpu.kind.name == "llvm" and "mcpu" in cpu.attrs  # the host CPU's vector width
    assert resolve_target(tvm, None, "cuda").kind.name == "cuda"
    with pytest.raises(TypeError, match="target"):
        resolve_target(tvm, 3, "cpu")
