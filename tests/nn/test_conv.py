"""Convolution and pooling layers of ``tensorplay.nn`` against torch: weights loaded from
the torch layer's state_dict, forward values and gradients compared; torch's default
initialisation, ``repr``, argument errors, errors that name the layer, and a small CNN
trained three SGD steps alongside torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.nn import functional as FC
from tensorplay.nn.modules.activation import ReLU
from tensorplay.nn.modules.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from tensorplay.nn.modules.flatten import Flatten
from tensorplay.nn.modules.linear import Linear
from tensorplay.nn.modules.loss import CrossEntropyLoss
from tensorplay.nn.modules.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d

torch = pytest.importorskip("torch")
tnn = torch.nn

RTOL, ATOL = 1e-5, 1e-5

# torch's note that an uneven padding="same" copies the input
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same':UserWarning")


def _np(t):
    return t.detach().numpy()


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def load_from(tp_layer, torch_layer):
    """torch's parameters into the tensorplay layer, through state_dict."""
    state = {k: tp.tensor(_np(v)) for k, v in torch_layer.state_dict().items()}
    tp_layer.load_state_dict(state)


def compare(tp_layer, torch_layer, x, **forward_kw):
    """Same input through both layers (torch's weights loaded); a random cotangent
    backpropagated; outputs, input gradients and parameter gradients compared."""
    load_from(tp_layer, torch_layer)
    a, b = tp.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out_a, out_b = tp_layer(a, **forward_kw), torch_layer(b, **forward_kw)
    if isinstance(out_b, tuple):  # (values, indices)
        np.testing.assert_array_equal(_np(out_a[1]), out_b[1].numpy())
        out_a, out_b = out_a[0], out_b[0]
    assert tuple(out_a.shape) == tuple(out_b.shape)
    np.testing.assert_allclose(_np(out_a), _np(out_b), RTOL, ATOL)
    seed = np.random.default_rng(9).standard_normal(tuple(out_b.shape)).astype(np.float32)
    (out_a * tp.tensor(seed)).sum().backward()
    (out_b * torch.tensor(seed)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), RTOL, ATOL)
    ours = dict(tp_layer.named_parameters())
    theirs = dict(torch_layer.named_parameters())
    assert ours.keys() == theirs.keys()
    for name, p in theirs.items():
        np.testing.assert_allclose(ours[name].grad.numpy(), p.grad.numpy(), RTOL, ATOL)


# --------------------------------------------------------------------------- conv layers

CONV2D = [
    ((3, 8, 3), {}, (2, 3, 9, 9)),
    ((3, 8, (3, 2)), {"stride": 2, "padding": 1}, (2, 3, 9, 8)),
    ((4, 6, 3), {"groups": 2, "dilation": 2, "padding": (2, 1), "bias": False}, (2, 4, 9, 9)),
    ((3, 4, 4), {"padding": "same"}, (2, 3, 7, 7)),
    ((3, 4, 3), {"padding": "valid", "stride": (1, 2)}, (3, 8, 8)),  # unbatched
    ((4, 4, 3), {"groups": 4, "padding": 1}, (1, 4, 6, 6)),  # depthwise
]


@pytest.mark.parametrize("args, kw, xs", CONV2D, ids=[str(c[1]) for c in CONV2D])
def test_conv2d_matches_torch(args, kw, xs):
    compare(Conv2d(*args, **kw), tnn.Conv2d(*args, **kw), _x(*xs))


CONV1D = [
    ((3, 5, 3), {}, (2, 3, 10)),
    ((4, 6, 2), {"stride": 2, "padding": 1, "groups": 2}, (2, 4, 9)),
    ((3, 4, 4), {"padding": "same", "dilation": 2, "bias": False}, (3, 10)),
]


@pytest.mark.parametrize("args, kw, xs", CONV1D, ids=[str(c[1]) for c in CONV1D])
def test_conv1d_matches_torch(args, kw, xs):
    compare(Conv1d(*args, **kw), tnn.Conv1d(*args, **kw), _x(*xs))


