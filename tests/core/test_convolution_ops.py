"""Convolution and pooling rows against torch: values and gradients (input, weight, bias)
across stride / padding / dilation / groups / ceil_mode / count_include_pad, second-order
gradients, meta shapes, dtypes, and torch's words for bad shapes.

The op-table tests (``test_optable.py``, ``test_autograd_ops.py``) check the rows against
numpy references and finite differences; here torch is the oracle. Each test that needs
torch skips by itself when it is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

# torch's note that an uneven padding="same" copies the input
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is the oracle of these tests")


def _np(t):
    return np.asarray(t.detach().cpu()) if isinstance(t, tp.Tensor) else t.detach().numpy()


def _arrays(shapes, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [None if s is None else rng.standard_normal(s).astype(dtype) for s in shapes]


def _run(lib, fn, arrays, seed_grad, device="cpu"):
    """fn(*tensors) in ``lib`` with every array a leaf that requires grad; the result,
    backpropagated against a fixed random cotangent; (outputs, grads)."""
    if lib is tp:
        leaves = [
            None if a is None else tp.tensor(a, device=device, requires_grad=True) for a in arrays
        ]
    else:
        leaves = [None if a is None else lib.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    first = out[0] if isinstance(out, tuple) else out
    cot = np.random.default_rng(seed_grad).standard_normal(tuple(first.shape))
    cot_t = tp.tensor(cot, dtype=first.dtype, device=device) if lib is tp else lib.tensor(cot)
    (first * cot_t.to(first.dtype)).sum().backward()
    return out, [None if t is None else t.grad for t in leaves]


def _compare(torch, tp_fn, torch_fn, shapes, device="cpu", rtol=1e-10, atol=1e-10):
    arrays = _arrays(shapes)
    out_a, grads_a = _run(tp, tp_fn, arrays, 1, device)
    out_b, grads_b = _run(torch, torch_fn, arrays, 1)
    outs_a = out_a if isinstance(out_a, tuple) else (out_a,)
    outs_b = out_b if isinstance(out_b, tuple) else (out_b,)
    for a, b in zip(outs_a, outs_b):
        assert tuple(a.shape) == tuple(b.shape)
        np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol)
    for i, (ga, gb) in enumerate(zip(grads_a, grads_b)):
        if gb is None:
            assert ga is None, f"input {i}: tensorplay has a gradient, torch none"
            continue
        assert ga is not None, f"input {i}: no gradient"
        np.testing.assert_allclose(_np(ga), _np(gb), rtol=rtol, atol=atol, err_msg=f"input {i}")


# ---- convolutions -----------------------------------------------------------------------------

CONV2D = [
    ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    ((2, 3, 7, 6), (4, 3, 3, 2), True, {"stride": 2}),
    ((2, 3, 7, 6), (4, 3, 3, 3), False, {"stride": (2, 3), "padding": (1, 2)}),
    ((1, 3, 8, 8), (4, 3, 3, 3), True, {"padding": 2, "dilation": 2}),
    ((2, 4, 6, 7), (6, 2, 3, 2), True, {"groups": 2, "stride": (1, 2), "dilation": (2, 1)}),
    ((2, 6, 5, 5), (6, 1, 3, 3), True, {"groups": 6, "padding": 1}),  # depthwise
    ((1, 3, 6, 6), (2, 3, 2, 4), True, {"padding": "same"}),  # uneven pads
    ((1, 3, 6, 7), (2, 3, 3, 2), True, {"padding": "same", "dilation": (2, 3)}),
    ((1, 3, 6, 6), (2, 3, 3, 3), True, {"padding": "valid", "stride": 2}),
    ((3, 6, 6), (2, 3, 3, 3), True, {"padding": 1}),  # unbatched
    ((0, 3, 6, 6), (2, 3, 3, 3), True, {}),  # empty batch
]


@pytest.mark.parametrize("xs, ws, bias, kw", CONV2D, ids=[str(c[3]) for c in CONV2D])
def test_conv2d_values_and_grads_match_torch(torch, device, xs, ws, bias, kw):
    shapes = [xs, ws, (ws[0],) if bias else None]
    _compare(
        torch,
        lambda x, w, b: tp.conv2d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kw),
        shapes,
        device,
    )


CONV1D = [
    ((2, 3, 9), (4, 3, 3), True, {}),
    ((2, 3, 9), (4, 3, 2), False, {"stride": 2, "padding": 1}),
    ((2, 4, 10), (6, 2, 3), True, {"groups": 2, "dilation": 3, "padding": [2]}),
    ((1, 3, 8), (2, 3, 4), True, {"padding": "same", "dilation": 1}),
    ((3, 8), (2, 3, 3), True, {"stride": 3}),  # unbatched
]


@pytest.mark.parametrize("xs, ws, bias, kw", CONV1D, ids=[str(c[3]) for c in CONV1D])
def test_conv1d_values_and_grads_match_torch(torch, device, xs, ws, bias, kw):
    shapes = [xs, ws, (ws[0],) if bias else None]
    _compare(
        torch,
        lambda x, w, b: tp.conv1d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv1d(x, w, b, **kw),
        shapes,
        device,
    )


CONV_T2D = [
    ((2, 3, 4, 5), (3, 2, 3, 3), True, {}),
    ((2, 3, 4, 5), (3, 2, 3, 3), True, {"stride": 2, "padding": 1, "output_padding": 1}),
    ((1, 4, 3, 4), (4, 3, 2, 3), False, {"stride": (2, 3), "padding": (1, 0), "groups": 2}),
    ((1, 4, 3, 4), (4, 1, 3, 2), True, {"dilation": (2, 1), "output_padding": (1, 0)}),
    ((2, 4, 3, 3), (4, 2, 2, 2), True, {"groups": 2, "stride": 2, "dilation": 3}),
    ((3, 4, 4), (3, 2, 3, 3), True, {"stride": 2}),  # unbatched
]


@pytest.mark.parametrize("xs, ws, bias, kw", CONV_T2D, ids=[str(c[3]) for c in CONV_T2D])
def test_conv_transpose2d_values_and_grads_match_torch(torch, device, xs, ws, bias, kw):
    groups = kw.get("groups", 1)
    shapes = [xs, ws, (ws[1] * groups,) if bias else None]
    _compare(
        torch,
        lambda x, w, b: tp.conv_transpose2d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kw),
        shapes,
        device,
    )


CONV_T1D = [
    ((2, 3, 5), (3, 2, 3), True, {}),
    ((2, 3, 5), (3, 2, 3), True, {"stride": 3, "padding": 2, "output_padding": 2}),
    ((1, 4, 6), (4, 3, 2), False, {"groups": 2, "dilation": 2, "output_padding": 1}),
    ((3, 5), (3, 2, 4), True, {"padding": 1}),  # unbatched
]


@pytest.mark.parametrize("xs, ws, bias, kw", CONV_T1D, ids=[str(c[3]) for c in CONV_T1D])
def test_conv_transpose1d_values_and_grads_match_torch(torch, device, xs, ws, bias, kw):
    groups = kw.get("groups", 1)
    shapes = [xs, ws, (ws[1] * groups,) if bias else None]
    _compare(
        torch,
        lambda x, w, b: tp.conv_transpose1d(x, w, b, **kw),
        lambda x, w, b: torch.nn.functional.conv_transpose1d(x, w, b, **kw),
        shapes,
        device,
    )


def test_conv2d_float32_matches_torch(torch):
    x, w, b = _arrays([(4, 3, 12, 12), (8, 3, 3, 3), (8,)], dtype=np.float32)
    got = tp.conv2d(tp.tensor(x), tp.tensor(w), tp.tensor(b), stride=2, padding=1)
    want = torch.nn.functional.conv2d(
        torch.tensor(x), torch.tensor(w), torch.tensor(b), stride=2, padding=1
    )
    assert got.dtype is tp.float32
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["conv2d", "conv_transpose2d"])
def test_conv_second_order_gradients_match_torch(torch, name):
    """Gradients of the gradients (create_graph=True): the derivatives are themselves
    built from the convolution rows."""
    x, w, b = _arrays([(2, 2, 5, 5), (2, 2, 3, 3), (2,)])
    kw = {"stride": 2, "padding": 1}
    results = []
    for lib, fn in (
        (tp, getattr(tp, name)),
        (torch, getattr(torch.nn.functional, name)),
    ):
        xt, wt, bt = (lib.tensor(a, requires_grad=True) for a in (x, w, b))
        y = fn(xt, wt, bt, **kw)
        gx, gw = (
            tp.autograd.grad(y.pow(2).sum(), [xt, wt], create_graph=True)
            if lib is tp
            else torch.autograd.grad(y.pow(2).sum(), [xt, wt], create_graph=True)
        )
        (gx.pow(2).sum() + (gw * gw).sum()).backward()
        results.append([_np(t) for t in (gx, gw, xt.grad, wt.grad, bt.grad)])
    for a, b_ in zip(*results):
        np.testing.assert_allclose(a, b_, rtol=1e-10, atol=1e-10)


def test_conv_complex_matches_torch(torch):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 5, 5)) + 1j * rng.standard_normal((1, 2, 5, 5))
    w = rng.standard_normal((3, 2, 2, 2)) + 1j * rng.standard_normal((3, 2, 2, 2))
    got = tp.conv2d(tp.tensor(x), tp.tensor(w), padding=1)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1)
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-12, atol=1e-12)


def test_conv_integer_dtypes_follow_torch(torch):
    x = np.arange(2 * 2 * 4 * 4).reshape(2, 2, 4, 4) % 7 - 3
    w = np.arange(3 * 2 * 2 * 2).reshape(3, 2, 2, 2) % 5 - 2
    got = tp.conv2d(tp.tensor(x), tp.tensor(w), stride=2, padding=1)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), stride=2, padding=1)
    assert got.dtype is tp.int64
    np.testing.assert_array_equal(_np(got), want.numpy())
    wt = np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2) % 5 - 2
    got = tp.conv_transpose2d(tp.tensor(x), tp.tensor(wt), stride=2)
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(wt), stride=2)
    np.testing.assert_array_equal(_np(got), want.numpy())
    # torch's transposed convolution has no int32 kernel, and no convolution takes bool
    with pytest.raises(NotImplementedError, match="conv_transpose2d.*int32"):
        tp.conv_transpose2d(tp.tensor(x, dtype=tp.int32), tp.tensor(wt, dtype=tp.int32))
    with pytest.raises(NotImplementedError, match="bool"):
        tp.conv2d(tp.ones(1, 1, 3, 3, dtype=tp.bool), tp.ones(1, 1, 2, 2, dtype=tp.bool))


@pytest.mark.parametrize("dt", [tp.float16, tp.bfloat16])
def test_conv_half_precision_keeps_its_dtype(dt):
    x = tp.randn(1, 2, 5, 5).to(dt)
    w = tp.randn(3, 2, 3, 3).to(dt)
    y = tp.conv2d(x, w, padding=1)
    assert y.dtype is dt and tuple(y.shape) == (1, 3, 5, 5)
    want = tp.conv2d(x.float(), w.float(), padding=1)
    np.testing.assert_allclose(_np(y.float()), _np(want), rtol=2e-2, atol=5e-2)


# ---- pooling ------------------------------------------------------------------------------------

MAX_POOL = [
    ((2, 3, 6, 6), {"kernel_size": 2}),
    ((2, 3, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((1, 2, 8, 9), {"kernel_size": (2, 3), "stride": (1, 2), "dilation": (2, 1)}),
    ((1, 2, 8, 9), {"kernel_size": 3, "dilation": 2, "padding": 1, "ceil_mode": True}),
    ((1, 2, 9, 8), {"kernel_size": (4, 2), "stride": 3, "padding": (2, 1), "ceil_mode": True}),
    ((3, 5, 5), {"kernel_size": 2, "stride": 1}),  # unbatched, overlapping windows
]


@pytest.mark.parametrize("xs, kw", MAX_POOL, ids=[str(c[1]) for c in MAX_POOL])
def test_max_pool2d_values_indices_and_grads_match_torch(torch, device, xs, kw):
    for ri in (False, True):
        _compare(
            torch,
            lambda x: tp.max_pool2d(x, **kw, return_indices=ri),
            lambda x: torch.nn.functional.max_pool2d(x, **kw, return_indices=ri),
            [xs],
            device,
        )


def test_max_pool2d_ties_and_nans_pick_torchs_index(torch):
    rows = [[1.0, 3.0, 3.0, 2.0], [float("nan"), 0.0, float("nan"), 5.0]]
    for kw in ({"kernel_size": (1, 2), "stride": 1, "padding": (0, 1)}, {"kernel_size": 2}):
        a = tp.max_pool2d(tp.tensor([[rows]]), **kw, return_indices=True)
        b = torch.nn.functional.max_pool2d(torch.tensor([[rows]]), **kw, return_indices=True)
        np.testing.assert_array_equal(_np(a[0]), b[0].numpy())
        np.testing.assert_array_equal(_np(a[1]), b[1].numpy())
    ints = np.array([[[[3, 7, 7], [7, 1, -5], [0, 7, 2]]]])
    a = tp.max_pool2d(tp.tensor(ints), 2, 1, return_indices=True)
    b = torch.nn.functional.max_pool2d(torch.tensor(ints), 2, 1, return_indices=True)
    assert a[0].dtype is tp.int64 and a[1].dtype is tp.int64
    np.testing.assert_array_equal(_np(a[0]), b[0].numpy())
    np.testing.assert_array_equal(_np(a[1]), b[1].numpy())


def test_max_pool2d_backward_puts_each_gradient_where_torch_does(torch, monkeypatch):
    """Ties, NaNs and overlapping windows: the gradient goes to the position the forward
    picked, natively (one pass) and through the indices and a scatter (its twin)."""
    from tensorplay._rows import convolution

    rows = [[1.0, 3.0, 3.0, 2.0], [float("nan"), 0.0, float("nan"), 5.0], [4.0, 4.0, 4.0, 4.0]]
    cases = ({"kernel_size": 2, "stride": 1}, {"kernel_size": (1, 2), "padding": (0, 1)})
    for native in (True, False):
        if not native:
            monkeypatch.setattr(convolution, "NATIVE", None)
        for kw in cases:
            for dtype in (tp.float32, tp.float64):
                x = tp.tensor([[rows]], dtype=dtype, requires_grad=True)
                tx = torch.tensor([[rows]], dtype=getattr(torch, dtype.name), requires_grad=True)
                out = tp.max_pool2d(x, **kw)
                g = tp.arange(1.0, out.numel() + 1).reshape(tuple(out.shape)).to(dtype)
                (got,) = tp.autograd.grad(out, x, g)
                tout = torch.nn.functional.max_pool2d(tx, **kw)
                (want,) = torch.autograd.grad(tout, tx, torch.from_numpy(g.numpy()))
                np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_native_max_pool2d_backward_refuses_misuse():
    from tensorplay._native import NATIVE

    if NATIVE is None:
        pytest.skip("tensorplay._C is not loaded (TENSORPLAY_PURE_PYTHON=1 or not built)")
    x = np.zeros((2, 4, 4), np.float32)
    geo = (2, 2, 2, 2, 1, 1, 0, 0, 2, 2)
    assert NATIVE.max_pool2d_backward(x, np.ones((2, 2, 2), np.float32), *geo).shape == (2, 4, 4)
    with pytest.raises(ValueError, match="grad must be a C-contiguous"):
        NATIVE.max_pool2d_backward(x, np.ones((2, 3, 2), np.float32), *geo)  # wrong shape
    with pytest.raises(ValueError, match="grad must be"):
        NATIVE.max_pool2d_backward(x, np.ones((2, 2, 2), np.float64), *geo)  # another dtype
    with pytest.raises(ValueError, match="grad must be"):
        NATIVE.max_pool2d_backward(x, [[1.0]], *geo)  # not an array
    with pytest.raises(ValueError, match="float32/float64"):
        NATIVE.max_pool2d_backward(x.astype(np.int64), np.ones((2, 2, 2)), *geo)
    with pytest.raises(ValueError, match="wholly in the padding"):
        NATIVE.max_pool2d_backward(x, np.ones((2, 2, 2), np.float32), 2, 2, 2, 2, 1, 1, 0, 0, 9, 2)
    with pytest.raises(TypeError, match="numpy array"):
        NATIVE.max_pool2d_backward(None, np.ones((2, 2, 2), np.float32), *geo)


AVG_POOL = [
    ((2, 3, 6, 6), {"kernel_size": 2}),
    ((2, 3, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 3, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ((2, 3, 7, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    (
        (1, 2, 7, 8),
        {
            "kernel_size": (3, 2),
            "stride": (2, 3),
            "padding": (1, 1),
            "ceil_mode": True,
            "count_include_pad": False,
        },
    ),
    ((1, 2, 5, 5), {"kernel_size": 2, "stride": 1, "padding": 1, "divisor_override": 3}),
    ((3, 5, 4), {"kernel_size": (2, 1)}),  # unbatched
]


@pytest.mark.parametrize("xs, kw", AVG_POOL, ids=[str(c[1]) for c in AVG_POOL])
def test_avg_pool2d_values_and_grads_match_torch(torch, device, xs, kw):
    _compare(
        torch,
        lambda x: tp.avg_pool2d(x, **kw),
        lambda x: torch.nn.functional.avg_pool2d(x, **kw),
        [xs],
        device,
    )


def test_avg_pool2d_int64_truncates_like_torch(torch):
    x = np.array([[[[-3, 4, -5], [1, 2, 7], [8, -9, 1]]]])
    for kw in ({"kernel_size": 2, "stride": 1}, {"kernel_size": 2, "stride": 1, "padding": 1}):
        got = tp.avg_pool2d(tp.tensor(x), **kw)
        np.testing.assert_array_equal(
            _np(got), torch.nn.functional.avg_pool2d(torch.tensor(x), **kw).numpy()
        )
    with pytest.raises(NotImplementedError, match="int32"):
        tp.avg_pool2d(tp.tensor(x, dtype=tp.int32), 2)


ADAPTIVE = [
    ((2, 3, 7, 5), 3),
    ((2, 3, 7, 5), 1),
    ((2, 3, 7, 5), (4, None)),
    ((2, 3, 4, 3), (7, 5)),  # more outputs than inputs: overlapping windows
    ((3, 6, 6), (2, 3)),  # unbatched
]


@pytest.mark.parametrize("xs, size", ADAPTIVE, ids=[str(c[1]) for c in ADAPTIVE])
def test_adaptive_avg_pool2d_values_and_grads_match_torch(torch, device, xs, size):
    _compare(
        torch,
        lambda x: tp.adaptive_avg_pool2d(x, size),
        lambda x: torch.nn.functional.adaptive_avg_pool2d(x, size),
        [xs],
        device,
    )


def test_pooling_dtypes_follow_torch():
    x = tp.arange(16).reshape(1, 1, 4, 4)
    assert tp.max_pool2d(x.to(tp.uint8), 2).dtype is tp.uint8
    assert tp.max_pool2d(x.half(), 2).dtype is tp.float16
    with pytest.raises(NotImplementedError):
        tp.max_pool2d(x > 3, 2)  # bool
    with pytest.raises(NotImplementedError):
        tp.adaptive_avg_pool2d(x, 2)  # torch's is float-only
    assert tp.adaptive_avg_pool2d(x.to(tp.bfloat16), 2).dtype is tp.bfloat16


# ---- meta tensors -------------------------------------------------------------------------------


@pytest.mark.parametrize("xs, ws, bias, kw", CONV2D, ids=[str(c[3]) for c in CONV2D])
def test_conv2d_meta_shape_matches_torch(torch, xs, ws, bias, kw):
    x, w = tp.empty(*xs, device="meta"), tp.empty(*ws, device="meta")
    b = tp.empty(ws[0], device="meta") if bias else None
    got = tp.conv2d(x, w, b, **kw)
    want = torch.nn.functional.conv2d(
        torch.empty(xs, device="meta"), torch.empty(ws, device="meta"), None, **kw
    )
    assert got.device.type == "meta" and tuple(got.shape) == tuple(want.shape)


def test_meta_shapes_of_every_row():
    m = {"device": "meta"}
    assert tuple(tp.conv1d(tp.empty(2, 3, 9, **m), tp.empty(4, 3, 3, **m)).shape) == (2, 4, 7)
    y = tp.conv_transpose2d(
        tp.empty(2, 3, 4, 5, **m), tp.empty(3, 2, 3, 3, **m), stride=2, output_padding=1
    )
    assert tuple(y.shape) == (2, 2, 10, 12)
    y = tp.conv_transpose1d(tp.empty(3, 5, **m), tp.empty(3, 2, 4, **m), padding=1)
    assert tuple(y.shape) == (2, 6)
    v, i = tp.max_pool2d(tp.empty(2, 3, 7, 6, **m), 3, 2, 1, ceil_mode=True, return_indices=True)
    assert tuple(v.shape) == tuple(i.shape) == (2, 3, 4, 4) and i.dtype is tp.int64
    y = tp.avg_pool2d(tp.empty(3, 7, 6, **m), 3, 2, ceil_mode=True)
    assert tuple(y.shape) == (3, 3, 3)
    assert tuple(tp.adaptive_avg_pool2d(tp.empty(2, 3, 7, 6, **m), (4, None)).shape) == (
        2,
        3,
        4,
        6,
    )


# ---- torch's words for bad arguments -----------------------------------------------------------


def _raises(exc, msg, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert str(info.value) == msg


def test_conv_shape_errors_say_what_torch_says():
    x = tp.zeros(2, 4, 8, 8)
    _raises(
        RuntimeError,
        "Given groups=1, weight of size [5, 3, 3, 3], expected input[2, 4, 8, 8] to have 3 "
        "channels, but got 4 channels instead",
        tp.conv2d,
        x,
        tp.zeros(5, 3, 3, 3),
    )
    _raises(
        RuntimeError,
        "Given groups=2, weight of size [6, 3, 3, 3], expected input[2, 4, 8, 8] to have 6 "
        "channels, but got 4 channels instead",
        tp.conv2d,
        x,
        tp.zeros(6, 3, 3, 3),
        groups=2,
    )
    _raises(
        RuntimeError,
        "Given groups=2, expected weight to be divisible by 2 at dimension 0, but got weight "
        "of size [5, 2, 3, 3] instead",
        tp.conv2d,
        x,
        tp.zeros(5, 2, 3, 3),
        groups=2,
    )
    _raises(
        RuntimeError,
        "Given weight of size [5, 4, 3, 3], expected bias to be 1-dimensional with 5 "
        "elements, but got bias of size [4] instead",
        tp.conv2d,
        x,
        tp.zeros(5, 4, 3, 3),
        tp.zeros(4),
    )
    _raises(
        RuntimeError,
        "Calculated padded input size per channel: (8 x 8). Kernel size: (9 x 9). Kernel "
        "size can't be greater than actual input size",
        tp.conv2d,
        x,
        tp.zeros(5, 4, 9, 9),
    )
    _raises(
        RuntimeError,
        "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [8, 8]",
        tp.conv2d,
        tp.zeros(8, 8),
        tp.zeros(5, 4, 3, 3),
    )
    _raises(
        RuntimeError,
        "Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of size: "
        "[2, 4, 8, 8]",
        tp.conv1d,
        x,
        tp.zeros(5, 4, 3),
    )
    _raises(
        RuntimeError,
        "padding='same' is not supported for strided convolutions",
        tp.conv2d,
        x,
        tp.zeros(5, 4, 3, 3),
        stride=2,
        padding="same",
    )
    for bad, msg in (
        ({"stride": 0}, "non-positive stride is not supported"),
        ({"dilation": 0}, "non-positive dilation is not supported"),
        ({"padding": -1}, "negative padding is not supported"),
        ({"groups": 0}, "non-positive groups is not supported"),
    ):
        _raises(RuntimeError, msg, tp.conv2d, x, tp.zeros(5, 4, 3, 3), **bad)
    with pytest.raises(RuntimeError, match=r"^Invalid padding string: 'full'; expected"):
        tp.conv2d(x, tp.zeros(5, 4, 3, 3), padding="full")
    with pytest.raises(RuntimeError, match=r"list of 2 values .* but got stride=\[1, 1, 1\]"):
        tp.conv2d(x, tp.zeros(5, 4, 3, 3), stride=(1, 1, 1))
    with pytest.raises(TypeError, match="'stride' must be an int or a tuple of 2 ints"):
        tp.conv2d(x, tp.zeros(5, 4, 3, 3), stride=1.5)
    with pytest.raises(RuntimeError, match="expected a 4-dimensional weight"):
        tp.conv2d(x, tp.zeros(5, 4, 3))
    with pytest.raises(TypeError, match="argument 'weight' must be a Tensor, not float"):
        tp.conv2d(x, 2.0)
    with pytest.raises(TypeError, match="argument 'bias' must be a Tensor or None, not float"):
        tp.conv_transpose2d(x, tp.zeros(4, 5, 3, 3), 1.0)
    with pytest.raises(RuntimeError, match="same dtype"):
        tp.conv2d(x, tp.zeros(5, 4, 3, 3, dtype=tp.float64))


def test_conv_shape_errors_on_meta_tensors_too():
    with pytest.raises(RuntimeError, match="to have 3 channels, but got 4 channels instead"):
        tp.conv2d(tp.empty(2, 4, 8, 8, device="meta"), tp.empty(5, 3, 3, 3, device="meta"))


def test_conv_transpose_shape_errors_say_what_torch_says():
    x = tp.zeros(2, 4, 5, 5)
    _raises(
        RuntimeError,
        "Given transposed=1, weight of size [3, 3, 3, 3], expected input[2, 4, 5, 5] to have "
        "3 channels, but got 4 channels instead",
        tp.conv_transpose2d,
        x,
        tp.zeros(3, 3, 3, 3),
    )
    _raises(
        RuntimeError,
        "Given transposed=1, weight of size [4, 3, 3, 3], expected bias to be 1-dimensional "
        "with 3 elements, but got bias of size [4] instead",
        tp.conv_transpose2d,
        x,
        tp.zeros(4, 3, 3, 3),
        tp.zeros(4),
    )
    with pytest.raises(RuntimeError, match="output padding must be smaller than either stride"):
        tp.conv_transpose2d(x, tp.zeros(4, 3, 3, 3), stride=2, output_padding=2)
    with pytest.raises(RuntimeError, match=r"Calculated output size per channel: \(-1\)\. "):
        tp.conv_transpose1d(tp.zeros(1, 1, 5), tp.zeros(1, 1, 3), padding=4)
    with pytest.raises(TypeError, match="no padding strings"):
        tp.conv_transpose2d(x, tp.zeros(4, 3, 3, 3), padding="same")


def test_pooling_errors_say_what_torch_says():
    x = tp.zeros(2, 4, 5, 5)
    _raises(
        RuntimeError,
        "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 "
        "and dilation=1",
        tp.max_pool2d,
        x,
        3,
        padding=2,
    )
    _raises(
        RuntimeError,
        "Given input size: (4x5x5). Calculated output size: (4x0x0). Output size is too small",
        tp.avg_pool2d,
        x,
        6,
    )
    _raises(
        RuntimeError,
        "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, but "
        "got:[2, 0, 5, 5]",
        tp.max_pool2d,
        tp.zeros(2, 0, 5, 5),
        2,
    )
    _raises(
        RuntimeError,
        "max_pool2d: kernel_size must either be a single int, or a tuple of two ints",
        tp.max_pool2d,
        x,
        (2, 2, 2),
    )
    _raises(RuntimeError, "divisor must be not zero", tp.avg_pool2d, x, 2, divisor_override=0)
    _raises(
        RuntimeError,
        "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 but "
        "received {-1, -1}",
        tp.adaptive_avg_pool2d,
        x,
        -1,
    )
    _raises(
        RuntimeError,
        "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got [5, 5]",
        tp.adaptive_avg_pool2d,
        tp.zeros(5, 5),
        2,
    )
    _raises(
        RuntimeError,
        "pad should be smaller than or equal to half of kernel size, but got padW = 2, "
        "padH = 2, kW = 3, kH = 3",
        tp.max_pool2d,
        x,
        3,
        padding=2,
        dilation=2,
    )
    with pytest.raises(RuntimeError, match="kernel size should be greater than zero"):
        tp.max_pool2d(x, 0)


def test_max_pool2d_is_one_public_function_with_torchs_signature():
    import inspect

    params = list(inspect.signature(tp.max_pool2d).parameters)
    assert params == [
        "input",
        "kernel_size",
        "stride",
        "padding",
        "dilation",
        "ceil_mode",
        "return_indices",
    ]
    y = tp.max_pool2d(tp.arange(16.0).reshape(1, 4, 4), 2)
    assert isinstance(y, tp.Tensor) and y.tolist() == [[[5.0, 7.0], [13.0, 15.0]]]
