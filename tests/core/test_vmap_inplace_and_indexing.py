"""Writes of batched values into unbatched tensors inside ``vmap`` raise torch's error (never
a silently lost write), and a tensor the batch shares indexed by a batched index is batched
(``table[idx]``), compared with ``torch.func.vmap``."""

import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._vmap import PerformanceWarning

torch = pytest.importorskip("torch")
from torch.func import vmap as torch_vmap  # noqa: E402

# torch's words, for every write of a batched `other` into an unbatched `self`
INPLACE = r"vmap: .*\(self, \*extra_args\) is not possible because there exists a Tensor `other`"


def _setitem(p, index, v):
    p[index] = v
    return p


# each writes the sample v (3 elements) into a tensor made inside the function, not batched
WRITES = {
    "copy_": lambda lib, v: lib.zeros(3, dtype=v.dtype).copy_(v),
    "add_": lambda lib, v: lib.zeros(3, dtype=v.dtype).add_(v),
    "mul_": lambda lib, v: lib.zeros(3, dtype=v.dtype).mul_(v),
    "fill_": lambda lib, v: lib.zeros(3, dtype=v.dtype).fill_(v[0]),
    "setitem_int": lambda lib, v: _setitem(lib.zeros(3, dtype=v.dtype), 0, v[0]),
    "setitem_all": lambda lib, v: _setitem(lib.zeros(3, dtype=v.dtype), Ellipsis, v),
    "setitem_index": lambda lib, v: _setitem(lib.zeros(5, dtype=v.dtype), (v > 0).long(), 1.0),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_batched_write_into_an_unbatched_tensor_raises_as_in_torch(name):
    x = np.random.RandomState(0).randn(4, 3)
    write = WRITES[name]
    with pytest.raises(RuntimeError):
        torch_vmap(lambda v: write(torch, v))(torch.tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)  # the error comes before any loop
        with pytest.raises(RuntimeError, match=INPLACE):
            tp.vmap(lambda v: write(tp, v))(tp.tensor(x))


def test_a_write_of_an_outer_batch_into_an_inner_batched_tensor_raises():
    # b is batched at the inner level only; a differs across the outer batch
    x, y = tp.randn(2, 3), tp.randn(4, 3)
    with pytest.raises(RuntimeError, match=INPLACE):
        tp.vmap(lambda a: tp.vmap(lambda b: b.clone().copy_(a))(y))(x)
    with pytest.raises(RuntimeError, match=INPLACE):
        tp.vmap(lambda a: tp.vmap(lambda b: _setitem(b.clone(), 0, a[0]))(y))(x)


def test_writes_into_batched_tensors_still_work():
    x = np.random.RandomState(1).randn(4, 3)

    def f(lib, v):
        p = v * 0
        p.copy_(v * 2)
        p[0] = v[1]
        p.add_(lib.ones(3, dtype=v.dtype))
        return p

    expected = torch_vmap(lambda v: f(torch, v))(torch.tensor(x)).numpy()
    np.testing.assert_allclose(tp.vmap(lambda v: f(tp, v))(tp.tensor(x)).numpy(), expected)


def test_out_arguments_inside_vmap_raise():
    x = tp.randn(2, 3)
    with pytest.raises(RuntimeError, match=r"out=.*not supported inside vmap"):
        tp.vmap(lambda a: tp.add(a, 1, out=tp.empty(0)))(x)


def test_a_plain_copy_from_a_wrapper_without_data_raises():
    class Wrapper(tp.Tensor):
        @staticmethod
        def __new__(cls, elem):
            return tp.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

        def __init__(self, elem):
            self.elem = elem

        @classmethod
        def __tensorplay_dispatch__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    with pytest.raises(RuntimeError, match="holds no data of its own"):
        tp.zeros(3).copy_(Wrapper(tp.ones(3)))


# ---- a shared tensor indexed by a batched index --------------------------------------------

INDEXING = {
    "table[idx]": lambda t, i: t[i],
    "table[:, idx]": lambda t, i: t[:, i[:1]],
    "table[idx 0-d]": lambda t, i: t[i[0]],
    "table[idx, idx]": lambda t, i: t[i, i % 3],
    "table[1, idx]": lambda t, i: t[1, i % 3],
    "table[idx, None]": lambda t, i: t[i, None],
    "table[..., idx]": lambda t, i: t[..., i % 3],
    "table[idx, 1:]": lambda t, i: t[i, 1:],
    "table[idx, ::2]": lambda t, i: t[i, ::2],
    "table[idx negative]": lambda t, i: t[i - 3],
}


@pytest.mark.parametrize("name", sorted(INDEXING))
def test_a_shared_tensor_indexed_by_a_batched_index_matches_torch(name):
    table = np.random.RandomState(2).randn(5, 3)
    idx = np.array([[0, 4], [1, -1], [2, 2]])
    index = INDEXING[name]
    expected = torch_vmap(lambda i: index(torch.tensor(table), i))(torch.tensor(idx)).numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)  # one batched op, no loop
        got = tp.vmap(lambda i: index(tp.tensor(table), i))(tp.tensor(idx))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected)


def test_a_batched_index_out_of_range_anywhere_in_the_batch_raises():
    table = tp.randn(5, 3)
    idx = tp.tensor([[0, 1], [2, 9]])  # only the second sample is bad
    with pytest.raises(IndexError, match="index 9 is out of bounds"):
        tp.vmap(lambda i: table[i])(idx)


def test_a_batched_mask_index_raises_as_in_torch():
    table = tp.randn(5, 3)
    with pytest.raises(RuntimeError, match="mask"):
        tp.vmap(lambda m: table[m])(tp.ones(2, 5, dtype=tp.bool))


def test_gradients_flow_through_a_batched_index_into_a_shared_table():
    table = np.random.RandomState(3).randn(5, 3)
    idx = np.array([[0, 4], [1, 1], [2, 4]])
    t = tp.tensor(table, requires_grad=True)
    tp.vmap(lambda i: t[i].sin())(tp.tensor(idx)).sum().backward()
    tt = torch.tensor(table, requires_grad=True)
    torch_vmap(lambda i: tt[i].sin())(torch.tensor(idx)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy())


def test_casting_a_batched_tensor_is_batched():
    x = np.random.RandomState(4).randn(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = tp.vmap(lambda v: (v > 0).to(tp.float64) + v.long())(tp.tensor(x))
    expected = torch_vmap(lambda v: (v > 0).to(torch.float64) + v.long())(torch.tensor(x))
    assert got.dtype == tp.float64
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
