"""Integer and bool inputs: einsum's accumulation dtype, softmax with ``dtype=``, and the
other integer-accumulating ops, value and dtype against PyTorch (issue 13, items 7, 15)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

INT_DTYPES = ["int8", "uint8", "int16", "int32", "int64", "bool"]

# (equation, operand shapes): the sums torch's einsum performs with a per-operand sum()
EINSUM_CASES = [
    ("i->", [(300,)]),
    ("ij->i", [(2, 300)]),
    ("ii->", [(3, 3)]),
    ("ii->i", [(3, 3)]),
    ("ij->ji", [(2, 3)]),
    ("...->", [(2, 3)]),
    ("i,j->", [(2,), (3,)]),
    ("ij,k->k", [(2, 3), (4,)]),
    ("i,j->ij", [(2,), (3,)]),
    ("i,i->i", [(3,), (3,)]),
    ("ij,jk->", [(2, 3), (3, 2)]),
    ("i,i->", [(300,), (300,)]),
    ("ij,jk->ik", [(2, 300), (300, 2)]),
    ("ij,j->", [(2, 3), (3,)]),
    ("i,i,i->", [(3,), (3,), (3,)]),
]


def test_einsum_sum_of_int8_accumulates_in_int64():
    got = tp.einsum("i->", tp.ones(300, dtype=tp.int8))
    assert got.dtype is tp.int64 and got.item() == 300
    got = tp.einsum("ii", tp.ones(3, 3, dtype=tp.bool))
    assert got.dtype is tp.int64 and got.item() == 3


def test_einsum_contraction_keeps_the_operand_dtype():
    # a shared letter is contracted by bmm in the operands' dtype (and wraps, as in torch)
    got = tp.einsum("i,i->", tp.ones(300, dtype=tp.int8), tp.ones(300, dtype=tp.int8))
    assert got.dtype is tp.int8 and got.item() == np.int8(np.int64(300).astype(np.int8))


@pytest.mark.parametrize("dt", INT_DTYPES)
@pytest.mark.parametrize(("eq", "shapes"), EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_integer_dtypes_match_torch(dt, eq, shapes):
    torch = pytest.importorskip("torch")
    t_ops = [torch.ones(*s, dtype=getattr(torch, dt)) for s in shapes]
    x_ops = [tp.ones(*s, dtype=getattr(tp, dt)) for s in shapes]
    try:
        want = torch.einsum(eq, *t_ops)
    except RuntimeError as e:  # NotImplementedError included
        with pytest.raises(type(e)):
            tp.einsum(eq, *x_ops)
        return
    got = tp.einsum(eq, *x_ops)
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dt", INT_DTYPES)
@pytest.mark.parametrize(
    "fn",
    [
        lambda m, x: m.sum(x),
        lambda m, x: m.prod(x[:5] if x.dtype != m.bool else x),
        lambda m, x: m.cumsum(x, 0),
        lambda m, x: m.cumprod(x[:5], 0),
        lambda m, x: m.matmul(x.reshape(3, 100), x.reshape(100, 3)),
        lambda m, x: m.dot(x, x),
    ],
    ids=["sum", "prod", "cumsum", "cumprod", "matmul", "dot"],
)
def test_integer_accumulating_ops_match_torch(dt, fn):
    torch = pytest.importorskip("torch")
    vals = (np.arange(300) % 3).tolist()
    want_x = torch.tensor(vals).to(getattr(torch, dt))
    got_x = tp.tensor(vals).to(getattr(tp, dt))
    try:
        want = fn(torch, want_x)
    except RuntimeError as e:
        with pytest.raises(type(e)):
            fn(tp, got_x)
        return
    got = fn(tp, got_x)
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("dt", INT_DTYPES)
def test_mean_of_integers_raises_and_dtype_converts(dt):
    x = tp.ones(3, dtype=getattr(tp, dt))
    with pytest.raises(RuntimeError, match="could not infer output dtype"):
        tp.mean(x)
    assert tp.mean(x, dtype=tp.float64).item() == 1.0


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dt", INT_DTYPES)
def test_softmax_of_integers_with_float_dtype_matches_torch(name, dt):
    torch = pytest.importorskip("torch")
    vals = [0, 1, 1]
    want = getattr(torch, name)(torch.tensor(vals).to(getattr(torch, dt)), 0, dtype=torch.float32)
    got = getattr(tp, name)(tp.tensor(vals).to(getattr(tp, dt)), 0, dtype=tp.float32)
    assert got.dtype is tp.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_integers_without_float_dtype_raises(name):
    with pytest.raises(NotImplementedError, match="dtype=tp.float32"):
        getattr(tp, name)(tp.tensor([1, 2]), 0)
    with pytest.raises(NotImplementedError, match="not supported for dtype tensorplay.int64"):
        getattr(tp, name)(tp.tensor([1.0, 2.0]), 0, dtype=tp.int64)