CONV_T2D = [
    ((3, 5, 3), {}, (2, 3, 4, 4)),
    ((4, 6, 3), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}, (2, 4, 4, 5)),
    ((3, 2, (2, 3)), {"dilation": (2, 1), "bias": False}, (3, 4, 4)),  # unbatched
]


@pytest.mark.parametrize("args, kw, xs", CONV_T2D, ids=[str(c[1]) for c in CONV_T2D])
def test_conv_transpose2d_matches_torch(args, kw, xs):
    compare(ConvTranspose2d(*args, **kw), tnn.ConvTranspose2d(*args, **kw), _x(*xs))


def test_conv_transpose_output_size_matches_torch():
    args, kw = (3, 2, 3), {"stride": 3, "padding": 1}
    for size in ([10, 11], [2, 2, 12, 10]):
        compare(
            ConvTranspose2d(*args, **kw),
            tnn.ConvTranspose2d(*args, **kw),
            _x(2, 3, 4, 4),
            output_size=size,
        )
    compare(
        ConvTranspose1d(3, 4, 2, stride=2),
        tnn.ConvTranspose1d(3, 4, 2, stride=2),
        _x(2, 3, 5),
        output_size=[11],
    )
    with pytest.raises(ValueError, match=r"requested an output size of \[14, 10\], but valid"):
        ConvTranspose2d(*args, **kw)(tp.zeros(2, 3, 4, 4), output_size=[14, 10])


def test_conv_transpose1d_matches_torch():
    kw = {"stride": 2, "output_padding": 1, "dilation": 2}
    compare(ConvTranspose1d(4, 3, 3, **kw), tnn.ConvTranspose1d(4, 3, 3, **kw), _x(2, 4, 6))


