"""Autograd misuse is refused, as torch refuses it: writes into leaves that require grad,
``set_`` under a saved tensor, hooks that change a gradient's kind, gradients of the
wrong dtype or device passed to ``backward``. And the in-place writes that torch does
differentiate (``copy_``, ``fill_``, ``zero_``, random fills) are recorded."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

LEAF = "a leaf Variable that requires grad is being used in an in-place operation."
WRITES = {
    "add_": lambda t: t.add_(1.0),
    "zero_": lambda t: t.zero_(),
    "fill_": lambda t: t.fill_(2.0),
    "fill_ tensor": lambda t: t.fill_(tp.tensor(2.0)),
    "copy_": lambda t: t.copy_(tp.ones(3)),
    "uniform_": lambda t: t.uniform_(),
    "normal_": lambda t: t.normal_(),
    "setitem": lambda t: t.__setitem__(0, 1.0),
}


def _leaf():
    return tp.tensor([1.0, 2.0, 3.0], requires_grad=True)


@pytest.mark.parametrize("name", WRITES)
def test_inplace_write_into_leaf_requiring_grad_is_refused(name):
    x = _leaf()
    with pytest.raises(RuntimeError, match=LEAF):
        WRITES[name](x)
    assert x.tolist() == [1.0, 2.0, 3.0]  # refused before anything was written
    assert x._version == 0


@pytest.mark.parametrize("name", WRITES)
def test_inplace_write_into_leaf_is_allowed_under_no_grad(name):
    x = _leaf()
    with tp.no_grad():
        WRITES[name](x)
    assert x.is_leaf and x.requires_grad
    assert x._version >= 1


@pytest.mark.parametrize("name", ["zero_", "fill_", "copy_", "uniform_"])
def test_inplace_write_into_view_of_leaf_is_refused(name):
    x = tp.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of " + LEAF):
        WRITES[name](x[1:])
    assert x.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_writing_into_a_detached_leaf_is_allowed():
    x = _leaf()
    x.detach().zero_()
    assert x.tolist() == [0.0, 0.0, 0.0]


def test_out_into_a_tensor_requiring_grad_is_refused_as_torch():
    torch = pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    msg = (
        "functions with out=... arguments don't support automatic differentiation, "
        "but one of the arguments requires grad."
    )
    with pytest.raises(RuntimeError, match=msg):
        torch.add(torch.ones(3), 1, out=torch.zeros(3, requires_grad=True))
    out = tp.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=msg):
        tp.add(tp.ones(3), 1, out=out)
    assert out.tolist() == [0.0, 0.0, 0.0]
    with tp.no_grad():
        tp.add(tp.ones(3), 1, out=out)
    assert out.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize(
    "write,expected_x,expected_src",
    [
        (lambda y, s: y.zero_(), [0.0, 0.0, 0.0], None),
        (lambda y, s: y.fill_(s.sum()), [0.0, 0.0, 0.0], [3.0, 3.0]),
        (lambda y, s: y.copy_(s[:1] * 3), [0.0, 0.0, 0.0], [9.0, 0.0]),
        (lambda y, s: y[1:].copy_(s), [2.0, 0.0, 0.0], [1.0, 1.0]),
        (lambda y, s: y.uniform_(), [0.0, 0.0, 0.0], None),
    ],
    ids=["zero_", "fill_ tensor", "copy_ broadcast", "copy_ into view", "uniform_"],
)
def test_overwrite_of_non_leaf_sends_gradient_to_source_only(write, expected_x, expected_src):
    # torch: the old value's gradient is zero (ZeroBackward0, CopyBackwards, CopySlices...)
    torch = pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    results = []
    for lib in (tp, torch):
        x = lib.ones(3, requires_grad=True)
        src = lib.ones(2, requires_grad=True)
        y = x * 2
        write(y, src)
        y.sum().backward()
        results.append((x.grad.tolist(), None if src.grad is None else src.grad.tolist()))
    assert results[0] == results[1] == (expected_x, expected_src)


def test_copy_of_a_tensor_requiring_grad_into_a_plain_tensor_records_it():
    src = tp.tensor([1.0, 2.0], requires_grad=True)
    y = tp.zeros(2, dtype=tp.float64)
    y.copy_(src)
    assert y.requires_grad and y.grad_fn.name() == "CopyBackward0"
    (y * y).sum().backward()
    assert src.grad.dtype is tp.float32
    assert src.grad.tolist() == [2.0, 4.0]


def test_copy_into_an_integer_tensor_carries_no_gradient():
    y = tp.zeros(2, dtype=tp.int64)
    y.copy_(tp.tensor([1.5, 2.5], requires_grad=True))
    assert y.tolist() == [1, 2]
    assert not y.requires_grad


@pytest.mark.parametrize("replacement", ["storage", "tensor", "empty"])
def test_set_on_a_saved_tensor_fails_at_backward(replacement):
    torch = pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    for lib in (torch, tp):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.ones(3)
        y = (x * w).sum()  # saves w for x's gradient
        if replacement == "storage":
            w.set_(lib.zeros(3).untyped_storage())
        elif replacement == "tensor":
            w.set_(lib.zeros(3))
        else:
            w.set_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_set_on_the_base_of_a_saved_view_fails_at_backward():
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = tp.ones(3)
    y = (x[:2] * w[:2]).sum()
    w.set_(tp.zeros(3))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_set_bumps_the_version_of_the_tensor():
    w = tp.ones(3)
    w.set_(tp.zeros(3))
    assert w._version == 1


def _hooked(on_leaf: bool, hook):
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    if on_leaf:
        x.register_hook(hook)
        return x, x * 2
    h = x * 2
    h.register_hook(hook)
    return x, h * 1


@pytest.mark.parametrize("on_leaf", [True, False], ids=["leaf", "non-leaf"])
@pytest.mark.parametrize(
    "hook,message",
    [
        (lambda g: g[:2], "has changed the size of value"),
        (lambda g: tp.ones(1), "has changed the size of value"),
        (lambda g: g.to(tp.float64), "has changed the type of value"),
    ],
    ids=["shorter", "broadcastable", "float64"],
)
def test_hook_changing_the_gradient_kind_is_refused(on_leaf, hook, message):
    x, out = _hooked(on_leaf, hook)
    with pytest.raises(RuntimeError, match=f"hook '<lambda>' {message}"):
        out.sum().backward()
    assert x.grad is None


def test_hook_returning_a_non_tensor_is_a_type_error():
    def halve(g):
        return 0.5

    x, out = _hooked(True, halve)
    with pytest.raises(TypeError, match="hook 'halve' returned float"):
        out.sum().backward()


def test_hook_check_applies_to_autograd_grad():
    x, out = _hooked(True, lambda g: tp.ones(2))
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        tp.autograd.grad(out.sum(), x)


def test_hook_returning_same_kind_replaces_the_gradient():
    x, out = _hooked(False, lambda g: g * 10)
    out.sum().backward()
    assert x.grad.tolist() == [20.0, 20.0, 20.0]


@pytest.mark.parametrize("api", ["backward", "grad"])
@pytest.mark.parametrize(
    "out_dtype,grad_kw,message",
    [
        (
            "float32",
            {"dtype": "complex64"},
            "For complex Tensors, both grad_output and output are required to have the "
            "same dtype. Mismatch in dtype: grad_output\\[0\\] has a dtype of",
        ),
        (
            "complex64",
            {"dtype": "float32"},
            "For complex Tensors, both grad_output and output are required",
        ),
        ("float32", {"device": "meta"}, "invalid gradient at index 0 - expected device cpu"),
    ],
    ids=["complex grad, real output", "real grad, complex output", "meta grad"],
)
def test_gradient_of_another_kind_is_refused_as_torch(api, out_dtype, grad_kw, message):
    torch = pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    for lib in (torch, tp):
        x = lib.ones(3, dtype=getattr(lib, out_dtype), requires_grad=True)
        y = x * 2
        kw = {k: getattr(lib, v) if k == "dtype" else v for k, v in grad_kw.items()}
        g = lib.ones(3, **kw)
        with pytest.raises(RuntimeError, match=message):
            y.backward(g) if api == "backward" else lib.autograd.grad(y, x, g)
        assert x.grad is None


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "bool"])
def test_gradient_of_another_real_dtype_is_cast_to_the_output_dtype(dtype):
    torch = pytest.importorskip("torch", reason="torch is the oracle for this comparison")
    grads = []
    for lib in (torch, tp):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        (x * 2).backward(lib.ones(3, dtype=getattr(lib, dtype)))
        assert x.grad.dtype == lib.float32
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == [2.0, 2.0, 2.0]


def test_leaf_grad_is_writable_under_create_graph():
    # with create_graph the gradient used to be stored as is: an expanded (stride-0) tensor
    x = tp.ones(2, requires_grad=True)
    x.sum().backward(create_graph=True)
    assert x.grad.stride() == (1,)
    x.grad.add_(1)
    np.testing.assert_array_equal(x.grad.detach().numpy(), [2.0, 2.0])
