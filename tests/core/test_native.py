"""tensorplay._C, the native hot paths, against their Python twins.

The whole core suite runs twice in CI (native, and ``TENSORPLAY_PURE_PYTHON=1``); these
tests pin what is specific to the native objects: they give the twin's results, they
behave like functions (signature, pickle, methods, operators), the fast path steps aside
whenever the twin's would, and misuse is an error, not a crash.
"""

from __future__ import annotations

import ctypes.util
import inspect
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _dispatch, _native
from tensorplay.overrides import TensorPlayFunctionMode

needs_native = pytest.mark.skipif(_native.NATIVE is None, reason=f"no _C: {_native.REASON}")


def test_ci_builds_the_native_module():
    # CI installs with a compiler: a broken build must fail there, not silently go pure Python.
    if os.environ.get("CI") != "true" or os.environ.get("TENSORPLAY_PURE_PYTHON") == "1":
        pytest.skip("only enforced in CI's native run")
    assert _native.NATIVE is not None, _native.REASON


def test_a_missing_native_module_is_named_as_missing_and_warned_about_once():
    # a finder that hides tensorplay._C stands in for an install without a compiler
    code = (
        "import sys, warnings\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tensorplay._C':\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import tensorplay as tp, tensorplay._native as n\n"
        "print(n.NATIVE is None, (tp.ones(2) + 1).tolist())\n"
        "print(n.REASON)\n"
        "print([str(w.message) for w in caught if w.category is RuntimeWarning])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TENSORPLAY_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    first, reason, warned = out.stdout.splitlines()
    assert first == "True [2.0, 2.0]"
    assert reason.startswith("tensorplay._C was not built") and "circular" not in reason
    assert warned.count("runs without its native module") == 1
    assert "TENSORPLAY_PURE_PYTHON=1" in warned


def test_pure_python_switch_selects_the_twins():
    code = (
        "import tensorplay as tp, tensorplay._native as n, inspect;"
        "print(n.NATIVE is None, n.REASON, inspect.isfunction(tp.add),"
        " (tp.ones(3) + 1).tolist())"
    )
    env = dict(os.environ, TENSORPLAY_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    expected = ["True", "TENSORPLAY_PURE_PYTHON=1", "True", "[2.0,", "2.0,", "2.0]"]
    assert out.stdout.split() == expected


@needs_native
def test_fast_ops_are_native_objects_that_act_like_functions():
    add = tp.add
    assert type(add) is _native.NATIVE.FastOp
    assert add.__name__ == "add" and add.__module__ == "tensorplay"
    assert "alpha" in inspect.signature(add).parameters  # through __wrapped__
    assert pickle.loads(pickle.dumps(add)) is add
    assert "add" in repr(add)
    a, b = tp.tensor([1.0, 2.0]), tp.tensor([3.0, 4.0])
    assert a.add(b).tolist() == [4.0, 6.0]  # bound as a method
    assert tp.Tensor.add(a, b).tolist() == [4.0, 6.0]  # unbound
    assert (a * b).tolist() == [3.0, 8.0]
    assert type(tp.Tensor.__dict__["__mul__"]) is _native.NATIVE.FastOp  # built on first use
    assert tp.neg(a).tolist() == [-1.0, -2.0]  # a unary fast op


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.int32, tp.int64, tp.bool])
@pytest.mark.parametrize("shape", [(), (1,), (10,), (3, 4), (200, 3)])
def test_fast_path_results_match_numpy(dtype, shape):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 5).astype(dtype.np)
    y = (rng.standard_normal(shape) * 5 + 1).astype(dtype.np)
    a, b = tp.tensor(x), tp.tensor(y)
    ops = [(tp.mul, np.multiply), (tp.maximum, np.maximum), (tp.eq, np.equal)]
    if dtype is not tp.bool:
        ops.append((tp.add, np.add))
    for op, ref in ops:
        r = op(a, b)
        np.testing.assert_array_equal(r.numpy(), ref(x, y))
        assert r.shape == shape and r.is_contiguous()
        assert r.data_ptr() % 64 == 0  # TVM needs 64-byte aligned buffers
        assert r.untyped_storage().nbytes() == r.numel() * r.element_size()
        assert r._storage._version == 0


