"""tensorplay._C.plain_call (the general path of plain calls, decided once per key) against
its twin, the Python ``_dispatch.call`` (kept as ``_dispatch._general_call``).

The whole core suite runs through plain_call natively and through ``call`` with
``TENSORPLAY_PURE_PYTHON=1``; these tests pin what the cache adds: a plan is made once per
key and reused, anything that changes a decision (dtype, shape, device, a parameter's value
or type or name) is another key, errors keep the general path's messages, and misuse is an
error, not a crash.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _dispatch, _native

C = _native.NATIVE
pytestmark = pytest.mark.skipif(
    C is None or not hasattr(C, "plain_call"), reason=f"no _C: {_native.REASON}"
)


@pytest.fixture
def plans(monkeypatch):
    """The names of the rows whose calls were decided in Python during a test (planning, or
    the general path itself): init_plain holds _plan, which looks _checked up by name."""
    decided = []
    real = _dispatch._checked

    def counting(row, items):
        decided.append(row.name)
        return real(row, items)

    C.plain_forget()
    monkeypatch.setattr(_dispatch, "_checked", counting)
    yield decided
    C.plain_forget()


def _same(a, b):
    assert type(a) is type(b) is tp.Tensor
    assert a.dtype is b.dtype and a.shape == b.shape and a.device is b.device
    np.testing.assert_array_equal(a.numpy(), b.numpy())


CASES = [
    ("relu", lambda x, y: ((x,), {})),
    ("sum", lambda x, y: ((x,), {"dim": 1, "keepdim": False, "dtype": None})),
    ("sum", lambda x, y: ((x,), {"dim": (0, 1), "keepdim": True, "dtype": None})),
    ("matmul", lambda x, y: ((x, y.t()), {})),
    ("maximum", lambda x, y: ((x, y), {})),
    ("clamp", lambda x, y: ((x, -0.5, None), {})),
    ("log_softmax", lambda x, y: ((x,), {"dim": 1, "dtype": None})),
    ("_threshold_backward", lambda x, y: ((x, y), {"threshold": 0})),
]


@pytest.mark.parametrize("name,make", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.int64])
def test_replayed_calls_match_the_general_path(name, make, dtype):
    row = _dispatch.OPS[name]
    g = np.random.default_rng(0)
    x = tp.tensor(g.standard_normal((3, 4)) * 3).to(dtype)
    y = tp.tensor(g.standard_normal((3, 4)) * 3).to(dtype)
    targs, params = make(x, y)
    try:
        want = _dispatch._general_call(row, targs, dict(params))
    except Exception as e:  # noqa: BLE001 - the native call must raise the same
        with pytest.raises(type(e), match=None):
            C.plain_call(row, targs, dict(params))
        return
    for _ in range(3):  # the first call plans, the others replay
        _same(C.plain_call(row, targs, dict(params)), want)


def test_a_plan_is_made_once_per_key(plans):
    x = tp.randn(3, 4)
    for _ in range(5):
        tp.relu(x)
    assert plans.count("relu") == 1
    tp.relu(tp.randn(3, 5))  # another shape
    tp.relu(x.double())  # another dtype
    assert plans.count("relu") == 3
    tp.relu(tp.randn(3, 5))
    assert plans.count("relu") == 3


def test_parameter_type_and_name_are_part_of_the_key(plans):
    x = tp.arange(12.0).reshape(3, 4)
    row = _dispatch.OPS["sum"]
    a = C.plain_call(row, (x,), {"dim": 1, "keepdim": False, "dtype": None})
    b = C.plain_call(row, (x,), {"dim": 1, "keepdim": True, "dtype": None})
    assert a.shape == (3,) and b.shape == (3, 1)
    # True == 1 and hash(True) == hash(1): the type keeps them apart
    c = C.plain_call(row, (x,), {"dim": 1, "keepdim": 1, "dtype": None})
    d = C.plain_call(row, (x,), {"dim": 1, "keepdim": True, "dtype": None})
    assert c.shape == d.shape == (3, 1)
    assert plans.count("sum") == 3
    # the same values under other names are another call
    e = C.plain_call(row, (x,), {"keepdim": False, "dim": 1, "dtype": None})
    assert e.shape == (3,) and plans.count("sum") == 4


def test_numbers_are_converted_per_call_not_baked_into_the_plan():
    x = tp.tensor([[1.0, -2.0], [3.0, -4.0]])
    assert tp.clamp(x, min=0.0).tolist() == [[1.0, 0.0], [3.0, 0.0]]
    assert tp.clamp(x, min=-3.0).tolist() == [[1.0, -2.0], [3.0, -3.0]]
    assert tp.clamp(x, min=2).tolist() == [[2.0, 2.0], [3.0, 2.0]]
    i = tp.tensor([1, 2, 3])
    assert tp.maximum(i, tp.tensor(2)).tolist() == [2, 2, 3]


def test_errors_keep_the_general_paths_messages():
    x = tp.randn(2, 3)
    for _ in range(2):  # planned or not, the same error
        with pytest.raises(RuntimeError, match=r"matmul|mat1 and mat2|shapes cannot"):
            tp.matmul(x, x)
    idx = tp.tensor([[0, 5, 1]])
    with pytest.raises(RuntimeError, match=r"gather\(\)"):
        tp.gather(x, 1, idx)  # a kernel that raises: the Python call explains it
    idx_ok = tp.tensor([[0, 2, 1]])
    assert tp.gather(x, 1, idx_ok).tolist() == [[x[0, 0].item(), x[0, 2].item(), x[0, 1].item()]]
    with pytest.raises(OverflowError, match="does not fit in int64"):
        tp.add(tp.tensor([1]), 2**70)  # past int64: never planned, the general path raises


def test_kernels_that_may_warn_stay_quiet():
    x = tp.tensor([0.0, -1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            r = tp.log(x)
            s = tp.sqrt(x)
    assert r.tolist()[0] == -np.inf and np.isnan(r.tolist()[1])
    assert np.isnan(s.tolist()[1])
    # the quiet state was undone: numpy warns again outside the op
    with pytest.warns(RuntimeWarning):
        np.log(np.array([-1.0]))


def test_results_are_fresh_aligned_and_record_autograd():
    x = tp.randn(4, 5, requires_grad=True)
    w = tp.randn(5, 3, requires_grad=True)
    y = tp.matmul(x, w)
    assert y.data_ptr() % 64 == 0 and y.grad_fn is not None
    y.relu().sum().backward()
    ref_w = x.detach().numpy().T @ (y.detach().numpy() > 0).astype(np.float32)
    np.testing.assert_allclose(w.grad.numpy(), ref_w, rtol=1e-5, atol=1e-6)
    with tp.no_grad():
        z = tp.matmul(x, w)
    assert z.grad_fn is None and not z.requires_grad
    # the result owns its memory: writing it leaves the inputs alone
    a = tp.ones(3)
    b = tp.relu(a)
    b.add_(1.0)
    assert a.tolist() == [1.0, 1.0, 1.0]


def test_non_plain_calls_take_the_general_path():
    x = tp.randn(3)
    out = tp.empty(3)
    assert tp.exp(x, out=out) is out  # out=
    np.testing.assert_allclose(out.numpy(), np.exp(x.numpy()), rtol=1e-6)
    # a list argument is not keyable: the general path answers
    row = _dispatch.OPS["sum"]
    r = C.plain_call(row, (tp.ones(2, 3),), {"dim": [0, 1], "keepdim": False, "dtype": None})
    assert r.item() == 6.0
    with tp.profiler.profile() as p:  # a layer: every call is seen
        tp.relu(x)
    assert any(e.name == "relu" for e in p.events())


def test_misuse_is_an_error_not_a_crash():
    with pytest.raises(ValueError, match="already called"):
        C.init_plain(print, print, print, print, _dispatch.OpDef, tp.dtype, None)
    with pytest.raises(TypeError, match="callables"):
        C.init_plain(1, print, print, print, _dispatch.OpDef, tp.dtype, None)
    with pytest.raises(TypeError, match="expected classes"):
        C.init_plain(print, print, print, print, 1, tp.dtype, None)
    with pytest.raises(TypeError, match="ContextVar"):
        C.init_plain(print, print, print, print, _dispatch.OpDef, tp.dtype, (1, 2))
    with pytest.raises(TypeError):
        C.plain_call()  # too few arguments: the general path's own TypeError
    row, xs = _dispatch.OPS["relu"], [tp.tensor([-1.0, 2.0])]
    # targs as a list is not a plain call: the general path answers as it always did
    assert C.plain_call(row, xs, {}).tolist() == _dispatch._general_call(row, xs, {}).tolist()
    assert tp.relu(tp.ones(2)).tolist() == [1.0, 1.0]


def _handler(arr) -> str:
    return np._core.multiarray.get_handler_name(arr)


def test_large_results_are_kept_as_the_storage_without_a_copy():
    x = tp.tensor(np.linspace(-2, 2, 1000, dtype=np.float32))  # 4000 bytes: past the slabs
    y = tp.exp(x)
    # numpy allocated the result through the aligned handler, and the tensor keeps it
    assert _handler(y._data) == "tensorplay_aligned64"
    assert y._data.base is None and y.data_ptr() % 64 == 0
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()), rtol=1e-6)
    # only inside the kernel: numpy's own allocator is back afterwards
    assert _handler(np.empty(1000)) == "default_allocator"
    # small results still come from the slabs
    s = tp.exp(tp.ones(4))
    assert s._data.base is not None and s.data_ptr() % 64 == 0


def test_the_aligned_allocator_reallocates_and_frees(monkeypatch):
    """A kernel that grows an array (numpy reallocs) keeps its contents, and the arrays it
    leaves behind are freed by the handler that made them."""
    calls = []

    def grow(xp, a):
        calls.append(1)
        grown = np.fromiter((float(i) for i in range(a.size)), np.float32)  # reallocs
        assert _handler(grown) == "tensorplay_aligned64"
        zeroed = np.zeros(a.size, np.float32)  # calloc
        return (grown + zeroed).reshape(a.shape)

    C.plain_forget()
    monkeypatch.setattr(_dispatch, "_kernel", lambda row, xp, cdt, odt, params: grow)
    try:
        x = tp.ones(3000)
        for _ in range(3):
            r = tp.relu(x)
            np.testing.assert_array_equal(r.numpy(), np.arange(3000, dtype=np.float32))
    finally:
        C.plain_forget()
    assert len(calls) == 3
    del r


def test_a_kernel_handing_back_an_input_array_gets_a_copy(monkeypatch):
    x = tp.exp(tp.zeros(1000))  # its array was kept without a copy: it owns its memory
    assert x._data.base is None
    C.plain_forget()
    monkeypatch.setattr(_dispatch, "_kernel", lambda row, xp, cdt, odt, params: lambda xp, a: a)
    try:
        y = tp.relu(x)
    finally:
        C.plain_forget()
    assert y._data is not x._data and y.data_ptr() != x.data_ptr()
    y.add_(1.0)
    assert x.tolist() == [1.0] * 1000 and y.tolist() == [2.0] * 1000


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_relu_and_its_backward_match_numpy(dtype):
    g = np.random.default_rng(1)
    x = (g.standard_normal((5, 7)) * 2).astype(dtype)
    x[0, :4] = [np.nan, -0.0, 0.0, -np.inf]
    grad = g.standard_normal((5, 7)).astype(dtype)
    r = C.relu(x)
    want = np.maximum(x, 0)
    np.testing.assert_array_equal(r, want)
    assert r.dtype == dtype and not np.signbit(r[0, 1])  # -0.0 -> +0.0, as numpy's maximum
    for t in (0, 0.5, -1):
        np.testing.assert_array_equal(
            C.threshold_backward(grad, x, t), np.where(x <= t, dtype(0), grad)
        )
    # other dtypes and layouts: None, the numpy kernel answers
    assert C.relu(x.astype(np.float16)) is None and C.relu(x.T) is None
    assert C.relu([1.0]) is None
    assert (
        C.threshold_backward(grad, x.astype(np.float32 if dtype is np.float64 else np.float64), 0)
        is None
    )
    assert C.threshold_backward(grad[:, :3], x[:, :3], 0) is None  # not contiguous
    assert C.threshold_backward(grad[:2], x[:3], 0) is None  # shapes differ
    # through the op: relu's gradient where the input is NaN passes the gradient on
    t = tp.tensor(x, requires_grad=True)
    t.relu().backward(tp.tensor(grad))
    np.testing.assert_array_equal(t.grad.numpy(), np.where(np.maximum(x, 0) <= 0, 0, grad))
