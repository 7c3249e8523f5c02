"""In-place comparisons and logical ops write their 1/0 result in self's dtype, and round
refuses decimals for integers, as in PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp

NAMES = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dt", ["float32", "int64", "bool"])
def test_inplace_comparison_keeps_self_dtype(name, dt):
    x = tp.tensor([0, 1, 2]).to(getattr(tp, dt))
    other = tp.tensor([1, 1, 0]).to(getattr(tp, dt))
    want = getattr(tp, name)(x, other).to(x.dtype)
    got = getattr(x, name + "_")(other)
    assert got is x and x.dtype.name == dt
    assert x.tolist() == want.tolist()


@pytest.mark.parametrize("name", NAMES + ["logical_not"])
def test_inplace_comparison_matches_torch(name):
    torch = pytest.importorskip("torch")
    a, b = [0.0, 1.5, -2.0, 3.0], [1.5, 1.5, 0.0, -3.0]
    args = () if name == "logical_not" else (b,)
    want = getattr(torch.tensor(a), name + "_")(*map(torch.tensor, args))
    got = getattr(tp.tensor(a), name + "_")(*map(tp.tensor, args))
    assert got.dtype is tp.float32
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_round_with_decimals_refuses_integers():
    with pytest.raises(NotImplementedError, match="decimals=1 is not supported"):
        tp.tensor([7], dtype=tp.int8).round(decimals=1)
    assert tp.tensor([7], dtype=tp.int8).round().tolist() == [7]
    assert tp.tensor([1.26]).round(decimals=1).tolist() == pytest.approx([1.3])