def test_fast_path_on_views_scalars_and_fresh_buffers():
    base = tp.arange(12.0).reshape(3, 4)
    t = base.t()  # non-contiguous input: the result is contiguous
    r = t + t
    np.testing.assert_array_equal(r.numpy(), base.numpy().T * 2)
    assert r.is_contiguous()
    assert (tp.ones(3) * 2.5).tolist() == [2.5, 2.5, 2.5]
    assert (tp.ones(3) * 2).dtype is tp.float32  # a Python int keeps the float dtype
    assert (tp.ones(3, dtype=tp.int32) * 2.5).dtype is tp.float32  # general path (promotion)
    # results never share memory with each other or with inputs
    xs = [tp.ones(4) + i for i in range(50)]
    assert len({x.data_ptr() for x in xs}) == 50
    assert [x[0].item() for x in xs] == [1.0 + i for i in range(50)]


def test_large_results_get_their_own_aligned_buffer():
    x = tp.ones(100_000)
    r = x + x
    assert r.data_ptr() % 64 == 0 and r.sum().item() == 200_000.0
    assert r.untyped_storage().nbytes() == 400_000


def test_fast_path_steps_aside_like_the_twin():
    a = tp.ones(3)
    assert tp.add(a, a, alpha=2).tolist() == [3.0, 3.0, 3.0]  # keyword: general path
    assert tp.add(a, tp.ones(2, 3)).shape == (2, 3)  # broadcasting
    assert tp.add(a, tp.ones(3, dtype=tp.float64)).dtype is tp.float64  # promotion
    assert tp.add(a, True).tolist() == [2.0, 2.0, 2.0]  # bool is not a fast scalar
    out = tp.empty(3)
    assert tp.add(a, a, out=out) is out and out.tolist() == [2.0, 2.0, 2.0]
    m = tp.ones(3, device="meta")
    assert (m + m).device.type == "meta"
    with pytest.raises(TypeError):
        tp.add(a)  # wrong arity reaches the Python function and its error
    with pytest.raises(RuntimeError, match="broadcast"):
        tp.add(a, tp.ones(4))


def test_fast_path_records_autograd():
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = tp.tensor([3.0, 4.0])
    z = x * y
    assert z.requires_grad and z.grad_fn is not None
    (z + x).sum().backward()
    assert x.grad.tolist() == [4.0, 5.0]
    with tp.no_grad():
        assert not (x * y).requires_grad


def test_subclass_and_foreign_operands_leave_the_fast_path():
    seen = []

    class Sub(tp.Tensor):
        @classmethod
        def __tensorplay_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func.__name__)
            return super().__tensorplay_function__(func, types, args, kwargs)

    s = Sub([1.0, 1.0])
    results = [tp.add(s, tp.ones(2)), s * 3, tp.ones(2) - s]  # - : the subclass second
    assert seen == ["add", "mul", "sub"]
    assert all(type(r) is Sub for r in results)  # Tensor's default handler converts
    assert [r.tolist() for r in results] == [[2.0, 2.0], [3.0, 3.0], [0.0, 0.0]]


class _Log(TensorPlayFunctionMode):
    def __init__(self):
        self.calls = []

    def __tensorplay_function__(self, func, types, args=(), kwargs=None):
        self.calls.append((func, types, len(args), dict(kwargs or {})))
        return func(*args, **(kwargs or {}))


def test_function_mode_sees_native_calls_with_the_public_function():
    a, b = tp.ones(2), tp.ones(2)
    with _Log() as log:
        tp.add(a, b)
        _ = a + b
        a.mul(b)
        tp.neg(a)
        tp.add(a, b, alpha=3)
    funcs = [c[0] for c in log.calls]
    assert funcs == [tp.add, tp.add, tp.mul, tp.neg, tp.add]
    assert log.calls[0][1:] == ((), 2, {}) and log.calls[-1][3] == {"alpha": 3}
    assert _dispatch.state.plain  # the gate is back on after the mode
    if _native.NATIVE is not None:
        assert _native.NATIVE.is_plain()


