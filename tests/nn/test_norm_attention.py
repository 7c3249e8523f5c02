"""Normalisation, attention, padding, ``one_hot`` and bilinear (functional and modules)
against torch: values and gradients in train and eval modes, running statistics over
several steps, masks, GQA, ``MultiheadAttention`` loaded from a torch state dict; default
initialisation, ``repr``, argument errors; dropout by its statistics (not torch's RNG)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.nn import _functional_norm as FN, functional as F
from tensorplay.nn.modules.activation_attention import MultiheadAttention
from tensorplay.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d
from tensorplay.nn.modules.linear import Bilinear
from tensorplay.nn.modules.normalization import GroupNorm, RMSNorm

try:  # the oracle: tests that compare with torch skip without it
    import torch
    import torch.nn.functional as TF
except ImportError:
    torch = TF = None
needs_torch = pytest.mark.skipif(
    torch is None,
    reason="torch (the test oracle) is not installed: pip install /opt/wheels/torch-2.13.0*.whl",
)

RTOL, ATOL = 1e-5, 1e-5


def _rng(seed=0):
    return np.random.default_rng(seed)


def _x(*shape, seed=0):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _np(t):
    return t.detach().numpy()


def _close(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(_np(a), _np(b), rtol, atol)


def compare(tp_fn, torch_fn, arrays, grad=None, rtol=RTOL, atol=ATOL):
    """Run both frameworks on the same numpy inputs (``None`` passes through); compare the
    outputs and the gradients of the inputs flagged in ``grad`` (default: every float)."""
    if grad is None:
        grad = [a is not None and np.issubdtype(a.dtype, np.floating) for a in arrays]
    a = [None if v is None else tp.tensor(v, requires_grad=g) for v, g in zip(arrays, grad)]
    b = [None if v is None else torch.tensor(v, requires_grad=g) for v, g in zip(arrays, grad)]
    out_a, out_b = tp_fn(*a), torch_fn(*b)
    _close(out_a, out_b, rtol, atol)
    if any(grad):
        seed = _rng(99).standard_normal(tuple(out_b.shape)).astype(np.float32)
        (out_a * tp.tensor(seed)).sum().backward()
        (out_b * torch.tensor(seed)).sum().backward()
        for x, y, g in zip(a, b, grad):
            if g:
                _close(x.grad, y.grad, rtol, atol)
    return out_a, out_b


def load_from_torch(tp_module, torch_module):
    """Load the torch module's state dict (as numpy copies) into the tensorplay module."""
    sd = {k: tp.tensor(v.detach().numpy()) for k, v in torch_module.state_dict().items()}
    assert list(sd) == list(tp_module.state_dict())
    result = tp_module.load_state_dict(sd)
    assert not result.missing_keys and not result.unexpected_keys


