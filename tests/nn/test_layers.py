"""Layers and loss modules of ``tensorplay.nn`` against torch: weights copied from the
torch layer, forward and backward compared; default initialisation, ``extra_repr``,
train/eval behaviour and argument errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.nn.modules.activation import (
    GELU,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from tensorplay.nn.modules.dropout import Dropout
from tensorplay.nn.modules.flatten import Flatten
from tensorplay.nn.modules.linear import Identity, Linear
from tensorplay.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
)
from tensorplay.nn.modules.normalization import LayerNorm
from tensorplay.nn.modules.sparse import Embedding
from tensorplay.nn.parameter import Parameter

torch = pytest.importorskip("torch")
tnn = torch.nn

RTOL, ATOL = 1e-5, 1e-6


def _np(t):
    return t.detach().numpy()


def copy_params(tp_layer, torch_layer):
    """Copy every torch parameter into the same-named tensorplay parameter."""
    tp_params = dict(tp_layer.named_parameters())
    torch_params = dict(torch_layer.named_parameters())
    assert tp_params.keys() == torch_params.keys()
    with tp.no_grad():
        for name, p in torch_params.items():
            tp_params[name].copy_(tp.tensor(_np(p)))


def compare_layer(tp_layer, torch_layer, x: np.ndarray, *extra):
    """Forward the same input through both layers (weights copied), backprop a random
    cotangent, compare outputs, input gradients and parameter gradients. (The layer gets
    ``x * 1``, a non-leaf, so in-place layers work too.)"""
    copy_params(tp_layer, torch_layer)
    xg = np.issubdtype(x.dtype, np.floating)
    a = tp.tensor(x, requires_grad=xg)
    b = torch.tensor(x, requires_grad=xg)
    out_a = tp_layer(a * 1 if xg else a, *(tp.tensor(e) for e in extra))
    out_b = torch_layer(b * 1 if xg else b, *(torch.tensor(e) for e in extra))
    np.testing.assert_allclose(_np(out_a), _np(out_b), RTOL, ATOL)
    seed = np.random.default_rng(9).standard_normal(tuple(out_b.shape)).astype(np.float32)
    (out_a * tp.tensor(seed)).sum().backward()
    (out_b * torch.tensor(seed)).sum().backward()
    if xg:
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), RTOL, ATOL)
    tp_params = dict(tp_layer.named_parameters())
    for name, p in torch_layer.named_parameters():
        np.testing.assert_allclose(tp_params[name].grad.numpy(), p.grad.numpy(), RTOL, ATOL)
    return out_a


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- Linear / Identity


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(20,), (4, 20), (2, 3, 20)])
def test_linear_matches_torch(shape, bias):
    compare_layer(Linear(20, 3, bias=bias), tnn.Linear(20, 3, bias=bias), _x(*shape))


def test_linear_params_and_repr():
    layer = Linear(20, 3)
    assert isinstance(layer.weight, Parameter) and isinstance(layer.bias, Parameter)
    assert tuple(layer.weight.shape) == (3, 20) and tuple(layer.bias.shape) == (3,)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    assert layer.extra_repr() == str(tnn.Linear(20, 3).extra_repr())
    assert repr(layer) == "Linear(in_features=20, out_features=3, bias=True)"
    nobias = Linear(5, 2, bias=False)
    assert nobias.bias is None and [n for n, _ in nobias.named_parameters()] == ["weight"]
    assert nobias.extra_repr() == "in_features=5, out_features=2, bias=False"


def test_linear_default_init_bounds():
    tp.manual_seed(0)
    layer = Linear(400, 300)
    bound = 1 / math.sqrt(400)
    w, b = _np(layer.weight), _np(layer.bias)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.98 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.9 * bound
    # uniform on [-bound, bound]: std bound / sqrt(3)
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound


def test_linear_dtype_kwarg():
    layer = Linear(4, 2, dtype=tp.float64)
    assert layer.weight.dtype == tp.float64 and layer.bias.dtype == tp.float64


def test_linear_shape_error():
    with pytest.raises(
        RuntimeError, match=r"Linear\(in_features=20\): input has last dimension 19.*\(4, 19\)"
    ):
        Linear(20, 3)(tp.zeros(4, 19))


def test_identity():
    x = tp.randn(3, 4)
    assert Identity(54, unused="x")(x) is x
    assert repr(Identity()) == "Identity()"


# --------------------------------------------------------------------------- activations

ACT_PAIRS = [
    (ReLU(), tnn.ReLU()),
    (GELU(), tnn.GELU()),
    (GELU("tanh"), tnn.GELU("tanh")),
    (SiLU(), tnn.SiLU()),
    (Tanh(), tnn.Tanh()),
    (Sigmoid(), tnn.Sigmoid()),
    (Softmax(dim=1), tnn.Softmax(dim=1)),
    (Softmax(dim=-1), tnn.Softmax(dim=-1)),
    (LogSoftmax(dim=1), tnn.LogSoftmax(dim=1)),
    (LeakyReLU(), tnn.LeakyReLU()),
    (LeakyReLU(0.2, inplace=True), tnn.LeakyReLU(0.2, inplace=True)),
    (ReLU(inplace=True), tnn.ReLU(inplace=True)),
    (SiLU(inplace=True), tnn.SiLU(inplace=True)),
]


@pytest.mark.parametrize("i", range(len(ACT_PAIRS)))
def test_activation_layer(i):
    ours, theirs = ACT_PAIRS[i]
    x = _x(3, 5, 2, seed=i) * 3
    compare_layer(ours, theirs, x)
    assert ours.extra_repr() == theirs.extra_repr()
    assert repr(ours) == repr(theirs)


def test_gelu_bad_approximate():
    with pytest.raises(ValueError, match="approximate"):
        GELU("fast")


# --------------------------------------------------------------------------- Dropout


def test_dropout_train_eval():
    layer = Dropout(0.25)
    assert layer.training
    assert repr(layer) == repr(tnn.Dropout(0.25)) == "Dropout(p=0.25, inplace=False)"
    x = tp.ones(100, 100)
    tp.manual_seed(0)
    out = _np(layer(x))
    assert abs((out == 0).mean() - 0.25) < 0.02
    np.testing.assert_allclose(out[out != 0], 1 / 0.75, rtol=1e-6)
    layer.eval()
    assert layer(x) is x
    layer.train()
    assert (_np(layer(x)) == 0).any()


def test_dropout_bad_p():
    for p in (-0.5, 1.01):
        with pytest.raises(ValueError, match="between 0 and 1, but got"):
            Dropout(p)


# --------------------------------------------------------------------------- Embedding


@pytest.mark.parametrize("padding_idx", [None, 0, -2])
def test_embedding_matches_torch(padding_idx):
    idx = np.array([[0, 3, 4], [4, 8, 0]])
    ours, theirs = Embedding(10, 4, padding_idx), tnn.Embedding(10, 4, padding_idx)
    compare_layer(ours, theirs, idx)
    assert ours.extra_repr() == theirs.extra_repr()
    assert ours.padding_idx == theirs.padding_idx


def test_embedding_default_init():
    tp.manual_seed(0)
    emb = Embedding(300, 100, padding_idx=3)
    w = _np(emb.weight)
    np.testing.assert_array_equal(w[3], 0)
    rest = np.delete(w, 3, axis=0)
    assert abs(rest.mean()) < 0.02 and abs(rest.std() - 1.0) < 0.02
    assert repr(emb) == "Embedding(300, 100, padding_idx=3)"


def test_embedding_from_pretrained_and_errors():
    w = tp.tensor(_x(5, 3))
    emb = Embedding.from_pretrained(w)
    assert not emb.weight.requires_grad
    np.testing.assert_array_equal(_np(emb(tp.tensor([4]))), _np(w)[[4]])
    assert Embedding.from_pretrained(w, freeze=False).weight.requires_grad
    with pytest.raises(ValueError, match="padding_idx must be within num_embeddings"):
        Embedding(5, 3, padding_idx=5)
    with pytest.raises(IndexError, match="out of range"):
        Embedding(5, 3)(tp.tensor([5]))


# --------------------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize(
    "kwargs", [{}, {"elementwise_affine": False}, {"bias": False}, {"eps": 1e-2}]
)
@pytest.mark.parametrize("nshape", [6, (4, 6)])
def test_layernorm_matches_torch(nshape, kwargs):
    ours, theirs = LayerNorm(nshape, **kwargs), tnn.LayerNorm(nshape, **kwargs)
    # non-trivial affine parameters
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape))
    x = _x(2, 4, 6) * 3 + 1
    compare_layer(ours, theirs, x)
    assert ours.extra_repr() == theirs.extra_repr()


def test_layernorm_defaults_and_error():
    ln = LayerNorm(5)
    np.testing.assert_array_equal(_np(ln.weight), np.ones(5))
    np.testing.assert_array_equal(_np(ln.bias), np.zeros(5))
    assert repr(ln) == "LayerNorm((5,), eps=1e-05, elementwise_affine=True, bias=True)"
    with pytest.raises(RuntimeError, match=r"LayerNorm\(\(5,\)\).*\(3, 4\)"):
        ln(tp.zeros(3, 4))


# --------------------------------------------------------------------------- Flatten


@pytest.mark.parametrize("args", [(), (0,), (1, 2), (0, -2)])
def test_flatten(args):
    ours, theirs = Flatten(*args), tnn.Flatten(*args)
    out = compare_layer(ours, theirs, _x(2, 3, 4, 5))
    assert tuple(out.shape) == tuple(theirs(torch.zeros(2, 3, 4, 5)).shape)
    assert repr(ours) == repr(theirs)


# --------------------------------------------------------------------------- losses


def _loss_data(kind, seed=0):
    r = np.random.default_rng(seed)
    if kind == "regression":
        return _x(4, 3, seed=seed), _x(4, 3, seed=seed + 1)
    if kind in ("class", "class_ignore0"):
        t = r.integers(0, 5, 6)
        t[2] = -100 if kind == "class" else 0
        return _x(6, 5, seed=seed), t
    if kind == "logprob":
        x = _x(6, 5, seed=seed)
        x = x - np.log(np.exp(x).sum(1, keepdims=True))
        t = r.integers(0, 5, 6)
        t[1] = -100
        return x.astype(np.float32), t
    if kind == "prob":
        return r.uniform(0.05, 0.95, (4, 3)).astype(np.float32), r.random((4, 3)).astype(np.float32)
    if kind == "logit":
        return _x(4, 3, seed=seed) * 3, r.random((4, 3)).astype(np.float32)
    raise AssertionError(kind)


W5 = np.array([0.5, 1.0, 2.0, 1.5, 0.25], np.float32)
W43 = np.random.default_rng(1).uniform(0.5, 2, (4, 3)).astype(np.float32)
PW3 = np.array([0.5, 2.0, 3.0], np.float32)

LOSSES = [
    ("regression", MSELoss, tnn.MSELoss, {}),
    ("regression", L1Loss, tnn.L1Loss, {}),
    ("class", CrossEntropyLoss, tnn.CrossEntropyLoss, {}),
    ("class", CrossEntropyLoss, tnn.CrossEntropyLoss, {"weight": W5, "label_smoothing": 0.1}),
    ("class_ignore0", CrossEntropyLoss, tnn.CrossEntropyLoss, {"ignore_index": 0}),
    ("logprob", NLLLoss, tnn.NLLLoss, {}),
    ("logprob", NLLLoss, tnn.NLLLoss, {"weight": W5}),
    ("prob", BCELoss, tnn.BCELoss, {}),
    ("prob", BCELoss, tnn.BCELoss, {"weight": W43}),
    ("logit", BCEWithLogitsLoss, tnn.BCEWithLogitsLoss, {}),
    ("logit", BCEWithLogitsLoss, tnn.BCEWithLogitsLoss, {"weight": W43, "pos_weight": PW3}),
]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("i", range(len(LOSSES)))
def test_loss_modules(i, reduction):
    kind, ours_cls, theirs_cls, kwargs = LOSSES[i]
    conv = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}
    ours = ours_cls(reduction=reduction, **{**kwargs, **{k: tp.tensor(v) for k, v in conv.items()}})
    theirs = theirs_cls(
        reduction=reduction, **{**kwargs, **{k: torch.tensor(v) for k, v in conv.items()}}
    )
    x, t = _loss_data(kind, seed=i)
    compare_layer(ours, theirs, x, t)
    assert ours.reduction == reduction
    assert repr(ours) == repr(theirs)


def test_loss_buffers():
    ce = CrossEntropyLoss(weight=tp.tensor(W5))
    assert [n for n, _ in ce.named_buffers()] == ["weight"]
    assert list(ce.parameters()) == []
    assert CrossEntropyLoss().weight is None
    bce = BCEWithLogitsLoss(pos_weight=tp.tensor(PW3))
    assert bce.pos_weight is not None and bce.weight is None


def test_loss_bad_reduction():
    with pytest.raises(ValueError, match="'avg' is not a valid value for reduction"):
        MSELoss(reduction="avg")


def test_loss_legacy_size_average_reduce():
    with pytest.warns(UserWarning, match="deprecated"):
        assert MSELoss(size_average=False).reduction == "sum"
    with pytest.warns(UserWarning, match="deprecated"):
        assert L1Loss(reduce=False).reduction == "none"


# --------------------------------------------------------------------------- a small model


def test_tiny_mlp_trains_like_torch():
    """Linear -> GELU -> LayerNorm -> Dropout(eval) -> Linear -> CrossEntropy, two SGD
    steps, identical to torch."""
    torch.manual_seed(0)
    t_layers = [
        tnn.Linear(8, 16),
        tnn.GELU(),
        tnn.LayerNorm(16),
        tnn.Dropout(0.5),
        tnn.Linear(16, 4),
    ]
    o_layers = [Linear(8, 16), GELU(), LayerNorm(16), Dropout(0.5), Linear(16, 4)]
    for o, t in zip(o_layers, t_layers):
        copy_params(o, t)
        o.eval()
        t.eval()
    x, y = _x(10, 8), np.random.default_rng(0).integers(0, 4, 10)
    ours_loss, theirs_loss = CrossEntropyLoss(), tnn.CrossEntropyLoss()
    for _ in range(2):
        a, b = tp.tensor(x), torch.tensor(x)
        for o, t in zip(o_layers, t_layers):
            a, b = o(a), t(b)
        la, lb = ours_loss(a, tp.tensor(y)), theirs_loss(b, torch.tensor(y))
        np.testing.assert_allclose(_np(la), _np(lb), RTOL, ATOL)
        la.backward()
        lb.backward()
        with tp.no_grad(), torch.no_grad():
            for o, t in zip(o_layers, t_layers):
                for (_, p), q in zip(o.named_parameters(), t.parameters()):
                    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), 1e-4, 1e-6)
                    p.copy_(p - 0.1 * p.grad)
                    q -= 0.1 * q.grad
                    p.grad = None
                    q.grad = None
