"""Indexing follows PyTorch's rules where they differ from numpy's (issue 13, items 1-2).

torch applies ints, slices, None, ``...`` and bool scalars first (a view), then the
tensor/list/mask indices on that view; numpy treats an int next to an array as one more
advanced index. The tests state the rule with literal values, then check a table of mixed
indices against torch itself where it is installed.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp


def test_an_int_beside_a_list_selects_first_so_nothing_is_transposed():
    x = tp.arange(18).reshape(2, 3, 3)
    # x[1] is [[9,10,11],[12,13,14],[15,16,17]]; its columns 2 and 0, per row
    assert x[1, :, [2, 0]].tolist() == [[11, 9], [14, 12], [17, 15]]
    # a 0-d integer tensor selects like an int
    assert x[tp.tensor(1), :, [2, 0]].tolist() == [[11, 9], [14, 12], [17, 15]]


def test_setitem_with_an_int_beside_a_list_writes_in_place_not_transposed():
    w = tp.zeros(2, 3, 4)
    w[0, :, [1, 3]] = tp.arange(6.0).reshape(3, 2)
    assert w[0].tolist() == [[0, 0, 0, 1], [0, 2, 0, 3], [0, 4, 0, 5]]
    assert w[1].tolist() == [[0] * 4] * 3


def test_setitem_recorded_by_autograd_uses_the_same_rule():
    base = tp.zeros(2, 3, 4, requires_grad=True)
    w = base.clone()
    v = tp.arange(6.0).reshape(3, 2).requires_grad_()
    w[0, :, [1, 3]] = v
    assert w[0].tolist() == [[0, 0, 0, 1], [0, 2, 0, 3], [0, 4, 0, 5]]
    (w * tp.arange(24.0).reshape(2, 3, 4)).sum().backward()
    # v[i, j] landed at w[0, i, [1, 3][j]], whose weight is 4*i + [1, 3][j]
    assert v.grad.tolist() == [[1, 3], [5, 7], [9, 11]]
    # the overwritten positions of the input get no gradient; the rest get their weight
    assert base.grad[0].tolist() == [[0, 0, 2, 0], [4, 0, 6, 0], [8, 0, 10, 0]]
    assert base.grad[1].tolist() == [[12, 13, 14, 15], [16, 17, 18, 19], [20, 21, 22, 23]]


def test_the_gradient_of_a_mixed_index_lands_where_the_values_came_from():
    x = tp.arange(24.0).reshape(2, 3, 4).requires_grad_()
    y = x[1, :, [3, 0]]
    assert y.tolist() == [[15, 12], [19, 16], [23, 20]]
    (y * tp.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).sum().backward()
    assert x.grad[0].tolist() == [[0] * 4] * 3
    assert x.grad[1].tolist() == [[2, 0, 0, 1], [4, 0, 0, 3], [6, 0, 0, 5]]


def test_a_python_bool_adds_a_dimension_instead_of_consuming_one():
    assert tp.zeros(2, 3, 4)[0, 1:, True].shape == (2, 1, 4)
    assert tp.zeros(2, 3)[True].shape == (1, 2, 3)
    assert tp.zeros(2, 3)[False].shape == (0, 2, 3)
    assert tp.zeros(2, 3)[:, None, True].shape == (2, 1, 1, 3)


def test_a_bool_scalar_indexes_a_0d_tensor():
    assert tp.tensor(1.5)[True].tolist() == [1.5]
    assert tp.tensor(1.5)[tp.tensor(True)].tolist() == [1.5]
    assert tp.tensor(1.5)[False].shape == (0,)


def test_a_bool_scalar_takes_part_in_advanced_indexing():
    x = tp.arange(3.0)
    # True is an index [0] on a new size-1 dimension, broadcast with [0, 2]
    assert x[True, [0, 2]].tolist() == [0.0, 2.0]


def test_a_short_list_holding_a_slice_or_a_sequence_is_read_as_a_tuple():
    x = tp.arange(18).reshape(2, 3, 3)
    assert x[[[0, 1], [1, 2]]].tolist() == [[3, 4, 5], [15, 16, 17]]
    assert x[[0, slice(1, 3)]].tolist() == [[3, 4, 5], [6, 7, 8]]


def test_out_of_range_and_too_many_indices_raise():
    x = tp.zeros(2, 3)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x[0, [3]]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, [0]]
    with pytest.raises(IndexError, match="The shape of the mask"):
        x[:, tp.tensor([True, False])]


# ---- the same table against torch ------------------------------------------------------------

_INDICES = [
    (1, slice(None), [0, 1, 2]),
    (1, slice(None), [2, 0]),
    (slice(None), 1, [0, 2]),
    (None, [0, 1], 1),
    ([0, 1], 1, [0, 1]),
    ([0, 1], True),
    ([0, 1], slice(None), True),
    (Ellipsis, [1, 0]),
    (0, Ellipsis, None, [2]),
    (False,),
    (True, [0, 1]),
    ([True, False],),
    (slice(None), [True, False, True]),
    (1, [[0], [2]], slice(None, None, 2)),
    ([1, 0], slice(None), [[0], [2]]),
    (slice(1, None), None, [0, 0, 2], Ellipsis),
    ([-1], 0),
    (0, [[True, False, True], [False, False, True], [True, True, True]]),
    (Ellipsis, 2, None),
    (slice(None, None, 2), [-3, 2], -1),
]


def _torch_index(torch, idx):
    return tuple(torch.tensor(i) if isinstance(i, np.ndarray) else i for i in idx)


def _on(idx, device):
    """The index with its lists as index tensors on ``device`` (CUDA indexes with CuPy)."""
    return tuple(tp.tensor(i, device=device) if isinstance(i, list) else i for i in idx)


@pytest.mark.parametrize("idx", _INDICES, ids=repr)
def test_getitem_matches_torch(idx, device):
    torch = pytest.importorskip("torch")
    data = np.arange(18.0).reshape(2, 3, 3)
    got = tp.tensor(data, device=device)[_on(idx, device) if device == "cuda" else idx]
    want = torch.tensor(data)[_torch_index(torch, idx)]
    assert tuple(got.shape) == tuple(want.shape)
    assert got.cpu().tolist() == want.tolist()


@pytest.mark.parametrize("idx", _INDICES, ids=repr)
@pytest.mark.parametrize("recorded", [False, True], ids=["plain", "autograd"])
def test_setitem_matches_torch(idx, recorded, device):
    torch = pytest.importorskip("torch")
    if device == "cuda" and [0, 0, 2] in idx:
        pytest.skip("which of two writes to one position wins is undefined on CUDA (torch too)")
    data = np.arange(18.0).reshape(2, 3, 3)
    want = torch.tensor(data)
    shape = tuple(want[_torch_index(torch, idx)].shape)
    value = np.arange(100.0, 100.0 + int(np.prod(shape))).reshape(shape)
    want[_torch_index(torch, idx)] = torch.tensor(value)
    if recorded:
        leaf = tp.tensor(data, requires_grad=True, device=device)
        got = leaf.clone()
    else:
        got = tp.tensor(data, device=device)
    got[_on(idx, device) if device == "cuda" else idx] = tp.tensor(value, device=device)
    assert got.cpu().tolist() == want.tolist()


@pytest.mark.parametrize("idx", _INDICES, ids=repr)
def test_getitem_gradient_matches_torch(idx):
    torch = pytest.importorskip("torch")
    data = np.arange(18.0).reshape(2, 3, 3)
    x = tp.tensor(data, requires_grad=True)
    tx = torch.tensor(data, requires_grad=True)
    y, ty = x[idx], tx[_torch_index(torch, idx)]
    weights = np.arange(1.0, 1.0 + int(np.prod(tuple(ty.shape)))).reshape(tuple(ty.shape))
    (y * tp.tensor(weights)).sum().backward()
    (ty * torch.tensor(weights)).sum().backward()
    assert x.grad.tolist() == tx.grad.tolist()


def test_setitem_into_a_0d_tensor_through_none_is_recorded():
    x = tp.tensor(2.0, requires_grad=True)
    v = tp.tensor([5.0], requires_grad=True)
    y = x.clone()
    y[None] = v
    assert y.item() == 5.0
    y.backward()
    assert x.grad.item() == 0.0 and v.grad.tolist() == [1.0]