def compare_module(
    tp_m, torch_m, inputs, *, grad_inputs=True, shared=False, load=True, rtol=RTOL, atol=ATOL, **kw
):
    """Forward both modules on the same inputs (torch's weights loaded first); compare the
    outputs (each of a tuple), input gradients and parameter gradients. ``shared``: pass one
    tensor for every input (self-attention's ``m(x, x, x)``); ``load=False``: keep the
    tensorplay module's own state (its running statistics)."""
    if load:
        load_from_torch(tp_m, torch_m)
    a = [tp.tensor(x, requires_grad=grad_inputs and x.dtype == np.float32) for x in inputs]
    b = [torch.tensor(x, requires_grad=grad_inputs and x.dtype == np.float32) for x in inputs]
    if shared:
        a, b = a[:1] * len(inputs), b[:1] * len(inputs)
    kw_a = {k: tp.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    kw_b = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    out_a, out_b = tp_m(*a, **kw_a), torch_m(*b, **kw_b)
    outs_a = out_a if isinstance(out_a, tuple) else (out_a,)
    outs_b = out_b if isinstance(out_b, tuple) else (out_b,)
    loss_a = loss_b = 0
    for i, (x, y) in enumerate(zip(outs_a, outs_b)):
        assert (x is None) == (y is None)
        if y is None:
            continue
        _close(x, y, rtol, atol)
        seed = _rng(50 + i).standard_normal(tuple(y.shape)).astype(np.float32)
        loss_a = loss_a + (x * tp.tensor(seed)).sum()
        loss_b = loss_b + (y * torch.tensor(seed)).sum()
    loss_a.backward()
    loss_b.backward()
    for x, y in zip(a, b):
        if y.requires_grad:
            _close(x.grad, y.grad, rtol, atol)
    tp_params = dict(tp_m.named_parameters())
    for name, p in torch_m.named_parameters():
        assert name in tp_params
        if p.grad is None:
            assert tp_params[name].grad is None or not np.any(tp_params[name].grad.numpy())
        else:
            _close(tp_params[name].grad, p.grad, rtol, atol)
    return outs_a, outs_b


# --------------------------------------------------------------------------- batch_norm

BN_SHAPES = [(6, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 2)]


@needs_torch
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_values_and_grads(shape, training, affine):
    r = _rng(1)
    x = (r.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    rm = r.standard_normal(3).astype(np.float32)
    rv = r.uniform(0.5, 2.0, 3).astype(np.float32)
    w = r.standard_normal(3).astype(np.float32) if affine else None
    b = r.standard_normal(3).astype(np.float32) if affine else None
    stats_a = [tp.tensor(rm), tp.tensor(rv)]
    stats_b = [torch.tensor(rm), torch.tensor(rv)]
    compare(
        lambda x, w, b: FN.batch_norm(x, *stats_a, w, b, training, 0.2, 1e-3),
        lambda x, w, b: TF.batch_norm(x, *stats_b, w, b, training, 0.2, 1e-3),
        [x, w, b],
    )
    # training updated the running statistics in place (unbiased variance), eval did not
    _close(stats_a[0], stats_b[0])
    _close(stats_a[1], stats_b[1])
    if not training:
        np.testing.assert_array_equal(stats_a[0].numpy(), rm)


@needs_torch
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_running_stats_over_steps(momentum):
    rm_a, rv_a = tp.zeros(4), tp.ones(4)
    rm_b, rv_b = torch.zeros(4), torch.ones(4)
    for step in range(5):
        x = _x(8, 4, 3, seed=step) * (step + 1) + step
        FN.batch_norm(tp.tensor(x), rm_a, rv_a, training=True, momentum=momentum)
        TF.batch_norm(torch.tensor(x), rm_b, rv_b, training=True, momentum=momentum)
    _close(rm_a, rm_b)
    _close(rv_a, rv_b)
    # the update uses the unbiased variance: one step from (0, 1) by hand
    x = _x(5, 2, seed=9)
    rm, rv = tp.zeros(2), tp.ones(2)
    FN.batch_norm(tp.tensor(x), rm, rv, training=True, momentum=0.25)
    np.testing.assert_allclose(rm.numpy(), 0.25 * x.mean(0), 1e-5, 1e-6)
    np.testing.assert_allclose(rv.numpy(), 0.75 + 0.25 * x.var(0, ddof=1), 1e-5, 1e-6)


def test_batch_norm_running_stats_take_no_grad():
    x = tp.tensor(_x(4, 3), requires_grad=True)
    rm, rv = tp.zeros(3), tp.ones(3)
    FN.batch_norm(x, rm, rv, training=True).sum().backward()
    assert not rm.requires_grad and rm.grad_fn is None and rv.grad_fn is None


@needs_torch
def test_batch_norm_training_without_running_stats():
    compare(
        lambda x: FN.batch_norm(x, None, None, training=True),
        lambda x: TF.batch_norm(x, None, None, training=True),
        [_x(4, 3, 5)],
    )


def test_batch_norm_errors():
    x = tp.randn(4, 3, 5)
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 4"):
        FN.batch_norm(x, tp.zeros(4), tp.ones(4))
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 2"):
        FN.batch_norm(x, tp.zeros(3), tp.ones(3), weight=tp.ones(2))
    with pytest.raises(ValueError, match="both be None or neither"):
        FN.batch_norm(x, tp.zeros(3), None, training=True)
    with pytest.raises(RuntimeError, match="running_mean must be defined in evaluation mode"):
        FN.batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match=r"more than 1 value per channel.*\(1, 3\)"):
        FN.batch_norm(tp.randn(1, 3), None, None, training=True)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        FN.batch_norm(tp.randn(3), None, None, training=True)
    with pytest.raises(ValueError, match="eps must be positive"):
        FN.batch_norm(x, None, None, training=True, eps=0.0)


# --------------------------------------------------------------------------- group_norm


@needs_torch
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
@pytest.mark.parametrize("shape", [(4, 6), (2, 6, 5), (2, 6, 3, 4)])
def test_group_norm_values_and_grads(shape, groups, affine):
    r = _rng(2)
    x = (r.standard_normal(shape) * 3 - 1).astype(np.float32)
    w = r.standard_normal(6).astype(np.float32) if affine else None
    b = r.standard_normal(6).astype(np.float32) if affine else None
    # a one-element group normalises to exactly 0: torch's gradient there is rounding noise
    # magnified by 1/sqrt(eps)
    single = 6 // groups * math.prod(shape[2:]) == 1
    compare(
        lambda x, w, b: FN.group_norm(x, groups, w, b, 1e-4),
        lambda x, w, b: TF.group_norm(x, groups, w, b, 1e-4),
        [x, w, b],
        atol=1e-4 if single else ATOL,
    )


def test_group_norm_errors():
    with pytest.raises(RuntimeError, match="divisible by num_groups.*num_groups=4"):
        FN.group_norm(tp.randn(2, 6, 3), 4)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        FN.group_norm(tp.randn(6), 2)
    with pytest.raises(RuntimeError, match=r"weight to be a vector of size equal.*\[4\]"):
        FN.group_norm(tp.randn(2, 6, 3), 2, tp.ones(4))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        FN.group_norm(tp.randn(1, 3), 3)
    with pytest.raises(ValueError, match="num_groups must be a positive int"):
        FN.group_norm(tp.randn(2, 6), 0)


# --------------------------------------------------------------------------- rms_norm


@needs_torch
@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("nshape", [(5,), (3, 5)])
def test_rms_norm_values_and_grads(nshape, affine, eps):
    r = _rng(3)
    x = r.standard_normal((2, 3, 5)).astype(np.float32)
    w = r.standard_normal(nshape).astype(np.float32) if affine else None
    compare(
        lambda x, w: FN.rms_norm(x, nshape, w, eps),
        lambda x, w: TF.rms_norm(x, nshape, w, eps),
        [x, w],
    )


@needs_torch
def test_rms_norm_half_uses_float32_eps():
    # torch upcasts half inputs and takes float32's epsilon when eps is None
    x = np.full((2, 4), 1e-3, np.float16)
    out = FN.rms_norm(tp.tensor(x), 4)
    assert out.dtype == tp.float16
    np.testing.assert_allclose(
        out.numpy().astype(np.float32), TF.rms_norm(torch.tensor(x), (4,)).numpy(), 1e-3
    )
    np.testing.assert_allclose(out.numpy().astype(np.float32), 0.9453, 1e-3)


def test_rms_norm_errors():
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[4\].*\[2, 5\]"):
        FN.rms_norm(tp.randn(2, 5), 4)
    with pytest.raises(RuntimeError, match="weight to be of same shape as normalized_shape"):
        FN.rms_norm(tp.randn(2, 5), 5, tp.ones(4))


# --------------------------------------------------------------------------- scaled dot product


def _sdpa_pair(**kw):
    return (
        lambda q, k, v: FN.scaled_dot_product_attention(q, k, v, **kw),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, **kw),
    )


