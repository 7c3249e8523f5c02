"""tensorplay._C.record_node (csrc/record.h) against its twin, autograd._record.record.

The whole suite records through the native path where _C is built (and through Python
with ``TENSORPLAY_PURE_PYTHON=1``); these tests pin that a node made in C is the node
Python makes, field by field, and that every case the C path does not cover is declined
to Python (None) rather than recorded differently.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _dispatch, _native
from tensorplay.autograd import _record
from tensorplay.autograd.graph import SavedTensor

C = _native.NATIVE
pytestmark = pytest.mark.skipif(
    C is None or not hasattr(C, "record_node"), reason=f"no _C: {_native.REASON}"
)


def _python_node(row, targs, params, result):
    """The node Python's record makes (the native path switched off)."""
    saved, _record._record_node = _record._record_node, None
    try:
        _record.record(row, targs, params, result)
    finally:
        _record._record_node = saved
    return result.grad_fn


def _fields(node):
    saved_in, saved_out = node._saved

    def saved(s):
        if not isinstance(s, SavedTensor):
            return s
        node_ref = s._node() if s._node is not None else None
        return (s._packed.tolist(), s._version, s._storage, s._requires_grad, s._tangent,
                node_ref is node, s._output_nr, s._unpack)  # fmt: skip

    return (
        type(node),
        node.next_functions,
        node._meta,
        node._needs,
        node.row,
        node.params,
        node._seq,
        node.n_outputs,
        None if saved_in is None else [saved(s) for s in saved_in],
        None if saved_out is None else [saved(s) for s in saved_out],
    )


@pytest.mark.parametrize(
    "name,make",
    [
        ("linear", lambda a, w, b: ((a, w, b), {})),  # saves inputs
        ("relu", lambda a, w, b: ((a,), {})),  # saves its result only
        ("mul", lambda a, w, b: ((a, 2.5), {})),  # a number among the inputs
        ("sum", lambda a, w, b: ((w,), {"dim": 1, "keepdim": False, "dtype": None})),
    ],
)
def test_a_native_node_is_the_node_python_makes(name, make):
    row = _dispatch.OPS[name]
    a = tp.randn(2, 3)  # no grad: its edge is (None, 0)
    w = tp.randn(4, 3, requires_grad=True)
    b = tp.randn(4, requires_grad=True)
    targs, params = make(a, w, b)
    with tp.no_grad():
        value = _dispatch._general_call(row, targs, dict(params))
    py_result, c_result = value.detach().clone(), value.detach().clone()
    py_node = _python_node(row, targs, params, py_result)
    assert "_record_simple" in row.__dict__ and "_saves" in row.__dict__
    assert C.record_node(row, targs, params, c_result) is c_result
    c_node = c_result.grad_fn
    assert c_node is not py_node and c_result.requires_grad and c_result._output_nr == 0
    py, native = _fields(py_node), _fields(c_node)
    assert py[:8] == native[:8]
    # saved values, versions and flags alike (storages are the same objects for inputs)
    assert py[8] == native[8]
    if py[9] is not None:
        assert [s[:2] + s[3:] for s in py[9]] == [s[:2] + s[3:] for s in native[9]]


def test_gradients_through_native_nodes_match_numpy():
    g = np.random.default_rng(0)
    xv, wv = g.standard_normal((5, 3)), g.standard_normal((4, 3))
    x = tp.tensor(xv, requires_grad=True)
    w = tp.tensor(wv, requires_grad=True)
    y = tp.matmul(x, w.t())
    loss = (y.relu() * 3.0).sum()
    loss.backward()
    mask = (xv @ wv.T) > 0
    np.testing.assert_allclose(x.grad.numpy(), (3.0 * mask) @ wv, rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), (3.0 * mask).T @ xv, rtol=1e-12)


