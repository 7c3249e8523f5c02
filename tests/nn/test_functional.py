"""``tensorplay.nn.functional`` and ``tensorplay.nn.init`` against torch: values and
gradients of every op and loss, argument errors, init statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.nn.functional as F
from tensorplay.nn import init

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RTOL, ATOL = 1e-5, 1e-6


def _rng(seed=0):
    return np.random.default_rng(seed)


def _is_float(a: np.ndarray) -> bool:
    return np.issubdtype(a.dtype, np.floating)


def compare(tp_fn, torch_fn, *arrays, grad=None, rtol=RTOL, atol=ATOL):
    """Run both frameworks on the same numpy inputs; compare the outputs and the gradients
    of every floating input (``grad``: which inputs to differentiate; default all float)."""
    if grad is None:
        grad = [_is_float(a) for a in arrays]
    a = [tp.tensor(v, requires_grad=g) for v, g in zip(arrays, grad)]
    b = [torch.tensor(v, requires_grad=g) for v, g in zip(arrays, grad)]
    out_a, out_b = tp_fn(*a), torch_fn(*b)
    np.testing.assert_allclose(out_a.detach().numpy(), out_b.detach().numpy(), rtol, atol)
    if any(grad):
        seed = _rng(99).standard_normal(tuple(out_b.shape)).astype(out_b.detach().numpy().dtype)
        (out_a * tp.tensor(seed)).sum().backward()
        (out_b * torch.tensor(seed)).sum().backward()
        for x, y, g in zip(a, b, grad):
            if g:
                np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol, atol)
    return out_a


# --------------------------------------------------------------------------- linear


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5)])
def test_linear(shape, bias):
    r = _rng()
    x = r.standard_normal(shape).astype(np.float32)
    w = r.standard_normal((3, 5)).astype(np.float32)
    b = r.standard_normal(3).astype(np.float32)
    if bias:
        compare(F.linear, TF.linear, x, w, b)
    else:
        compare(F.linear, TF.linear, x, w)


def test_linear_shape_error_names_both_shapes():
    with pytest.raises(RuntimeError, match=r"linear\(\).*\(4, 6\).*\(3, 5\)"):
        F.linear(tp.zeros(4, 6), tp.zeros(3, 5))


# --------------------------------------------------------------------------- activations

ACTS = [
    (F.relu, TF.relu),
    (F.gelu, TF.gelu),
    (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    (F.silu, TF.silu),
    (F.sigmoid, torch.sigmoid),
    (F.tanh, torch.tanh),
    (F.leaky_relu, TF.leaky_relu),
    (lambda x: F.leaky_relu(x, 0.2), lambda x: TF.leaky_relu(x, 0.2)),
    (lambda x: F.softmax(x, -1), lambda x: TF.softmax(x, -1)),
    (lambda x: F.softmax(x, 0), lambda x: TF.softmax(x, 0)),
    (lambda x: F.log_softmax(x, 1), lambda x: TF.log_softmax(x, 1)),
    (lambda x: F.log_softmax(x, 0), lambda x: TF.log_softmax(x, 0)),
]


@pytest.mark.parametrize("i", range(len(ACTS)))
def test_activation(i):
    x = (_rng(i).standard_normal((4, 6)) * 3).astype(np.float32)
    compare(*ACTS[i], x)


def test_gelu_bad_approximate():
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(tp.zeros(2), approximate="fast")


def test_softmax_implicit_dim_warns():
    x = _rng().standard_normal((3, 4)).astype(np.float32)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        out = F.softmax(tp.tensor(x))
    np.testing.assert_allclose(out.numpy(), TF.softmax(torch.tensor(x), 1).numpy(), RTOL, ATOL)


def test_relu_inplace():
    x = tp.tensor([-1.0, 2.0, -3.0])
    out = F.relu(x, inplace=True)
    np.testing.assert_array_equal(x.numpy(), [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(out.numpy(), [0.0, 2.0, 0.0])


# --------------------------------------------------------------------------- dropout


def test_dropout_eval_and_p0_are_identity():
    x = tp.randn(10, 10)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x


def test_dropout_train_statistics_and_scale():
    tp.manual_seed(0)
    x = tp.ones(200, 200, requires_grad=True)
    out = F.dropout(x, p=0.3)
    o = out.detach().numpy()
    zero_frac = float((o == 0).mean())
    assert abs(zero_frac - 0.3) < 0.02
    np.testing.assert_allclose(o[o != 0], 1 / 0.7, rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), o, rtol=1e-6)  # grad = mask / (1-p)


def test_dropout_seeded_is_reproducible():
    tp.manual_seed(123)
    a = F.dropout(tp.ones(50), 0.5).numpy()
    tp.manual_seed(123)
    b = F.dropout(tp.ones(50), 0.5).numpy()
    np.testing.assert_array_equal(a, b)


def test_dropout_p1_zeros_and_bad_p():
    x = tp.randn(4, 4)
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros((4, 4), np.float32))
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="between 0 and 1"):
            F.dropout(x, p)


# --------------------------------------------------------------------------- embedding


@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding(padding_idx):
    r = _rng()
    w = r.standard_normal((6, 4)).astype(np.float32)
    idx = np.array([[0, 2, 5], [2, 1, 5]])
    compare(
        lambda i, w: F.embedding(i, w, padding_idx),
        lambda i, w: TF.embedding(i, w, padding_idx),
        idx,
        w,
        grad=[False, True],
    )


def test_embedding_padding_row_gets_no_grad():
    w = tp.randn(5, 3, requires_grad=True)
    F.embedding(tp.tensor([1, 1, 4]), w, padding_idx=1).sum().backward()
    g = w.grad.numpy()
    np.testing.assert_array_equal(g[1], 0)
    np.testing.assert_array_equal(g[4], 1)


def test_embedding_errors():
    w = tp.randn(5, 3)
    with pytest.raises(IndexError, match="out of range"):
        F.embedding(tp.tensor([0, 5]), w)
    with pytest.raises(RuntimeError, match="integer"):
        F.embedding(tp.tensor([0.0, 1.0]), w)


# --------------------------------------------------------------------------- layer_norm


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("nshape", [(6,), (3, 6)])
def test_layer_norm(nshape, affine):
    r = _rng()
    x = (r.standard_normal((2, 3, 6)) * 2 + 1).astype(np.float32)
    if affine:
        w = r.standard_normal(nshape).astype(np.float32)
        b = r.standard_normal(nshape).astype(np.float32)
        compare(
            lambda x, w, b: F.layer_norm(x, nshape, w, b),
            lambda x, w, b: TF.layer_norm(x, nshape, w, b),
            x,
            w,
            b,
            atol=1e-5,
        )
    else:
        compare(
            lambda x: F.layer_norm(x, nshape, eps=1e-3),
            lambda x: TF.layer_norm(x, nshape, eps=1e-3),
            x,
            atol=1e-5,
        )


def test_layer_norm_shape_error():
    with pytest.raises(RuntimeError, match=r"layer_norm\(\).*\(2, 5\).*\[4\]"):
        F.layer_norm(tp.zeros(2, 5), 4)


# --------------------------------------------------------------------------- one_hot


def test_one_hot():
    idx = np.array([[0, 3], [2, 1]])
    out = F.one_hot(tp.tensor(idx))
    assert out.dtype == tp.int64
    np.testing.assert_array_equal(out.numpy(), TF.one_hot(torch.tensor(idx)).numpy())
    out = F.one_hot(tp.tensor(idx), 6)
    np.testing.assert_array_equal(out.numpy(), TF.one_hot(torch.tensor(idx), 6).numpy())


def test_one_hot_errors():
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(tp.tensor([0, 4]), 3)
    with pytest.raises(RuntimeError, match="non-negative"):
        F.one_hot(tp.tensor([-1, 0]))


# --------------------------------------------------------------------------- regression losses

REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss"])
def test_regression_losses(name, reduction):
    r = _rng()
    x = r.standard_normal((4, 3)).astype(np.float32)
    y = r.standard_normal((4, 3)).astype(np.float32)
    compare(
        lambda a, b: getattr(F, name)(a, b, reduction=reduction),
        lambda a, b: getattr(TF, name)(a, b, reduction=reduction),
        x,
        y,
    )


@pytest.mark.parametrize(
    "fn",
    [
        F.mse_loss,
        F.l1_loss,
        F.nll_loss,
        F.cross_entropy,
        F.binary_cross_entropy,
        F.binary_cross_entropy_with_logits,
    ],
)
def test_bad_reduction_names_value(fn):
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        fn(tp.full((2, 3), 0.5), tp.zeros(2, 3), reduction="avg")


def test_mse_broadcast_warns():
    with pytest.warns(UserWarning, match="different to the input size"):
        F.mse_loss(tp.zeros(3, 1), tp.zeros(3))


# --------------------------------------------------------------------------- nll / cross entropy


def _cls_data(shape, seed=0, ignore=True):
    r = _rng(seed)
    x = r.standard_normal(shape).astype(np.float32)
    c = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else (shape[0], *shape[2:])
    t = r.integers(0, c, tshape).astype(np.int64)
    if ignore and t.ndim:
        t.reshape(-1)[1] = -100
    w = r.uniform(0.5, 2.0, c).astype(np.float32)
    return x, t, w


CLS_SHAPES = [(5,), (6, 4), (3, 4, 5), (2, 3, 2, 2)]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", CLS_SHAPES)
def test_nll_loss(shape, reduction, weighted):
    x, t, w = _cls_data(shape)
    wa, wb = (tp.tensor(w), torch.tensor(w)) if weighted else (None, None)
    compare(
        lambda x, t: F.nll_loss(F.log_softmax(x, 0 if x.ndim == 1 else 1), t, wa, -100, reduction),
        lambda x, t: TF.nll_loss(
            TF.log_softmax(x, 0 if x.dim() == 1 else 1), t, wb, None, -100, None, reduction
        ),
        x,
        t,
    )


def test_nll_loss_custom_ignore_index():
    x, t, w = _cls_data((6, 4), ignore=False)
    t[2] = 3
    compare(
        lambda x, t: F.nll_loss(x, t, tp.tensor(w), ignore_index=3),
        lambda x, t: TF.nll_loss(x, t, torch.tensor(w), ignore_index=3),
        x,
        t,
    )


def test_nll_loss_all_ignored_mean_is_nan():
    out = F.nll_loss(tp.zeros(2, 3), tp.tensor([-100, -100]))
    assert math.isnan(out.item())


@pytest.mark.parametrize("smoothing", [0.0, 0.25])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", CLS_SHAPES)
def test_cross_entropy_class_targets(shape, reduction, weighted, smoothing):
    x, t, w = _cls_data(shape, seed=1)
    wa, wb = (tp.tensor(w), torch.tensor(w)) if weighted else (None, None)
    compare(
        lambda x, t: F.cross_entropy(x, t, wa, reduction=reduction, label_smoothing=smoothing),
        lambda x, t: TF.cross_entropy(x, t, wb, reduction=reduction, label_smoothing=smoothing),
        x,
        t,
    )


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 5, 3)])
def test_cross_entropy_prob_targets(shape, reduction, weighted, smoothing):
    r = _rng(2)
    x = r.standard_normal(shape).astype(np.float32)
    p = r.random(shape).astype(np.float32)
    cdim = 0 if len(shape) == 1 else 1
    p = p / p.sum(axis=cdim, keepdims=True)
    w = r.uniform(0.5, 2, 5).astype(np.float32)
    wa, wb = (tp.tensor(w), torch.tensor(w)) if weighted else (None, None)
    compare(
        lambda x, p: F.cross_entropy(x, p, wa, reduction=reduction, label_smoothing=smoothing),
        lambda x, p: TF.cross_entropy(x, p, wb, reduction=reduction, label_smoothing=smoothing),
        x,
        p,
    )


def test_cross_entropy_errors():
    x = tp.zeros(4, 3)
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        F.cross_entropy(x, tp.tensor([0, 1, 3, 2]))
    with pytest.raises(ValueError, match=r"cross_entropy\(\).*\(4,\).*\(4, 3\).*\(5,\)"):
        F.cross_entropy(x, tp.tensor([0, 1, 2, 0, 1]))
    with pytest.raises(RuntimeError, match="weight must be a 1-D tensor of 3"):
        F.cross_entropy(x, tp.tensor([0, 1, 2, 0]), weight=tp.ones(4))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, tp.tensor([0, 1, 2, 0]), label_smoothing=1.5)
    with pytest.raises(ValueError, match="probability targets"):
        F.cross_entropy(x, tp.zeros(4, 2))


# --------------------------------------------------------------------------- binary losses


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction, weighted):
    r = _rng(3)
    x = r.uniform(0.02, 0.98, (4, 3)).astype(np.float32)
    t = r.random((4, 3)).astype(np.float32)
    w = r.uniform(0.5, 2, (4, 3)).astype(np.float32)
    wa, wb = (tp.tensor(w), torch.tensor(w)) if weighted else (None, None)
    compare(
        lambda x, t: F.binary_cross_entropy(x, t, wa, reduction=reduction),
        lambda x, t: TF.binary_cross_entropy(x, t, wb, reduction=reduction),
        x,
        t,
    )


def test_binary_cross_entropy_log_clamped_at_minus_100():
    x = np.array([0.0, 1.0, 0.5], np.float32)
    t = np.array([1.0, 0.0, 1.0], np.float32)
    out = F.binary_cross_entropy(tp.tensor(x), tp.tensor(t), reduction="none")
    ref = TF.binary_cross_entropy(torch.tensor(x), torch.tensor(t), reduction="none")
    np.testing.assert_allclose(out.numpy(), ref.numpy(), RTOL, ATOL)
    np.testing.assert_allclose(out.numpy()[:2], [100.0, 100.0])


def test_binary_cross_entropy_errors():
    with pytest.raises(ValueError, match=r"binary_cross_entropy\(\).*\(3,\).*\(3, 1\)"):
        F.binary_cross_entropy(tp.full((3, 1), 0.5), tp.zeros(3))
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(tp.tensor([1.5]), tp.tensor([1.0]))


@pytest.mark.parametrize("pos_weight", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy_with_logits(reduction, weighted, pos_weight):
    r = _rng(4)
    x = (r.standard_normal((4, 3)) * 4).astype(np.float32)
    x[0, 0], x[0, 1] = 60.0, -60.0  # the stable form must not overflow
    t = r.random((4, 3)).astype(np.float32)
    w = r.uniform(0.5, 2, (4, 3)).astype(np.float32)
    pw = r.uniform(0.5, 3, 3).astype(np.float32)
    wa, wb = (tp.tensor(w), torch.tensor(w)) if weighted else (None, None)
    pa, pb = (tp.tensor(pw), torch.tensor(pw)) if pos_weight else (None, None)
    compare(
        lambda x, t: F.binary_cross_entropy_with_logits(
            x, t, wa, reduction=reduction, pos_weight=pa
        ),
        lambda x, t: TF.binary_cross_entropy_with_logits(
            x, t, wb, reduction=reduction, pos_weight=pb
        ),
        x,
        t,
    )


# --------------------------------------------------------------------------- float64


def test_float64_cross_entropy_and_layer_norm():
    r = _rng(5)
    x = r.standard_normal((3, 4))
    t = np.array([0, 3, 1])
    compare(F.cross_entropy, TF.cross_entropy, x, t, rtol=1e-12, atol=1e-12)
    compare(
        lambda x: F.layer_norm(x, 4), lambda x: TF.layer_norm(x, (4,)), x, rtol=1e-10, atol=1e-12
    )


# --------------------------------------------------------------------------- init


@pytest.mark.parametrize(
    ("nl", "param"),
    [
        ("linear", None),
        ("conv2d", None),
        ("sigmoid", None),
        ("tanh", None),
        ("relu", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("leaky_relu", math.sqrt(5)),
        ("selu", None),
    ],
)
def test_calculate_gain(nl, param):
    assert init.calculate_gain(nl, param) == pytest.approx(torch.nn.init.calculate_gain(nl, param))


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity swish"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", "x")


@pytest.mark.parametrize("shape", [(3, 4), (8, 3, 5), (6, 2, 3, 3)])
def test_fan_in_fan_out(shape):
    assert init._calculate_fan_in_and_fan_out(tp.empty(*shape)) == (
        torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))
    )


def test_fan_needs_two_dims():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(tp.empty(5))


def test_fill_inits():
    t = tp.empty(3, 4, requires_grad=True)
    assert init.constant_(t, 0.5) is t
    np.testing.assert_array_equal(t.detach().numpy(), 0.5)
    init.zeros_(t)
    np.testing.assert_array_equal(t.detach().numpy(), 0.0)
    init.ones_(t)
    np.testing.assert_array_equal(t.detach().numpy(), 1.0)
    assert t.requires_grad and t.grad_fn is None


def test_uniform_normal_stats():
    t = tp.empty(200, 200, requires_grad=True)
    init.uniform_(t, -2.0, 3.0)
    v = t.detach().numpy()
    assert v.min() >= -2.0 and v.max() <= 3.0 and abs(v.mean() - 0.5) < 0.05
    init.normal_(t, 1.0, 2.0)
    v = t.detach().numpy()
    assert abs(v.mean() - 1.0) < 0.05 and abs(v.std() - 2.0) < 0.05


def test_init_generator_reproducible():
    g = tp.Generator()
    g.manual_seed(7)
    a = init.kaiming_uniform_(tp.empty(4, 5), generator=g).numpy()
    g.manual_seed(7)
    b = init.kaiming_uniform_(tp.empty(4, 5), generator=g).numpy()
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
def test_kaiming_and_xavier_stats(mode):
    shape = (300, 200)
    fan = 200 if mode == "fan_in" else 300
    t = tp.empty(*shape)
    bound = math.sqrt(2.0) * math.sqrt(3.0 / fan)
    v = init.kaiming_uniform_(t, mode=mode, nonlinearity="relu").numpy()
    assert np.abs(v).max() <= bound and np.abs(v).max() > 0.95 * bound
    v = init.kaiming_normal_(t, mode=mode, nonlinearity="relu").numpy()
    assert abs(v.std() - math.sqrt(2.0 / fan)) < 0.03 * math.sqrt(2.0 / fan)
    a = math.sqrt(6.0 / 500)
    v = init.xavier_uniform_(t).numpy()
    assert np.abs(v).max() <= a and np.abs(v).max() > 0.95 * a
    v = init.xavier_normal_(t, gain=2.0).numpy()
    assert abs(v.std() - 2 * math.sqrt(2.0 / 500)) < 0.03 * 2 * math.sqrt(2.0 / 500)


def test_kaiming_errors_and_zero_element():
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(tp.empty(3, 3), mode="fan_avg")
    with pytest.warns(UserWarning, match="no-op"):
        init.kaiming_normal_(tp.empty(0, 3))


def test_trunc_normal():
    t = init.trunc_normal_(tp.empty(100, 100), mean=0.5, std=1.0, a=-1.0, b=1.0)
    v = t.numpy()
    assert v.min() >= -1.0 and v.max() <= 1.0 and v.std() > 0.4


def test_dropout_inplace_keeps_grad():
    tp.manual_seed(1)
    x = tp.ones(30, 30, requires_grad=True)
    y = x * 1
    out = F.dropout(y, 0.5, inplace=True)
    assert out is y
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.detach().numpy(), rtol=1e-6)
    assert set(np.unique(y.detach().numpy())) <= {0.0, 2.0}