def _bool_mask(shape, seed=4):
    m = _rng(seed).uniform(size=shape) > 0.3
    m[..., 0] = True  # every query attends at least one key
    return m


SDPA_CASES = {
    "plain": ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5), {}),
    "unbatched": ((4, 8), (6, 8), (6, 8), {}),
    "causal_square": ((2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8), {"is_causal": True}),
    "causal_rect": ((2, 2, 4, 8), (2, 2, 6, 8), (2, 2, 6, 8), {"is_causal": True}),
    "scale": ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8), {"scale": 0.7}),
    "gqa": ((2, 6, 4, 8), (2, 2, 6, 8), (2, 2, 6, 8), {"enable_gqa": True}),
    "gqa_causal": (
        (1, 4, 5, 8),
        (1, 1, 5, 8),
        (1, 1, 5, 8),
        {"enable_gqa": True, "is_causal": True},
    ),
}


@needs_torch
@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_matches_torch(case):
    qs, ks, vs, kw = SDPA_CASES[case]
    compare(*_sdpa_pair(**kw), [_x(*qs, seed=1), _x(*ks, seed=2), _x(*vs, seed=3)])


@needs_torch
@pytest.mark.parametrize("mask_shape", [(4, 6), (2, 1, 4, 6), (2, 3, 4, 6)])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masks(kind, mask_shape):
    if kind == "bool":
        mask = _bool_mask(mask_shape)
    else:
        mask = _x(*mask_shape, seed=5)
    q, k, v = _x(2, 3, 4, 8, seed=1), _x(2, 3, 6, 8, seed=2), _x(2, 3, 6, 8, seed=3)
    compare(
        lambda q, k, v: FN.scaled_dot_product_attention(q, k, v, tp.tensor(mask)),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, torch.tensor(mask)),
        [q, k, v],
    )


@needs_torch
def test_sdpa_float_mask_gets_grad():
    mask = _x(4, 6, seed=5)
    compare(
        FN.scaled_dot_product_attention,
        TF.scaled_dot_product_attention,
        [_x(1, 4, 8, seed=1), _x(1, 6, 8, seed=2), _x(1, 6, 8, seed=3), mask],
    )


@needs_torch
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_fully_masked_row_is_zero(kind):
    # torch's safe softmax: a query that may attend nothing gives zeros, with zero gradient
    mask = np.ones((4, 6), bool)
    mask[1] = False
    if kind == "float":
        mask = np.where(mask, 0.0, -np.inf).astype(np.float32)
    out, _ = compare(
        lambda q, k, v: FN.scaled_dot_product_attention(q, k, v, tp.tensor(mask)),
        lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, torch.tensor(mask)),
        [_x(2, 4, 8, seed=1), _x(2, 6, 8, seed=2), _x(2, 6, 8, seed=3)],
    )
    np.testing.assert_array_equal(out.detach().numpy()[:, 1], 0.0)


def test_sdpa_errors():
    q = tp.randn(2, 4, 3, 8)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal"):
        FN.scaled_dot_product_attention(q, q, q, tp.ones(3, 3, dtype=tp.bool), is_causal=True)
    with pytest.raises(RuntimeError, match="same dtype"):
        FN.scaled_dot_product_attention(q, q.double(), q)
    with pytest.raises(RuntimeError, match="attn_mask dtype to be bool or to match query"):
        FN.scaled_dot_product_attention(q, q, q, tp.ones(3, 3, dtype=tp.int64))
    with pytest.raises(RuntimeError, match="Number of heads in key and value must divide"):
        k = tp.randn(2, 3, 5, 8)
        FN.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        FN.scaled_dot_product_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(RuntimeError, match="at least 2 dimensional"):
        v = tp.randn(8)
        FN.scaled_dot_product_attention(v, v, v)
    with pytest.raises(RuntimeError, match="key's last dimension"):
        FN.scaled_dot_product_attention(q, q[..., :4], q)


