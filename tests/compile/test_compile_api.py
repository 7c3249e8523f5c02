"""tp.compile: laziness, the specialisation cache, dynamic, backends, options, strict, report."""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import sys
import types

import numpy as np
import pytest
from compile_helpers import FakeLibraryOp

import tensorplay as tp
from tensorplay import compiler
from tensorplay.compiler import (
    InvalidBackend,
    _backends,
    list_backends,
    lookup_backend,
    register_backend,
)


def chain(x):
    return ((x / 2).exp() - 1).tanh() * 2 + x


def test_tp_compile_is_the_compiler_entry_point():
    assert tp.compile is compiler.compile


def test_compile_is_lazy_and_caches_per_specialisation():
    traced = []

    def f(x):
        traced.append(1)
        return chain(x)

    cf = tp.compile(f, backend="eager")
    assert traced == [] and cf._tensorplay_cache == {}
    x = tp.randn(4)
    np.testing.assert_allclose(cf(x).numpy(), chain(x).numpy(), rtol=1e-6)
    cf(tp.randn(4))
    assert len(traced) == 1 and len(cf._tensorplay_cache) == 1
    cf(tp.randn(5))  # new shape: a new specialisation
    cf(tp.randn(4, dtype=tp.float64))  # new dtype
    cf(tp.randn(4, requires_grad=True))  # requires_grad is part of the key
    assert len(traced) == 4 and len(cf._tensorplay_cache) == 4
    artifact = next(iter(cf._tensorplay_cache.values()))
    assert artifact._tensorplay_codegen == "interpreter"


def test_decorator_form_and_keyword_arguments():
    @tp.compile(backend="eager")
    def f(x, *, scale=2.0):
        return x * scale

    assert f(tp.ones(2)).tolist() == [2.0, 2.0]
    assert f(tp.ones(2), scale=3.0).tolist() == [3.0, 3.0]
    assert len(f._tensorplay_cache) == 2  # numbers specialise by value
    assert f.__name__ == "f"


def test_varargs_are_placeholders():
    cf = tp.compile(lambda *xs: xs[0] + xs[1] * xs[2], backend="eager")
    out = cf(tp.ones(2), tp.full((2,), 2.0), tp.full((2,), 3.0))
    assert out.tolist() == [7.0, 7.0]


def test_new_shape_gives_fresh_results_not_stale_ones():
    cf = tp.compile(lambda x: x * 2, backend="eager")
    assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
    assert cf(tp.ones(3)).tolist() == [2.0, 2.0, 2.0]


def test_dynamic_reuses_one_artifact_across_sizes():
    cf = tp.compile(chain, backend="eager", dynamic=True)
    for n in (5, 7, 9):
        x = tp.randn(n)
        np.testing.assert_allclose(cf(x).numpy(), chain(x).numpy(), rtol=1e-6)
    assert len(cf._tensorplay_cache) == 1
    cf(tp.randn(1))  # size 1 broadcasts differently: its own specialisation
    assert len(cf._tensorplay_cache) == 2


