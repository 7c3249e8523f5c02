"""gather / scatter / index_select: no wrapping of negative indices, 0-d inputs read as
1-d of size 1, and torch's shape checks (issue 13, items 4 and 5)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp


def _x(m):
    return m.arange(6.0).reshape(2, 3)


def _idx(m, v, dtype="int64"):
    return m.tensor(v, dtype=getattr(m, dtype))


CALLS = {
    "gather": lambda m, v: m.gather(_x(m), 1, _idx(m, [[v], [0]])),
    "scatter": lambda m, v: m.scatter(_x(m), 1, _idx(m, [[v], [0]]), m.ones(2, 1)),
    "scatter_value": lambda m, v: m.scatter(_x(m), 1, _idx(m, [[v], [0]]), value=9.0),
    "scatter_add": lambda m, v: m.scatter(
        _x(m), 1, _idx(m, [[v], [0]]), m.ones(2, 1), reduce="add"
    ),
    "index_select": lambda m, v: m.index_select(_x(m), 1, _idx(m, [v])),
    "index_select_int32": lambda m, v: m.index_select(_x(m), 1, _idx(m, [v], "int32")),
    "gather_0d": lambda m, v: m.gather(m.tensor(1.0), 0, _idx(m, v)),
    "scatter_0d": lambda m, v: m.scatter(m.tensor(1.0), 0, _idx(m, v), m.tensor(5.0)),
    "index_select_0d": lambda m, v: m.index_select(m.tensor(1.0), 0, _idx(m, [v])),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("v", [-1, -3, 3])
def test_out_of_range_and_negative_indices_raise(call, v):
    n = 1 if call.endswith("0d") else 3
    d = 0 if call.endswith("0d") else 1
    with pytest.raises(
        RuntimeError, match=f"index {v} is out of bounds for dimension {d} with size {n}"
    ):
        CALLS[call](tp, v)


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("v", [-1, 0, 2, 3])
@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_index_bounds_match_torch(call, v):
    torch = pytest.importorskip("torch")
    try:
        want = CALLS[call](torch, v)
    except (RuntimeError, IndexError):
        # torch's index_select raises IndexError on some layouts: TensorPlay always raises
        # RuntimeError (see docs: Differences from PyTorch)
        with pytest.raises(RuntimeError, match="out of bounds"):
            CALLS[call](tp, v)
        return
    got = CALLS[call](tp, v)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"src": 5.0}, 5.0),
        ({"value": 7.0}, 7.0),
        ({"src": 5.0, "reduce": "add"}, 6.0),
        ({"src": 5.0, "reduce": "multiply"}, 5.0),
    ],
)
def test_scatter_into_a_0d_tensor_writes_src_or_value(kw, want):
    kw = {k: tp.tensor(v) if k == "src" else v for k, v in kw.items()}
    src = kw.pop("src", None)
    for index in (tp.tensor(0), tp.tensor([0])):
        got = tp.scatter(tp.tensor(1.0), 0, index, src, **kw)
        assert got.shape == () and got.item() == want


def test_scatter_0d_in_place_and_1d_src():
    x = tp.tensor(1.0)
    x.scatter_(0, tp.tensor(0), tp.tensor([5.0, 6.0]))
    assert x.item() == 5.0
    # a 0-d index and src into a 1-d input: the 0-d tensors are read as 1-d of size 1
    got = tp.scatter(tp.tensor([1.0, 2.0]), 0, tp.tensor(0), tp.tensor(5.0))
    assert got.tolist() == [5.0, 2.0]


def test_gather_reads_a_0d_input_or_index_as_1d():
    assert tp.gather(tp.tensor(1.0), 0, tp.tensor([0, 0])).tolist() == [1.0, 1.0]
    assert tp.gather(tp.tensor([1.0, 2.0]), 0, tp.tensor(1)).item() == 2.0
    assert tuple(tp.gather(_x(tp), 0, tp.zeros(0, dtype=tp.int64)).shape) == (0,)


def test_gather_and_scatter_accept_int32_indices():
    idx = tp.tensor([[2], [0]], dtype=tp.int32)
    assert tp.gather(_x(tp), 1, idx).tolist() == [[2.0], [3.0]]
    assert tp.scatter(_x(tp), 1, idx, value=-1.0).tolist() == [[0, 1, -1], [-1, 4, 5]]
    with pytest.raises(RuntimeError, match="int32 or int64 for index"):
        tp.index_select(_x(tp), 0, tp.tensor([0], dtype=tp.int16))


def test_scatter_index_larger_than_src_raises():
    with pytest.raises(RuntimeError, match=r"to be no larger size than src \[1, 1\]"):
        tp.scatter(_x(tp), 1, tp.tensor([[0, 1]]), tp.ones(1, 1))
    with pytest.raises(RuntimeError, match="same number of dimensions as self"):
        tp.scatter(tp.tensor(1.0), 0, tp.tensor([[0]]), tp.tensor(5.0))


def test_index_select_of_0d_takes_exactly_one_index():
    assert tp.index_select(tp.tensor(4.0), 0, tp.tensor([0])).item() == 4.0
    with pytest.raises(RuntimeError, match="Index to scalar can have only 1 value, got 2"):
        tp.index_select(tp.tensor(4.0), 0, tp.tensor([0, 0]))


def test_0d_gather_and_scatter_gradients_match_torch():
    torch = pytest.importorskip("torch")
    for m in (torch, tp):
        x = m.tensor(2.0, requires_grad=True)
        s = m.tensor([3.0], requires_grad=True)
        y = m.gather(x, 0, m.tensor([0, 0])).sum() * 3 + m.scatter(x, 0, m.tensor([0]), s) * 5
        y.backward()
        if m is torch:
            want = (x.grad.item(), s.grad.tolist())
        else:
            assert (x.grad.item(), s.grad.tolist()) == want