def test_sdpa_dropout_statistics():
    # zero queries: uniform weights 1/S; identity values: the output row is the weights row,
    # so every entry is 0 (dropped) or (1/S) / (1 - p) (kept, rescaled)
    tp.manual_seed(0)
    s, p = 64, 0.3
    q = tp.zeros(8, 32, 16)
    k = tp.randn(8, s, 16)
    v = tp.eye(s).expand(8, s, s)
    tp.manual_seed(0)
    out = FN.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy()
    dropped = out == 0
    assert abs(dropped.mean() - p) < 0.02
    np.testing.assert_allclose(out[~dropped], 1 / s / (1 - p), rtol=1e-5)
    # the mask is drawn per call; the same seed draws the same one
    tp.manual_seed(0)
    again = FN.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy()
    np.testing.assert_array_equal(again, out)
    ones = FN.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy()
    np.testing.assert_array_equal(ones, 0.0)


def test_sdpa_dropout_grad_follows_the_mask():
    tp.manual_seed(1)
    s = 32
    v = tp.tensor(np.eye(s, dtype=np.float32), requires_grad=True)
    out = FN.scaled_dot_product_attention(tp.zeros(16, 8), tp.zeros(s, 8), v, dropout_p=0.5)
    out.sum().backward()
    # d out / d v[j] sums the (dropped or kept) weights of column j
    np.testing.assert_allclose(v.grad.numpy()[:, 0], out.detach().numpy().sum(0), rtol=1e-5)


# --------------------------------------------------------------------------- pad

CONST_PADS = [
    (1, 2),
    (0, 0, 2, 1),
    (1, 1, 1, 1, 1, 1),
    (-1, 2),
    (2, -3, -1, 1),
    (0, 0, 0, 0, 0, 0, 1, 1),
]


@needs_torch
@pytest.mark.parametrize("value", [0.0, -1.5])
@pytest.mark.parametrize("pads", CONST_PADS)
def test_pad_constant(pads, value):
    compare(
        lambda x: FN.pad(x, pads, value=value),
        lambda x: TF.pad(x, pads, value=value),
        [_x(2, 3, 4, 5)],
    )


@needs_torch
def test_pad_constant_int_and_default_value():
    x = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(
        FN.pad(tp.tensor(x), (1, -1, 2, 0), value=7).numpy(),
        TF.pad(torch.tensor(x), (1, -1, 2, 0), value=7).numpy(),
    )
    assert FN.pad(tp.tensor(x), (1, 1)).dtype == tp.int64
    # cropping a whole dimension leaves it empty
    assert tuple(FN.pad(tp.randn(2, 3), (-2, -1)).shape) == (2, 0)


INDEX_CASES = [
    ((2, 5), (2, 3)),
    ((2, 3, 5), (1, 2)),
    ((2, 3, 5), (-1, 2)),
    ((2, 4, 5), (1, 2, 3, 0)),
    ((2, 3, 4, 5), (2, 1, -1, 3)),
    ((2, 3, 4, 5), (1, 1, 2, 2, 2, 1)),
    ((1, 2, 3, 4, 5), (1, 2, 0, 1, 2, -1)),
]


@needs_torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("case", range(len(INDEX_CASES)))
def test_pad_index_modes(mode, case):
    shape, pads = INDEX_CASES[case]
    compare(
        lambda x: FN.pad(x, pads, mode=mode),
        lambda x: TF.pad(x, pads, mode=mode),
        [_x(*shape)],
    )


def test_pad_errors():
    x = tp.randn(1, 2, 3)
    with pytest.raises(RuntimeError, match="divisible by 2"):
        FN.pad(x, (1,))
    with pytest.raises(RuntimeError, match="padding length 8 and input of dimension 3"):
        FN.pad(x, (1,) * 8)
    with pytest.raises(NotImplementedError, match="Unrecognised padding mode foo.*'reflect'"):
        FN.pad(x, (1, 1), mode="foo")
    with pytest.raises(RuntimeError, match=r"should be less than.*padding \(3, 3\)"):
        FN.pad(x, (3, 3), mode="reflect")
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        FN.pad(x, (4, 0), mode="circular")
    with pytest.raises(RuntimeError, match="doesn't take in value"):
        FN.pad(x, (1, 1), mode="reflect", value=2.0)
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 1D"):
        FN.pad(tp.randn(3), (1, 1), mode="replicate")
    with pytest.raises(RuntimeError, match="crops 4 elements from an input of size 3"):
        FN.pad(x, (-2, -2))
    with pytest.raises(TypeError, match="sequence of ints"):
        FN.pad(x, (1.5, 1))
    with pytest.raises(RuntimeError, match="is empty"):
        FN.pad(tp.randn(1, 2, 0), (1, 1), mode="replicate")


# --------------------------------------------------------------------------- one_hot


@needs_torch
@pytest.mark.parametrize("num_classes", [-1, 5, 7])
def test_one_hot(num_classes):
    idx = np.array([[0, 4], [2, 1], [3, 3]])
    out = F.one_hot(tp.tensor(idx), num_classes)
    assert out.dtype == tp.int64
    expected = TF.one_hot(torch.tensor(idx), num_classes).numpy()
    np.testing.assert_array_equal(out.numpy(), expected)
    empty = F.one_hot(tp.zeros(0, 2, dtype=tp.int64), 3)
    assert tuple(empty.shape) == (0, 2, 3)