def test_nested_modes_run_innermost_first_and_the_gate_follows():
    order = []

    class Named(TensorPlayFunctionMode):
        def __init__(self, name):
            self.name = name

        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            order.append((self.name, _dispatch.state.plain))
            return func(*args, **(kwargs or {}))

    a = tp.ones(2)
    with Named("outer"), Named("inner"):
        r = a + a
    # inside the inner handler the outer mode still blocks the fast path; inside the
    # outer one nothing is left, so its calls run on the fast path
    assert order == [("inner", False), ("outer", True)] and r.tolist() == [2.0, 2.0]
    assert _dispatch.state.plain


def test_a_mode_that_raises_leaves_the_gate_and_stack_clean():
    class Boom(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"), Boom():
        tp.ones(2) + tp.ones(2)
    assert _dispatch.state.plain
    assert (tp.ones(2) + tp.ones(2)).tolist() == [2.0, 2.0]


def test_mode_returning_not_implemented_is_a_type_error():
    class No(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            return NotImplemented

    a = tp.ones(2)
    with pytest.raises(TypeError, match="no implementation found for 'tensorplay.add'"), No():
        tp.add(a, a)
    with pytest.raises(TypeError, match="found for 'tensorplay.ones'"), No():
        tp.ones(2)  # factories reach modes too


def test_profiler_sees_native_ops():
    from tensorplay.profiler import profile

    with profile() as prof:
        tp.ones(3) + tp.ones(3)
    assert "add" in {e.name for e in prof.events()}


@needs_native
def test_misuse_of_native_entry_points_is_an_error_not_a_crash():
    C = _native.NATIVE
    with pytest.raises(ValueError, match="nin must be 1 or 2"):
        C.FastOp(print, np.add, {}, None, print, 3)
    with pytest.raises(TypeError, match="values must be"):
        C.FastOp(print, np.add, {tp.float32: "nope"}, None, print, 2)
    with pytest.raises(TypeError):
        C.FastOp(print, np.add, [], None, print, 2)  # table must be a dict
    with pytest.raises(TypeError, match="list or tuple"):
        C.any_requires_grad(tp.ones(2))
    with pytest.raises(TypeError, match="__slots__"):
        C.init(int, int, None, print)
    with pytest.raises(TypeError, match="two classes"):
        C.init(1, 2, None, print)
    with pytest.raises(ValueError, match="already called"):
        C.init(tp.Tensor, tp.UntypedStorage, None, print)
    assert (tp.ones(2) + tp.ones(2)).tolist() == [2.0, 2.0]  # failed calls changed nothing
    x = tp.ones(2, requires_grad=True)
    assert C.any_requires_grad([1, [tp.ones(1), x]]) is True
    assert C.any_requires_grad((tp.ones(1), 2.0)) is False
    assert _native._any_requires_grad([1, [tp.ones(1), x]]) is True  # the twin agrees


@needs_native
def test_cuda_launch_checks_its_arguments_before_the_driver():
    launch = _native.NATIVE.cuda_launch
    with pytest.raises(ValueError, match="CUfunction, not 0"):
        launch(0, 1, 1, 0, "p", (0,))
    with pytest.raises(ValueError, match="block in"):
        launch(1, 1, 2048, 0, "p", (0,))
    with pytest.raises(ValueError, match="one code per argument"):
        launch(1, 1, 32, 0, "pp", (0,))
    with pytest.raises(ValueError, match="unknown signature code 'x'"):
        launch(1, 1, 32, 0, "x", (0,))
    with pytest.raises(TypeError):
        launch(1, 1, 32, 0, "q", ("not a number",))
    with pytest.raises(OverflowError):
        launch(1, 1, 32, 0, "q", (1 << 70,))
    if ctypes.util.find_library("cuda") is None:  # no driver: the launch is refused, clearly
        with pytest.raises(RuntimeError, match="CUDA driver"):
            launch(1, 1, 32, 0, "pfq", (0, 1.5, 3))


@needs_native
def test_native_input_edges_matches_its_twin():
    """Every recording reads its inputs through ``input_edges``: the native pass and the
    Python twin give the same edges and metadata for leaves, non-leaves, tensors that need
    no grad, numbers, and a view written in place after it was made (its history is
    rebuilt through the base, in Python, before the edge is read)."""
    from tensorplay.autograd import graph

    C = _native.NATIVE
    leaf = tp.ones(3, requires_grad=True)
    mid = leaf * 2
    base = leaf.clone()
    view = base[1:]
    base.mul_(2)  # view's recorded history is now stale
    plain = tp.zeros(2, dtype=tp.int64)
    items = (leaf, mid, plain, 2.5, None, view)
    native_edges, native_meta = C.input_edges(items)
    twin_edges, twin_meta = graph._input_edges(items)
    assert native_edges == twin_edges and native_meta == twin_meta
    assert native_edges[0] == (graph.accumulator(leaf), 0)
    assert native_edges[1] == (mid.grad_fn, 0)
    assert native_edges[2] == (None, 0) and native_edges[3] == (None, 0)
    assert native_edges[5][0].name() == "AsStridedBackward0"  # rebuilt, not the slice's
    assert native_meta == [
        ((3,), tp.float32),
        ((3,), tp.float32),
        ((2,), tp.int64),
        None,
        None,
        ((2,), tp.float32),
    ]
    assert C.input_edges([]) == ((), [])
    with pytest.raises(TypeError, match="list or tuple"):
        C.input_edges(leaf)
    with pytest.raises(ValueError, match="already called"):
        C.init_edges(print, print)


@needs_native
def test_native_backward_pass_matches_its_twin():
    """The native topological order and loop give the twins' order and gradients, with
    hooks (run by engine._step) and without; misuse is an error, not a crash."""
    from tensorplay.autograd import engine, graph

    C = _native.NATIVE
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a = x * 2
    b = a.exp()  # a diamond: a feeds b and c, both feed the sum
    c = a * a
    out = (b + c).sum()
    roots = [out.grad_fn]
    order = C.topological_order(roots)
    assert order == engine._topological_order(roots)
    assert order[0] is out.grad_fn and order[-1] is graph.accumulator(x)
    assert order.index(a.grad_fn) > max(order.index(b.grad_fn), order.index(c.grad_fn))
    seen = []
    c.register_hook(lambda g: seen.append(g.tolist()))
    out.backward(retain_graph=True)
    native = x.grad.tolist()
    x.grad = None
    buffers = {out.grad_fn: [tp.ones(())]}
    engine._loop(engine._topological_order(roots), buffers, True, None, {}, [])
    assert x.grad.tolist() == native
    expected = [2 * np.exp(2 * v) + 8 * v for v in (1.0, 2.0, 3.0)]
    np.testing.assert_allclose(native, expected, rtol=1e-6)
    assert seen == [[1.0, 1.0, 1.0]] * 2  # the hook ran once per pass, natively and not
    with pytest.raises(ValueError, match="already called"):
        C.init_engine(graph.AccumulateGrad, print, print)
    with pytest.raises(TypeError, match="a list and a dict"):
        C.backward_loop((), {}, False, True)

    class Bad(graph.Node):
        def __init__(self):
            super().__init__(next_functions=(1, 2))

    with pytest.raises(TypeError, match=r"\(node, output_nr\) tuples"):
        C.topological_order([Bad()])


@needs_native
def test_fast_op_fallback_gets_every_other_call():
    calls = []

    def fallback(*args, **kwargs):
        calls.append((args, kwargs))
        return "fallback"

    table = {tp.float32: (tp.float32, np.dtype(np.float32), True)}
    op = _native.NATIVE.FastOp(fallback, np.add, table, None, None, 2)
    a = tp.ones(2)
    assert op(a, a).tolist() == [2.0, 2.0]  # fast
    assert op(a, a, alpha=1) == "fallback"  # keyword
    assert op(a, tp.ones(2, dtype=tp.float64)) == "fallback"  # dtype not in the table
    assert op(a, "x") == "fallback"  # not a tensor or number
    assert op(a) == "fallback"  # arity
    assert len(calls) == 4
