"""Finding apache-tvm: missing install, supported versions, a broken install, tilelang's
bundled tvm (simulated), targets."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from compile_helpers import BrokenTvmImport, fake_tvm_release

import tensorplay as tp
from tensorplay.compiler import list_backends, tvm_status
from tensorplay.compiler._tvm_env import SUPPORTED, load_tvm

EXTRA = "pip install './packages/tensorplay-compile[tvm]'"
PYPROJECT = Path(__file__).resolve().parents[2] / "packages/tensorplay-compile/pyproject.toml"


def test_missing_apache_tvm_is_listed_and_fails_on_first_call(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm", None)  # `import tvm` raises ImportError
    assert "tvm" in list_backends()
    cf = tp.compile(lambda x: x * 2, backend="tvm")  # building nothing yet: no error
    with pytest.raises(RuntimeError) as info:
        cf(tp.ones(2))
    msg = str(info.value)
    assert "apache-tvm is not installed" in msg and EXTRA in msg and "backend='eager'" in msg
    status = tvm_status()
    assert not status and status.reason == "apache-tvm is not installed" and EXTRA in status.fix


@pytest.mark.parametrize("version", ["0.25.0.post1", "0.25.0", "0.28.0", "0.28.dev0", "unknown"])
def test_a_release_outside_the_supported_range_is_refused_with_its_version(monkeypatch, version):
    monkeypatch.delitem(sys.modules, "tilelang", raising=False)
    monkeypatch.setitem(sys.modules, "tvm", fake_tvm_release(version))
    status = tvm_status()
    assert not status and status.version == version
    assert f"apache-tvm {version} is installed" in status.reason and SUPPORTED in status.reason
    assert EXTRA in status.fix and f"pip install '{SUPPORTED}'" in status.fix
    cf = tp.compile(lambda x: x * 2, backend="tvm")
    with pytest.raises(RuntimeError) as info:
        cf(tp.ones(2))
    msg = str(info.value)
    assert f"apache-tvm {version} is installed" in msg and SUPPORTED in msg and EXTRA in msg


@pytest.mark.parametrize("version", ["0.26.0", "0.27.0", "0.27.0.post1", "0.27.1"])
def test_releases_in_the_supported_range_are_usable(monkeypatch, version):
    monkeypatch.delitem(sys.modules, "tilelang", raising=False)
    monkeypatch.setitem(sys.modules, "tvm", fake_tvm_release(version))
    status = tvm_status()
    assert status and status.version == version and status.reason == ""
    assert str(status).startswith(f"usable (apache-tvm {version}")


def test_a_tvm_that_fails_to_import_is_a_status_not_a_crash(monkeypatch):
    monkeypatch.delitem(sys.modules, "tvm", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenTvmImport(), *sys.meta_path])
    status = tvm_status()
    assert not status and "OSError" in status.reason and "undefined symbol" in status.reason
    assert "Reinstall" in status.fix and EXTRA in status.fix
    with pytest.raises(RuntimeError, match="'import tvm' fails") as info:
        load_tvm()
    assert EXTRA in str(info.value)


def test_the_tvm_extra_installs_the_supported_range():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert extras["tvm"] == [SUPPORTED]


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
    with pytest.raises(RuntimeError, match=re.escape(SUPPORTED) + ".*pip install"):
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