def test_one_hot_errors():
    with pytest.raises(RuntimeError, match="non-negative"):
        F.one_hot(tp.tensor([-1, 0]))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(tp.tensor([0, 4]), 3)
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(tp.tensor([1.0]))
    with pytest.raises(RuntimeError, match="Can not infer"):
        F.one_hot(tp.zeros(0, dtype=tp.int64))
    with pytest.raises(RuntimeError, match="num_classes should be -1"):
        F.one_hot(tp.tensor([1]), -2)


# --------------------------------------------------------------------------- bilinear


@needs_torch
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
def test_bilinear(batch, bias):
    r = _rng(6)
    arrays = [
        r.standard_normal((*batch, 3)).astype(np.float32),
        r.standard_normal((*batch, 5)).astype(np.float32),
        r.standard_normal((2, 3, 5)).astype(np.float32),
        r.standard_normal(2).astype(np.float32) if bias else None,
    ]
    compare(FN.bilinear, TF.bilinear, arrays)


def test_bilinear_errors():
    w = tp.randn(5, 3, 4)
    with pytest.raises(RuntimeError, match="input dimensions do not match: got 2 and 3"):
        FN.bilinear(tp.randn(2, 3), tp.randn(2, 1, 4), w)
    with pytest.raises(RuntimeError, match="batch dimensions do not match at dim 0: got 2 and 3"):
        FN.bilinear(tp.randn(2, 3), tp.randn(3, 4), w)
    with pytest.raises(RuntimeError, match="input1 size does not match weight size: got 2"):
        FN.bilinear(tp.randn(2, 2), tp.randn(2, 4), w)
    with pytest.raises(RuntimeError, match="input2 size does not match weight size: got 3"):
        FN.bilinear(tp.randn(2, 3), tp.randn(2, 3), w)
    with pytest.raises(RuntimeError, match="bias size does not match weight size: got 4"):
        FN.bilinear(tp.randn(2, 3), tp.randn(2, 4), w, tp.randn(4))


# --------------------------------------------------------------------------- BatchNorm modules


def _bn_pair(cls, tcls, **kw):
    return cls(3, **kw), tcls(3, **kw)


@needs_torch
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"momentum": None},
        {"momentum": 0.3, "eps": 1e-3},
        {"affine": False},
        {"track_running_stats": False},
        {"bias": False},
    ],
)
@pytest.mark.parametrize("dims", [1, 2])
def test_batchnorm_module_train_steps_then_eval(dims, kw):
    cls, tcls = (
        (BatchNorm1d, torch.nn.BatchNorm1d) if dims == 1 else (BatchNorm2d, torch.nn.BatchNorm2d)
    )
    shape = (6, 3, 5) if dims == 1 else (4, 3, 3, 2)
    m, tm = _bn_pair(cls, tcls, **kw)
    load_from_torch(m, tm)
    for step in range(4):
        # each module keeps its own running statistics across the steps
        x = _x(*shape, seed=step) * (1 + step) + 0.5 * step
        compare_module(m, tm, [x], load=False)
        m.zero_grad()
        tm.zero_grad()
    for name, buf in tm.named_buffers():
        np.testing.assert_allclose(dict(m.named_buffers())[name].numpy(), buf.numpy(), 1e-5, 1e-5)
    if tm.track_running_stats:
        assert int(m.num_batches_tracked.item()) == 4 and m.num_batches_tracked.dtype == tp.int64
    m.eval()
    tm.eval()
    compare_module(m, tm, [_x(*shape, seed=11)], load=False)


@needs_torch
def test_batchnorm1d_2d_input_and_3d():
    compare_module(BatchNorm1d(3), torch.nn.BatchNorm1d(3), [_x(5, 3)])
    compare_module(BatchNorm3d(3), torch.nn.BatchNorm3d(3), [_x(2, 3, 2, 3, 2)])


@needs_torch
def test_batchnorm_loads_torch_state_dict_and_repr():
    tm = torch.nn.BatchNorm2d(3)
    tm.train()
    for s in range(3):
        tm(torch.tensor(_x(4, 3, 2, 2, seed=s)))
    m = BatchNorm2d(3)
    load_from_torch(m, tm)
    assert int(m.num_batches_tracked.item()) == 3
    m.eval()
    tm.eval()
    x = _x(2, 3, 2, 2, seed=7)
    _close(m(tp.tensor(x)), tm(torch.tensor(x)))
    for kw in ({}, {"momentum": None, "affine": False}, {"track_running_stats": False}):
        assert repr(BatchNorm2d(3, **kw)) == repr(torch.nn.BatchNorm2d(3, **kw))
        assert repr(BatchNorm1d(7, **kw)) == repr(torch.nn.BatchNorm1d(7, **kw))
    assert list(BatchNorm1d(3).state_dict()) == list(torch.nn.BatchNorm1d(3).state_dict())


def test_batchnorm_old_state_dict_without_num_batches_tracked():
    m = BatchNorm1d(3)
    sd = {k: v for k, v in m.state_dict().items() if k != "num_batches_tracked"}
    sd["running_mean"] = tp.ones(3)
    m.load_state_dict(sd)
    np.testing.assert_array_equal(m.running_mean.numpy(), 1.0)
    assert int(m.num_batches_tracked.item()) == 0