def test_saved_inputs_keep_the_version_check():
    x = tp.randn(3, requires_grad=True)
    y = x * 1.0
    z = y * y  # saves y (natively)
    assert isinstance(z.grad_fn._saved[0][0], SavedTensor)
    with tp.no_grad():
        y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_what_c_declines_python_records():
    row = _dispatch.OPS["relu"]
    x = tp.randn(3, requires_grad=True)
    x.relu()  # python has seen relu: its verdict is cached
    out = tp.randn(3)
    # not a Tensor result, an integer result, a list-free targs
    assert C.record_node(row, (x,), {}, 1.0) is None
    assert C.record_node(row, (x,), {}, tp.ones(3, dtype=tp.int64)) is None
    assert C.record_node(row, x, {}, out) is None
    # a view row and a multi-output row are Python's
    assert C.record_node(_dispatch.OPS["expand"], (x,), {"size": (2, 3)}, out) is None
    x.expand(2, 3)
    assert C.record_node(_dispatch.OPS["expand"], (x,), {"size": (2, 3)}, out) is None
    # anomaly detection, a dual level, saved-tensor hooks
    with tp.autograd.detect_anomaly():
        assert C.record_node(row, (x,), {}, tp.randn(3)) is None
        assert x.relu().grad_fn is not None  # (Python recorded it)
    with tp.autograd.forward_ad.dual_level():
        assert C.record_node(row, (x,), {}, tp.randn(3)) is None
    with tp.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        assert C.record_node(row, (x,), {}, tp.randn(3)) is None
        y = x.relu()
    y.sum().backward()
    assert x.grad is not None and x.grad.tolist() == (x.detach() > 0).float().tolist()
    # a row Python has not recorded yet: its verdict is not known
    fresh = _dispatch.OPS["tanh"]
    fresh.__dict__.pop("_record_simple", None)
    assert C.record_node(fresh, (x,), {}, tp.randn(3)) is None


def test_misuse_is_an_error_not_a_crash():
    with pytest.raises(ValueError, match="already called"):
        C.init_record(_record.OpNode, SavedTensor, (), _record._anomaly, None, None, None)
    with pytest.raises(TypeError, match="two classes"):
        C.init_record(1, 2, (), None, None, None, None)


def test_a_subclass_result_gets_the_same_node():
    class Sub(tp.Tensor):
        pass

    row = _dispatch.OPS["mul"]
    x = tp.randn(3, requires_grad=True)
    (x * 2.0).sum()  # python has seen mul
    with tp.no_grad():
        value = x * 2.0
    py_result = value.detach().clone().as_subclass(Sub)
    c_result = value.detach().clone().as_subclass(Sub)
    py_node = _python_node(row, (x, 2.0), {}, py_result)
    assert C.record_node(row, (x, 2.0), {}, c_result) is c_result
    assert type(c_result) is Sub and c_result.grad_fn is not py_node
    assert _fields(c_result.grad_fn)[:9] == _fields(py_node)[:9]
    c_result.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_the_fast_paths_record_through_c_as_their_twins_do():
    assert _dispatch._plain_record is C.plain_record and _dispatch._fast_record is C.fast_record
    row = _dispatch.OPS["mul"]
    x = tp.randn(3, requires_grad=True)
    y = tp.randn(3)
    (x * y).sum()  # python has seen mul
    for record in (C.plain_record, _dispatch._plain_record_py):
        with tp.no_grad():
            r = x.detach() * y
        assert record(row, (y, y), {}, r) is r and r.grad_fn is None  # nothing requires grad
        with tp.no_grad():
            assert record(row, (x, y), {}, r) is r and r.grad_fn is None  # grad mode off
        out = record(row, (x, y), {}, r)
        assert out is r and r.grad_fn is not None and r.grad_fn.name() == "MulBackward0"
        r.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), y.numpy())
        x.grad = None
    with tp.no_grad():
        r = x.detach() * y
    assert C.fast_record(row, (x, y), r) is r and r.grad_fn.params == row.defaults
    with pytest.raises(TypeError):
        C.plain_record(row, (x,))
    with pytest.raises(TypeError):
        C.fast_record(row)