def test_dynamic_with_shape_reads_specialises_on_shapes():
    cf = tp.compile(lambda x: x * x.shape[0], backend="eager", dynamic=True)
    assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
    assert cf(tp.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert len(cf._tensorplay_cache) == 2


def test_recompile_limit_falls_back_with_a_warning(monkeypatch):
    monkeypatch.setattr(compiler.config, "recompile_limit", 2)
    cf = tp.compile(lambda x: x + 1, backend="eager")
    cf(tp.ones(1))
    cf(tp.ones(2))
    with pytest.warns(RuntimeWarning, match="recompile limit of 2"):
        assert cf(tp.ones(3)).tolist() == [2.0, 2.0, 2.0]
    assert len(cf._tensorplay_cache) == 2
    strict = tp.compile(lambda x: x + 1, backend="eager", strict=True)
    strict(tp.ones(1))
    strict(tp.ones(2))
    with pytest.raises(RuntimeError, match="recompile limit"):
        strict(tp.ones(3))


def test_unknown_backend_suggests_close_names():
    with pytest.raises(InvalidBackend, match="Did you mean 'eager'") as info:
        tp.compile(chain, backend="eagr")
    assert isinstance(info.value, ValueError)
    assert "registered backends" in str(info.value).lower()


def test_builtin_backends_are_listed():
    assert {"eager", "tvm"} <= set(list_backends())


def test_register_backend_and_options():
    seen = {}

    @register_backend("test_counting")
    def counting(gm, example_inputs, *, factor=1):
        seen["inputs"] = [tuple(t.shape) for t in example_inputs]
        seen["factor"] = factor
        return gm

    try:
        cf = tp.compile(lambda x: x * 2, backend="test_counting", options={"factor": 3})
        assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
        assert seen == {"inputs": [(2,)], "factor": 3}
        assert cf.report().rows[0].route == "test_counting"
        artifact = next(iter(cf._tensorplay_cache.values()))
        assert artifact._tensorplay_codegen == "test_counting"
        with pytest.raises(ValueError, match="already registered"):
            register_backend("test_counting")(lambda gm, ex: gm)
    finally:
        _backends._REGISTRY.pop("test_counting")


def test_unknown_option_names_the_key():
    with pytest.raises(ValueError, match="unknown option 'nthreads'.*did you mean 'num_threads'"):
        tp.compile(chain, backend="tvm", options={"nthreads": 2})
    with pytest.raises(ValueError, match="'anything'"):
        tp.compile(chain, backend="eager", options={"anything": 1})


def test_entry_point_backends_load_lazily(monkeypatch):
    ep = importlib.metadata.EntryPoint(
        name="plugin_backend",
        value="compile_helpers:plugin_backend",
        group=_backends.ENTRY_POINT_GROUP,
    )

    def fake_entry_points(group=None):
        return [ep] if group == _backends.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(_backends, "_entry_points_loaded", False)
    monkeypatch.setattr(_backends, "_REGISTRY", dict(_backends._REGISTRY))
    assert "plugin_backend" in list_backends()
    cf = tp.compile(lambda x: x - 1, backend="plugin_backend")
    assert cf(tp.ones(2)).tolist() == [0.0, 0.0]
    assert lookup_backend("plugin_backend").load().__name__ == "plugin_backend"


def test_report_before_the_first_call_is_an_error():
    cf = tp.compile(chain, backend="eager")
    with pytest.raises(RuntimeError, match="call the function first"):
        cf.report()


def test_eager_report_rows_and_library_barrier():
    op = FakeLibraryOp()
    cf = tp.compile(lambda x: op(x.exp()) + 1, backend="eager")
    cf(tp.ones(2))
    report = cf.report()
    assert [(r.node, r.op, r.route) for r in report] == [
        ("exp", "exp", "interpreter"),
        ("demo_scaled", "demo::scaled", "custom_op"),
        ("add", "add", "interpreter"),
    ]
    assert report.fallbacks == []
    text = str(report)
    assert text.splitlines()[0] == "backend=eager: 2 interpreter, 1 custom_op"
    assert "demo::scaled" in text


def test_triton_and_tilelang_ops_are_labelled():
    tri = FakeLibraryOp("k::tri", is_triton_op=True)
    tile = FakeLibraryOp("k::tile", is_tile_lang_op=True)
    cf = tp.compile(lambda x: tile(tri(x)), backend="eager")
    assert cf(tp.ones(1)).tolist() == [9.0]
    assert [r.route for r in cf.report()] == ["triton_op", "tile_lang_op"]


def test_capture_failure_falls_back_to_eager_unless_fullgraph():
    def f(x):
        return x * 2 if x.sum() > 0 else x

    cf = tp.compile(f, backend="eager")
    assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
    (row,) = cf.report().rows
    assert row.route == "eager" and row.fallback and "capture failed" in row.reason
    with pytest.raises(tp.capture.GraphCaptureError, match="x.sum"):
        tp.compile(f, backend="eager", fullgraph=True)(tp.ones(2))
    with pytest.raises(tp.capture.GraphCaptureError):
        tp.compile(f, backend="eager", strict=True)(tp.ones(2))


def test_fallbacks_are_logged(caplog):
    def f(x):
        return x * 2 if x.sum() > 0 else x

    with caplog.at_level(logging.INFO, logger="tensorplay.compiler"):
        tp.compile(f, backend="eager")(tp.ones(2))
    assert any("running eagerly" in r.getMessage() for r in caplog.records)


def test_unhashable_argument_is_a_clear_error():
    cf = tp.compile(lambda x, cfg: x * cfg["k"], backend="eager")
    with pytest.raises(TypeError, match="argument 'cfg' of type dict is not hashable"):
        cf(tp.ones(1), {"k": 2})


def test_options_must_be_a_dict():
    with pytest.raises(TypeError, match="options must be a dict"):
        tp.compile(chain, backend="eager", options=[("a", 1)])


def test_grad_flows_through_the_eager_backend():
    cf = tp.compile(lambda x: (x * x).sum(), backend="eager")
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    cf(x).backward()
    assert x.grad.tolist() == [2.0, 4.0]


# ---- guards: globals, closures, default dtype -------------------------------------------

SCALE = 2.0
OFFSET = tp.ones(3)
settings = types.ModuleType("settings")  # a config module: its attributes are guarded
settings.SHIFT = 0.0


def _helper(x):
    return x + settings.SHIFT


def _scaled(x):
    return _helper(x * SCALE + OFFSET)


def test_changed_global_scalar_and_tensor_retrace_and_match_eager(monkeypatch):
    module = sys.modules[__name__]
    cf = tp.compile(_scaled, backend="eager")
    x = tp.tensor([1.0, 2.0, 3.0])
    assert cf(x).tolist() == [3.0, 5.0, 7.0]
    monkeypatch.setattr(module, "SCALE", 10.0)
    assert cf(x).tolist() == _scaled(x).tolist() == [11.0, 21.0, 31.0]
    monkeypatch.setattr(module, "OFFSET", tp.tensor([0.5, 0.5, 0.5]))  # a new tensor
    assert cf(x).tolist() == _scaled(x).tolist() == [10.5, 20.5, 30.5]
    monkeypatch.setattr(settings, "SHIFT", -0.5)  # read by a helper, through a module
    assert cf(x).tolist() == _scaled(x).tolist() == [10.0, 20.0, 30.0]
    assert len(cf._tensorplay_cache) == 4
    OFFSET.add_(1.0)  # in place: the graph reads the tensor itself, no retrace
    assert cf(x).tolist() == _scaled(x).tolist() == [11.0, 21.0, 31.0]
    monkeypatch.setattr(module, "SCALE", 2.0)  # a value seen before reuses its artifact
    monkeypatch.setattr(module, "OFFSET", tp.tensor([0.5, 0.5, 0.5]))
    assert cf(x).tolist() == _scaled(x).tolist() == [2.0, 4.0, 6.0]
    assert len(cf._tensorplay_cache) == 5


def test_changed_closure_value_retraces():
    threshold = 0.0

    def f(x):
        return tp.where(x > threshold, x, tp.zeros_like(x))

    cf = tp.compile(f, backend="eager")
    x = tp.tensor([-1.0, 0.5, 2.0])
    assert cf(x).tolist() == [0.0, 0.5, 2.0]
    threshold = 1.0  # noqa: F841 - read by f through its closure
    assert cf(x).tolist() == f(x).tolist() == [0.0, 0.0, 2.0]


def test_default_dtype_is_part_of_the_key():
    cf = tp.compile(lambda x: x + tp.ones(2), backend="eager")
    x = tp.tensor([1, 2])
    assert cf(x).dtype == tp.float32
    previous = tp.get_default_dtype()
    tp.set_default_dtype(tp.float64)
    try:
        out = cf(x)
    finally:
        tp.set_default_dtype(previous)
    assert out.dtype == tp.float64 and out.tolist() == [2.0, 3.0]
    assert len(cf._tensorplay_cache) == 2


def test_state_changed_while_tracing_does_not_retrace_every_call():
    traces = []

    def f(x):
        traces.append(len(traces))  # runs once per trace, not per call
        return x * 2

    cf = tp.compile(f, backend="eager")
    for _ in range(3):
        assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
    assert traces == [0] and len(cf._tensorplay_cache) == 1


def _times(k):
    return lambda x: x * k


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)

    return wrapper


GAIN = 1.0
DOUBLE, TRIPLE = _times(2.0), _times(3.0)


@_logged
def _gained(x):
    return x * GAIN


def test_guards_reach_decorated_helpers_and_each_closure_of_one_factory(monkeypatch):
    module = sys.modules[__name__]

    def f(x):
        return _gained(DOUBLE(x) + TRIPLE(x))

    cf = tp.compile(f, backend="eager")
    x = tp.ones(2)
    assert cf(x).tolist() == [5.0, 5.0]
    monkeypatch.setattr(module, "GAIN", 10.0)  # read by the function functools.wraps wrapped
    assert cf(x).tolist() == f(x).tolist() == [50.0, 50.0]
    monkeypatch.setattr(module, "TRIPLE", _times(4.0))  # same code, another closure value
    assert cf(x).tolist() == f(x).tolist() == [60.0, 60.0]