def test_batchnorm_defaults_and_buffers():
    m = BatchNorm2d(4)
    np.testing.assert_array_equal(_np(m.weight), 1.0)
    np.testing.assert_array_equal(_np(m.bias), 0.0)
    np.testing.assert_array_equal(m.running_mean.numpy(), 0.0)
    np.testing.assert_array_equal(m.running_var.numpy(), 1.0)
    assert [n for n, _ in m.named_buffers()] == [
        "running_mean",
        "running_var",
        "num_batches_tracked",
    ]
    nostats = BatchNorm2d(4, track_running_stats=False)
    assert nostats.running_mean is None and list(nostats.named_buffers()) == []
    m.train()(tp.randn(2, 4, 3, 3) * 3 + 2)
    m.reset_running_stats()
    np.testing.assert_array_equal(m.running_var.numpy(), 1.0)
    assert int(m.num_batches_tracked.item()) == 0
    d = BatchNorm1d(3, dtype=tp.float64)
    assert d.weight.dtype == tp.float64 and d.running_mean.dtype == tp.float64
    assert d.num_batches_tracked.dtype == tp.int64


def test_batchnorm_momentum_none_is_cumulative_average():
    m = BatchNorm1d(2, momentum=None)
    xs = [_x(6, 2, seed=s) * (s + 1) + s for s in range(3)]
    for x in xs:
        m(tp.tensor(x))
    means = np.mean([x.mean(0) for x in xs], axis=0)
    varss = np.mean([x.var(0, ddof=1) for x in xs], axis=0)
    np.testing.assert_allclose(m.running_mean.numpy(), means, 1e-5, 1e-6)
    np.testing.assert_allclose(m.running_var.numpy(), varss, 1e-5, 1e-6)


def test_batchnorm_eval_without_running_stats_uses_batch():
    m = BatchNorm1d(3, track_running_stats=False, affine=False).eval()
    x = _x(8, 3, seed=3)
    expected = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    np.testing.assert_allclose(m(tp.tensor(x)).numpy(), expected, 1e-5, 1e-5)


def test_batchnorm_module_errors():
    with pytest.raises(
        RuntimeError,
        match=r"BatchNorm2d\(num_features=16\): expected input with 16 channels, got 8",
    ):
        BatchNorm2d(16)(tp.randn(2, 8, 3, 3))
    with pytest.raises(
        ValueError, match=r"BatchNorm2d\(num_features=3\): expected 4D input \(got 3D"
    ):
        BatchNorm2d(3)(tp.randn(2, 3, 3))
    with pytest.raises(ValueError, match=r"BatchNorm1d\(num_features=3\): expected 2D or 3D input"):
        BatchNorm1d(3)(tp.randn(2, 3, 3, 3))
    m = BatchNorm1d(3)
    with pytest.raises(ValueError, match=r"more than 1 value per channel.*\.eval\(\)"):
        m(tp.randn(1, 3))
    assert int(m.num_batches_tracked.item()) == 0  # the refused batch was not counted
    m.eval()(tp.randn(1, 3))  # eval normalises a single sample with the running statistics


# --------------------------------------------------------------------------- GroupNorm / RMSNorm


@needs_torch
@pytest.mark.parametrize("kw", [{}, {"affine": False}, {"eps": 1e-3, "bias": False}])
def test_groupnorm_module(kw):
    m, tm = GroupNorm(2, 6, **kw), torch.nn.GroupNorm(2, 6, **kw)
    with torch.no_grad():
        for p in tm.parameters():
            p.normal_()
    compare_module(m, tm, [_x(3, 6, 4, 2)])
    assert repr(m) == repr(tm)


def test_groupnorm_defaults_and_errors():
    m = GroupNorm(3, 6)
    np.testing.assert_array_equal(_np(m.weight), 1.0)
    np.testing.assert_array_equal(_np(m.bias), 0.0)
    assert m.extra_repr() == "3, 6, eps=1e-05, affine=True, bias=True"
    with pytest.raises(
        ValueError, match=r"num_channels \(6\) must be divisible by num_groups \(4\)"
    ):
        GroupNorm(4, 6)
    with pytest.raises(
        RuntimeError, match=r"GroupNorm\(num_groups=3, num_channels=6\): .* 6 channels .*got 5"
    ):
        m(tp.randn(2, 5, 3))


@needs_torch
@pytest.mark.parametrize("kw", [{}, {"eps": 1e-2}, {"elementwise_affine": False}])
@pytest.mark.parametrize("nshape", [5, (3, 5)])
def test_rmsnorm_module(nshape, kw):
    m, tm = RMSNorm(nshape, **kw), torch.nn.RMSNorm(nshape, **kw)
    with torch.no_grad():
        for p in tm.parameters():
            p.normal_()
    compare_module(m, tm, [_x(2, 3, 5)])
    assert repr(m) == repr(tm)


def test_rmsnorm_errors_and_defaults():
    m = RMSNorm(4)
    np.testing.assert_array_equal(_np(m.weight), 1.0)
    assert m.eps is None and [n for n, _ in m.named_parameters()] == ["weight"]
    with pytest.raises(RuntimeError, match=r"RMSNorm\(\(4,\)\): input shape \(2, 5\)"):
        m(tp.randn(2, 5))


# --------------------------------------------------------------------------- Bilinear


@needs_torch
@pytest.mark.parametrize("bias", [True, False])
def test_bilinear_module(bias):
    m, tm = Bilinear(3, 5, 4, bias=bias), torch.nn.Bilinear(3, 5, 4, bias=bias)
    compare_module(m, tm, [_x(6, 3, seed=1), _x(6, 5, seed=2)])
    assert repr(m) == repr(tm)


