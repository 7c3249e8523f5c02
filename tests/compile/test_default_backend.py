"""The default backend: "tvm" where a supported apache-tvm runs, else "eager" noted once.

TVM's absence is simulated where the detection looks (``import tvm``): ``None`` in
``sys.modules`` is a missing install, a module object stands for an installed release.
"""

from __future__ import annotations

import re
import sys
import warnings

import numpy as np
import pytest
from compile_helpers import BrokenTvmImport, fake_tvm_release

import tensorplay as tp
from tensorplay.compiler import _backends
from tensorplay.compiler._tvm_env import SUPPORTED

EXTRA = "pip install './packages/tensorplay-compile[tvm]'"


def chain(x):
    return ((x / 2).exp() - 1).tanh() * 2 + x


@pytest.fixture
def fresh_note(monkeypatch):
    """The one-time note not yet given in this process; yields the warnings recorded."""
    monkeypatch.setattr(_backends, "_default_noted", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # so "once" is ours, not the warnings registry's
        yield caught


def _notes(caught: list) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, UserWarning) and "default backend" in str(w.message)
    ]


def test_without_tvm_the_default_runs_eager_with_eagers_values(monkeypatch, fresh_note):
    monkeypatch.setitem(sys.modules, "tvm", None)
    cf = tp.compile(chain)
    assert cf.backend_name == "default"  # not chosen before the first call
    x = tp.randn(64, dtype=tp.float64)
    out = cf(x)
    np.testing.assert_array_equal(out.numpy(), chain(x).numpy())  # the interpreter: exact
    assert cf.backend_name == "eager" and cf.report().backend == "eager"
    assert {r.route for r in cf.report()} == {"interpreter"}
    artifact = next(iter(cf._tensorplay_cache.values()))
    assert artifact._tensorplay_codegen == "interpreter"
    y = tp.randn(3, 5, requires_grad=True)
    cf(y).sum().backward()
    eager = y.detach().requires_grad_(True)
    chain(eager).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), eager.grad.numpy(), rtol=1e-6)


def test_the_note_is_given_once_per_process_and_names_the_extra(monkeypatch, fresh_note):
    monkeypatch.setitem(sys.modules, "tvm", None)
    f = tp.compile(lambda x: x * 2)
    g = tp.compile(lambda x: x + 1)
    assert _notes(fresh_note) == []  # compiling decides nothing yet
    assert f(tp.ones(2)).tolist() == [2.0, 2.0]
    f(tp.ones(3))  # a new specialisation of the same function
    assert g(tp.ones(2)).tolist() == [2.0, 2.0]  # another function
    notes = _notes(fresh_note)
    assert len(notes) == 1
    assert "runs as 'eager'" in notes[0] and "apache-tvm is not installed" in notes[0]
    assert EXTRA in notes[0] and SUPPORTED in notes[0] and "fused kernels" in notes[0]
    assert "backend='eager'" in notes[0]  # how to silence it
    note = next(w for w in fresh_note if "default backend" in str(w.message))
    assert note.filename == __file__  # points at the user's call, not into tensorplay


def test_the_note_can_be_silenced_with_a_warnings_filter(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm", None)
    monkeypatch.setattr(_backends, "_default_noted", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", "tp.compile: the default backend", UserWarning)
        assert tp.compile(lambda x: x - 1)(tp.ones(2)).tolist() == [0.0, 0.0]


def test_an_explicit_eager_backend_gives_no_note(monkeypatch, fresh_note):
    monkeypatch.setitem(sys.modules, "tvm", None)
    assert tp.compile(lambda x: x * 3, backend="eager")(tp.ones(1)).tolist() == [3.0]
    assert _notes(fresh_note) == []


def test_explicit_tvm_without_tvm_raises_with_the_fix(monkeypatch, fresh_note):
    monkeypatch.setitem(sys.modules, "tvm", None)
    cf = tp.compile(lambda x: x * 2, backend="tvm")
    with pytest.raises(RuntimeError) as info:
        cf(tp.ones(2))
    msg = str(info.value)
    assert "apache-tvm is not installed" in msg
    assert EXTRA in msg and f"pip install '{SUPPORTED}'" in msg and "backend='eager'" in msg
    assert _notes(fresh_note) == []  # an error, not a note


@pytest.mark.parametrize("version", ["0.25.0.post1", "0.28.0"])
def test_an_unsupported_release_is_not_used_by_default(monkeypatch, fresh_note, version):
    monkeypatch.delitem(sys.modules, "tilelang", raising=False)
    monkeypatch.setitem(sys.modules, "tvm", fake_tvm_release(version))
    cf = tp.compile(chain)
    x = tp.randn(16)
    np.testing.assert_array_equal(cf(x).numpy(), chain(x).numpy())
    assert cf.backend_name == "eager"
    (note,) = _notes(fresh_note)
    assert f"apache-tvm {version} is installed" in note and SUPPORTED in note and EXTRA in note
    with pytest.raises(RuntimeError, match=re.escape(f"apache-tvm {version} is installed")):
        tp.compile(chain, backend="tvm")(x)  # explicit: refused, never run untested


def test_a_supported_release_is_the_default(monkeypatch, fresh_note):
    monkeypatch.delitem(sys.modules, "tilelang", raising=False)
    monkeypatch.setitem(sys.modules, "tvm", fake_tvm_release("0.27.0.post1"))
    assert _backends.default_backend() == "tvm"
    assert _notes(fresh_note) == []


def test_a_tvm_that_fails_to_import_makes_the_default_eager(monkeypatch, fresh_note):
    monkeypatch.delitem(sys.modules, "tvm", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenTvmImport(), *sys.meta_path])
    assert tp.compile(lambda x: x * 2)(tp.ones(2)).tolist() == [2.0, 2.0]
    (note,) = _notes(fresh_note)
    assert "'import tvm' fails (OSError" in note and "Reinstall" in note


def test_default_options_are_the_tvm_backends_and_unused_under_eager(monkeypatch, fresh_note):
    with pytest.raises(ValueError, match="did you mean 'num_threads'"):
        tp.compile(chain, options={"nthreads": 2})
    monkeypatch.setitem(sys.modules, "tvm", None)
    cf = tp.compile(chain, options={"num_threads": 2, "fast_math": False})
    x = tp.randn(8)
    np.testing.assert_array_equal(cf(x).numpy(), chain(x).numpy())
    assert cf.backend_name == "eager" and cf.options == {}


def test_with_a_supported_tvm_the_default_is_tvm_and_silent(tvm, fresh_note):
    cf = tp.compile(chain)
    x = tp.randn(1000)
    np.testing.assert_allclose(cf(x).numpy(), chain(x).numpy(), rtol=1e-5, atol=1e-6)
    assert cf.backend_name == "tvm" and cf.report().backend == "tvm"
    assert {r.route for r in cf.report()} == {"tvm"}
    assert _notes(fresh_note) == []