def test_functional_forms_match_torch():
    F = torch.nn.functional
    x, w, b = _x(2, 4, 7, 7), _x(6, 2, 3, 3, seed=1), _x(6, seed=2)
    X, W, B = tp.tensor(x), tp.tensor(w), tp.tensor(b)
    tx, tw, tb = torch.tensor(x), torch.tensor(w), torch.tensor(b)
    pairs = [
        (FC.conv2d(X, W, B, 2, 1, 1, 2), F.conv2d(tx, tw, tb, 2, 1, 1, 2)),
        (
            FC.conv1d(X[:, :2, 0], W[..., 0], B, 1, "same"),
            F.conv1d(tx[:, :2, 0], tw[..., 0], tb, 1, "same"),
        ),
        (
            FC.conv_transpose2d(X, W[:4], None, 2, 1, 1, 1),
            F.conv_transpose2d(tx, tw[:4], None, 2, 1, 1, 1),
        ),
        (
            FC.conv_transpose1d(X[:, :, 0], W[:4, :, 0], None, 1, 0, 0, 2),
            F.conv_transpose1d(tx[:, :, 0], tw[:4, :, 0], None, 1, 0, 0, 2),
        ),
        (FC.max_pool2d(X, 3, 2, 1, 1, True), F.max_pool2d(tx, 3, 2, 1, 1, True)),
        (FC.avg_pool2d(X, 3, 2, 1, True, False), F.avg_pool2d(tx, 3, 2, 1, True, False)),
        (FC.adaptive_avg_pool2d(X, (3, 2)), F.adaptive_avg_pool2d(tx, (3, 2))),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(_np(ours), theirs.numpy(), RTOL, ATOL)
    values, indices = FC.max_pool2d(X, 2, return_indices=True)
    t_values, t_indices = F.max_pool2d(tx, 2, return_indices=True)
    np.testing.assert_array_equal(_np(indices), t_indices.numpy())
    np.testing.assert_allclose(_np(values), t_values.numpy())


# --------------------------------------------------------------------------- pooling layers

POOLS = [
    (MaxPool2d, tnn.MaxPool2d, (2,), {}),
    (MaxPool2d, tnn.MaxPool2d, (3,), {"stride": 2, "padding": 1, "ceil_mode": True}),
    (MaxPool2d, tnn.MaxPool2d, ((2, 3),), {"dilation": 2, "return_indices": True}),
    (AvgPool2d, tnn.AvgPool2d, (2,), {}),
    (AvgPool2d, tnn.AvgPool2d, (3, 2, 1), {"ceil_mode": True, "count_include_pad": False}),
    (AvgPool2d, tnn.AvgPool2d, ((2, 3),), {"stride": 1, "divisor_override": 4}),
    (AdaptiveAvgPool2d, tnn.AdaptiveAvgPool2d, ((3, None),), {}),
    (AdaptiveAvgPool2d, tnn.AdaptiveAvgPool2d, (1,), {}),
]


@pytest.mark.parametrize(
    "ours, theirs, args, kw", POOLS, ids=[f"{p[0].__name__}{p[3]}" for p in POOLS]
)
def test_pooling_layers_match_torch(ours, theirs, args, kw):
    a, b = ours(*args, **kw), theirs(*args, **kw)
    assert repr(a) == repr(b)
    compare(a, b, _x(2, 3, 9, 8))
    compare(a, b, _x(3, 7, 9))  # unbatched


# --------------------------------------------------------------------------- init and repr


@pytest.mark.parametrize(
    "layer, fan_in",
    [
        (lambda: Conv2d(16, 32, 5), 16 * 25),
        (lambda: Conv2d(16, 32, (3, 5), groups=4), 4 * 15),
        (lambda: Conv1d(20, 30, 7), 20 * 7),
        # torch reads fan_in from the weight's second dim: out_channels/groups here
        (lambda: ConvTranspose2d(16, 40, 4, groups=2), 20 * 16),
    ],
)
def test_default_init_is_torchs(layer, fan_in):
    tp.manual_seed(0)
    m = layer()
    bound = 1 / math.sqrt(fan_in)
    w, b = _np(m.weight), _np(m.bias)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.97 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.5 * bound
    # uniform on [-bound, bound]: std bound / sqrt(3)
    assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound


def test_parameters_and_repr_are_torchs():
    cases = [
        (Conv2d, tnn.Conv2d, (3, 8, 3), {}),
        (
            Conv2d,
            tnn.Conv2d,
            (4, 8, (3, 2)),
            {"stride": 2, "padding": 1, "dilation": 2, "groups": 2, "bias": False},
        ),
        (Conv2d, tnn.Conv2d, (3, 6, 4), {"padding": "same"}),
        (Conv1d, tnn.Conv1d, (4, 8, 3), {"stride": 2, "padding": 1, "groups": 4}),
        (Conv1d, tnn.Conv1d, (3, 6, 4), {"padding": "valid", "bias": False}),
    ]
    cases.append(
        (
            ConvTranspose2d,
            tnn.ConvTranspose2d,
            (4, 6, 3),
            {"stride": 2, "output_padding": 1, "groups": 2},
        )
    )
    cases.append((ConvTranspose1d, tnn.ConvTranspose1d, (3, 6, 2), {"dilation": 2}))
    for ours, theirs, args, kw in cases:
        a, b = ours(*args, **kw), theirs(*args, **kw)
        assert repr(a) == repr(b)
        assert [(n, tuple(p.shape)) for n, p in a.named_parameters()] == [
            (n, tuple(p.shape)) for n, p in b.named_parameters()
        ]
        assert (a.kernel_size, a.stride, a.padding, a.dilation, a.output_padding) == (
            b.kernel_size,
            b.stride,
            b.padding,
            b.dilation,
            b.output_padding,
        )
        assert (a.groups, a.transposed, a.padding_mode) == (b.groups, b.transposed, b.padding_mode)
    assert Conv2d(3, 4, 3, dtype=tp.float64).weight.dtype is tp.float64


# --------------------------------------------------------------------------- errors


def test_constructor_errors():
    with pytest.raises(ValueError, match="groups must be a positive integer"):
        Conv2d(4, 4, 3, groups=0)
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        Conv2d(4, 3, 3, groups=2)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        Conv2d(4, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="Invalid padding string 'full'"):
        Conv1d(4, 4, 3, padding="full")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        Conv2d(4, 4, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match='Only "zeros" padding mode is supported'):
        ConvTranspose2d(4, 4, 3, padding_mode="reflect")
    for mode in ("reflect", "replicate", "circular"):
        with pytest.raises(NotImplementedError, match=rf"padding_mode='{mode}'.*'zeros'"):
            Conv2d(4, 4, 3, padding_mode=mode)


def test_layer_shape_errors_name_the_layer_and_both_shapes():
    layer = Conv2d(3, 8, 3)
    with pytest.raises(
        RuntimeError,
        match=r"^Conv2d\(3, 8, kernel_size=\(3, 3\), stride=\(1, 1\)\): input has 4 channels at "
        r"dimension 1, expected in_channels=3 \(input shape \(2, 4, 9, 9\), weight shape "
        r"\(8, 3, 3, 3\)\)$",
    ):
        layer(tp.zeros(2, 4, 9, 9))
    with pytest.raises(RuntimeError, match=r"^Conv2d\(.*\): expected a 3-D \(unbatched\) or 4-D"):
        layer(tp.zeros(3, 9))
    with pytest.raises(
        RuntimeError,
        match=r"^Conv2d\(.*\): Calculated padded input size per channel: \(2 x 2\)\. Kernel "
        r"size: \(3 x 3\)\. .*\(input shape \(1, 3, 2, 2\), weight shape \(8, 3, 3, 3\)\)$",
    ):
        layer(tp.zeros(1, 3, 2, 2))
    with pytest.raises(RuntimeError, match=r"^ConvTranspose1d\(.*\): input has 2 channels"):
        ConvTranspose1d(3, 2, 2)(tp.zeros(1, 2, 5))
    with pytest.raises(
        RuntimeError,
        match=r"^MaxPool2d\(kernel_size=4, .*\): Given input size: \(3x2x2\)\. .*too small "
        r"\(input shape \(3, 2, 2\)\)$",
    ):
        MaxPool2d(4)(tp.zeros(3, 2, 2))
    with pytest.raises(RuntimeError, match=r"^AvgPool2d\(.*\): expected a 3-D \(C, H, W\)"):
        AvgPool2d(2)(tp.zeros(4, 4))


# --------------------------------------------------------------------------- a small CNN


def test_small_cnn_trains_like_torch():
    """conv -> relu -> maxpool -> conv -> adaptive avg pool -> flatten -> linear, cross
    entropy, three SGD steps: the same losses, gradients and parameters as torch."""
    torch.manual_seed(0)
    t_layers = [
        tnn.Conv2d(3, 8, 3, padding=1),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Conv2d(8, 6, 3, stride=2, groups=2),
        tnn.AdaptiveAvgPool2d(1),
        tnn.Flatten(),
        tnn.Linear(6, 4),
    ]
    o_layers = [
        Conv2d(3, 8, 3, padding=1),
        ReLU(),
        MaxPool2d(2),
        Conv2d(8, 6, 3, stride=2, groups=2),
        AdaptiveAvgPool2d(1),
        Flatten(),
        Linear(6, 4),
    ]
    for o, t in zip(o_layers, t_layers):
        load_from(o, t)
    x, y = _x(5, 3, 12, 12), np.random.default_rng(0).integers(0, 4, 5)
    ours_loss, theirs_loss = CrossEntropyLoss(), tnn.CrossEntropyLoss()
    for _ in range(3):
        a, b = tp.tensor(x), torch.tensor(x)
        for o, t in zip(o_layers, t_layers):
            a, b = o(a), t(b)
        la, lb = ours_loss(a, tp.tensor(y)), theirs_loss(b, torch.tensor(y))
        np.testing.assert_allclose(_np(la), _np(lb), 1e-5, 1e-6)
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
    for o, t in zip(o_layers, t_layers):
        for (name, p), q in zip(o.named_parameters(), t.parameters()):
            np.testing.assert_allclose(_np(p), q.detach().numpy(), 1e-5, 1e-6, err_msg=name)