def test_bilinear_module_init_and_errors():
    tp.manual_seed(0)
    m = Bilinear(100, 20, 30)
    bound = 1 / math.sqrt(100)
    w, b = _np(m.weight), _np(m.bias)
    assert tuple(w.shape) == (30, 100, 20)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.98 * bound
    assert np.abs(b).max() <= bound and abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert m.extra_repr() == "in1_features=100, in2_features=20, out_features=30, bias=True"
    with pytest.raises(
        RuntimeError, match=r"Bilinear\(in1_features=100, in2_features=20\): input2"
    ):
        m(tp.randn(2, 100), tp.randn(2, 19))


# --------------------------------------------------------------------------- MultiheadAttention

MHA_CASES = {
    "default": ({}, {}),
    "batch_first": ({"batch_first": True}, {}),
    "no_weights": ({}, {"need_weights": False}),
    "per_head": ({"batch_first": True}, {"average_attn_weights": False}),
    "no_bias": ({"bias": False}, {}),
    "bias_kv_zero_attn": ({"add_bias_kv": True, "add_zero_attn": True}, {}),
    "bias_kv_no_weights": ({"add_bias_kv": True, "add_zero_attn": True}, {"need_weights": False}),
}


def _seq(batch_first, n=2, length=5, e=8, seed=0):
    return _x(n, length, e, seed=seed) if batch_first else _x(length, n, e, seed=seed)


@needs_torch
@pytest.mark.parametrize("self_attn", [True, False])
@pytest.mark.parametrize("case", list(MHA_CASES))
def test_mha_matches_torch(case, self_attn):
    ctor, call = MHA_CASES[case]
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(8, 2, **ctor)
    if ctor.get("bias", True):
        with torch.no_grad():  # torch zeroes the biases; random ones test their gradients
            tm.in_proj_bias.normal_()
            tm.out_proj.bias.normal_()
    m = MultiheadAttention(8, 2, **ctor)
    bf = ctor.get("batch_first", False)
    q = _seq(bf, length=4, seed=1)
    kv = q if self_attn else _seq(bf, length=6, seed=2)
    # self-attention passes one tensor as query, key and value (the packed projection path)
    compare_module(m, tm, [q, kv, kv], shared=self_attn, **call)


@needs_torch
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_mha_key_padding_and_attn_masks(batch_first, need_weights):
    torch.manual_seed(1)
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    m = MultiheadAttention(8, 2, batch_first=batch_first)
    q, kv = _seq(batch_first, n=3, length=4, seed=1), _seq(batch_first, n=3, length=6, seed=2)
    kpm = np.zeros((3, 6), bool)
    kpm[0, 4:] = True
    kpm[2, 0] = True
    # MHA: True = masked out; keys 1 and 2 stay open so no row is fully masked here
    attn_bool = ~_bool_mask((4, 6), seed=3)
    attn_bool[:, 1:3] = False
    attn_float = _x(4, 6, seed=4)
    attn_3d = ~_bool_mask((6, 4, 6), seed=5)
    attn_3d[..., 1:3] = False
    for kw in (
        {"key_padding_mask": kpm},
        {"attn_mask": attn_bool},
        {"attn_mask": attn_float},
        {"attn_mask": attn_3d},
        {"key_padding_mask": kpm, "attn_mask": attn_bool},
        {
            "key_padding_mask": np.where(kpm, -np.inf, 0.0).astype(np.float32),
            "attn_mask": attn_float,
        },
    ):
        m.zero_grad()
        tm.zero_grad()
        compare_module(m, tm, [q, kv, kv], need_weights=need_weights, **kw)


@needs_torch
def test_mha_fully_masked_query_matches_torch():
    # as torch: NaN on the explicit-weights path, zeros on the SDPA path
    torch.manual_seed(4)
    tm, m = torch.nn.MultiheadAttention(8, 2), MultiheadAttention(8, 2)
    load_from_torch(m, tm)
    x = _x(3, 2, 8)
    kpm = np.zeros((2, 3), bool)
    kpm[1] = True
    for nw in (True, False):
        out_a, _ = m(*[tp.tensor(x)] * 3, key_padding_mask=tp.tensor(kpm), need_weights=nw)
        out_b, _ = tm(*[torch.tensor(x)] * 3, key_padding_mask=torch.tensor(kpm), need_weights=nw)
        _close(out_a, out_b)
        assert np.isnan(_np(out_a)[:, 1]).all() == nw


@needs_torch
def test_mha_causal_hint_unbatched_and_kdim_vdim():
    torch.manual_seed(2)
    causal = np.triu(np.ones((5, 5), bool), 1)
    for need_weights in (True, False):
        tm, m = torch.nn.MultiheadAttention(8, 4), MultiheadAttention(8, 4)
        x = _x(5, 2, 8)
        compare_module(
            m, tm, [x, x, x], attn_mask=causal, is_causal=True, need_weights=need_weights
        )
    # unbatched (L, E) input with a key padding mask (S,)
    tm, m = torch.nn.MultiheadAttention(8, 2), MultiheadAttention(8, 2)
    compare_module(
        m,
        tm,
        [_x(4, 8), _x(6, 8, seed=1), _x(6, 8, seed=2)],
        key_padding_mask=np.array([False] * 5 + [True]),
    )
    # different key / value sizes: separate projection weights
    tm = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True)
    m = MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True)
    assert m.in_proj_weight is None and tuple(m.k_proj_weight.shape) == (8, 5)
    compare_module(m, tm, [_x(2, 4, 8), _x(2, 6, 5, seed=1), _x(2, 6, 3, seed=2)])


@needs_torch
def test_mha_eval_matches_torch_and_state_dict_layout():
    torch.manual_seed(3)
    tm = torch.nn.MultiheadAttention(16, 4, dropout=0.3, add_bias_kv=True).eval()
    m = MultiheadAttention(16, 4, dropout=0.3, add_bias_kv=True).eval()
    assert list(m.state_dict()) == list(tm.state_dict())
    assert [n for n, _ in m.named_parameters()] == [n for n, _ in tm.named_parameters()]
    x = _x(5, 3, 16)
    compare_module(m, tm, [x, x, x])  # eval: dropout off
    assert repr(m) == repr(tm)
    # a tensorplay state dict round-trips into torch too
    tm2 = torch.nn.MultiheadAttention(16, 4, add_bias_kv=True).eval()
    tm2.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    _close(m(tp.tensor(x), tp.tensor(x), tp.tensor(x))[0], tm2(*[torch.tensor(x)] * 3)[0])


def test_mha_default_init():
    tp.manual_seed(0)
    m = MultiheadAttention(64, 8, add_bias_kv=True)
    bound = math.sqrt(6.0 / (64 + 3 * 64))  # xavier_uniform_ on the packed (3E, E) weight
    w = _np(m.in_proj_weight)
    assert tuple(w.shape) == (192, 64)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.97 * bound
    np.testing.assert_array_equal(_np(m.in_proj_bias), 0.0)
    np.testing.assert_array_equal(_np(m.out_proj.bias), 0.0)
    out_bound = 1 / math.sqrt(64)  # out_proj keeps Linear's init
    assert np.abs(_np(m.out_proj.weight)).max() <= out_bound
    assert tuple(m.bias_k.shape) == (1, 1, 64) and np.any(_np(m.bias_k))
    sep = MultiheadAttention(8, 2, kdim=4, vdim=6)
    assert [n for n, _ in sep.named_parameters()] == [
        "q_proj_weight",
        "k_proj_weight",
        "v_proj_weight",
        "in_proj_bias",
        "out_proj.weight",
        "out_proj.bias",
    ]
    assert MultiheadAttention(8, 2, bias=False).out_proj.bias is None


def test_mha_dropout_consistency():
    # train-mode weights are the eval weights with each entry dropped (0) or scaled 1/(1-p)
    tp.manual_seed(0)
    p = 0.4
    m = MultiheadAttention(16, 2, dropout=p)
    x = tp.randn(32, 4, 16)
    with tp.no_grad():
        m.eval()
        _, w_eval = m(x, x, x, average_attn_weights=False)
        m.train()
        _, w_train = m(x, x, x, average_attn_weights=False)
    w_eval, w_train = w_eval.numpy(), w_train.numpy()
    dropped = w_train == 0
    assert abs(dropped.mean() - p) < 0.02
    np.testing.assert_allclose(w_train[~dropped], w_eval[~dropped] / (1 - p), rtol=1e-5)


def test_mha_need_weights_paths_agree():
    # the explicit-weights path and the SDPA path compute the same output
    tp.manual_seed(1)
    m = MultiheadAttention(8, 2, batch_first=True)
    q, kv = tp.randn(2, 3, 8), tp.randn(2, 5, 8)
    kpm = tp.tensor([[False] * 4 + [True], [True] + [False] * 4])
    a, _ = m(q, kv, kv, key_padding_mask=kpm, need_weights=True)
    b, none = m(q, kv, kv, key_padding_mask=kpm, need_weights=False)
    assert none is None
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), 1e-5, 1e-6)


def test_mha_errors():
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="greater than 0"):
        MultiheadAttention(0, 2)
    m = MultiheadAttention(8, 2)
    with pytest.raises(
        AssertionError, match=r"MultiheadAttention\(embed_dim=8, num_heads=2\): expected query"
    ):
        m(tp.randn(3, 2, 6), tp.randn(3, 2, 8), tp.randn(3, 2, 8))
    with pytest.raises(AssertionError, match="set kdim="):
        m(tp.randn(3, 2, 8), tp.randn(3, 2, 5), tp.randn(3, 2, 8))
    x = tp.randn(3, 2, 8)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError, match=r"2D attn_mask is \(3, 4\), but should be \(3, 3\)"):
        m(x, x, x, attn_mask=tp.zeros(3, 4))
    with pytest.raises(AssertionError, match="only bool and floating types of attn_mask"):
        m(x, x, x, attn_mask=tp.zeros(3, 3, dtype=tp.int64))
    with pytest.raises(AssertionError, match=r"key_padding_mask of shape \(2, 3\)"):
        m(x, x, x, key_padding_mask=tp.zeros(2, 4, dtype=tp.bool))
    with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask"):
        m(x, x, x, key_padding_mask=tp.zeros(2, 3, dtype=tp.bool), attn_mask=tp.zeros(3, 3))
