"""The one-kernel CUDA ``gather``/``index_select``/``scatter`` (``_cuda_index``): the same
values as the CPU rows for every dtype and index dtype they take, the generic route where
they do not apply, and bad indices reported at the next synchronisation naming the op."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _cuda_index

pytestmark = pytest.mark.cuda


@pytest.fixture
def launches(monkeypatch):
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    seen = []
    real = _cuda_index._run
    monkeypatch.setattr(_cuda_index, "_run", lambda k, *a: (seen.append(k), real(k, *a))[1])
    return seen


DTYPES = [tp.float32, tp.float64, tp.float16, tp.int64, tp.int32, tp.int8, tp.bool]


def _values(shape, dtype, rng):
    if dtype is tp.bool:
        return tp.tensor(rng.random(shape) > 0.5)
    return tp.tensor(rng.standard_normal(shape) * 10).to(dtype)


def _same(got, want):
    assert got.device.type == "cuda" and got.dtype is want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", [tp.int64, tp.int32], ids=str)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather_and_index_select_match_the_cpu(launches, dtype, index_dtype, dim):
    rng = np.random.default_rng(dim)
    x = _values((4, 5, 6), dtype, rng)
    shape = [4, 5, 6]
    shape[dim] = 7
    idx = tp.tensor(rng.integers(0, x.shape[dim], shape), dtype=index_dtype)
    _same(tp.gather(x.cuda(), dim, idx.cuda()), tp.gather(x, dim, idx))
    sel = tp.tensor(rng.integers(0, x.shape[dim], 9), dtype=index_dtype)
    _same(tp.index_select(x.cuda(), dim, sel.cuda()), tp.index_select(x, dim, sel))
    # one launch each (float16 may be computed in float32: the item size can differ)
    j = _cuda_index._INDEX_TYPES[idx.numpy().dtype.char]
    assert [k.split("<")[0] for k in launches] == ["tp_gather", "tp_index_select"]
    assert all(k.endswith(f", {j}>") for k in launches)


@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.int64, tp.int32], ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_add_accumulates_repeated_positions(launches, dtype, dim):
    rng = np.random.default_rng(3)
    x = _values((6, 5), dtype, rng)
    shape = [6, 5]
    shape[dim] = 12  # more entries than positions: every position is hit repeatedly
    idx = tp.tensor(rng.integers(0, x.shape[dim], shape))
    src = _values(tuple(shape), dtype, rng)
    got = tp.scatter(x.cuda(), dim, idx.cuda(), src.cuda(), reduce="add")
    want = tp.scatter(x, dim, idx, src, reduce="add")
    if dtype.is_floating_point:  # atomics add in any order
        assert got.dtype is want.dtype
        np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-5, atol=1e-4)
    else:
        _same(got, want)
    assert len(launches) == 1 and launches[0].startswith("tp_scatter_add<")


def test_plain_scatter_and_the_generic_route(launches):
    x = tp.zeros(3, 4)
    idx = tp.tensor([[2, 0, 1, 2]])
    src = tp.arange(4.0).reshape(1, 4)
    _same(tp.scatter(x.cuda(), 0, idx.cuda(), src.cuda()), tp.scatter(x, 0, idx, src))
    assert launches == ["tp_scatter<unsigned int, long long>"]
    launches.clear()
    # src larger than index, an index smaller than the input: the generic route, same values
    big = tp.arange(12.0).reshape(3, 4)
    small = tp.tensor([[1, 0], [0, 2]])
    _same(tp.scatter(x.cuda(), 1, small.cuda(), big.cuda()), tp.scatter(x, 1, small, big))
    _same(tp.gather(big.cuda(), 1, small.cuda()), tp.gather(big, 1, small))
    t = big.t()  # not contiguous
    _same(tp.gather(t.cuda(), 0, small.cuda()), tp.gather(t, 0, small))
    assert launches == []


@pytest.mark.parametrize(
    "call",
    [
        lambda x, i: tp.gather(x, 1, i.reshape(1, 1).expand(3, 1).contiguous()),
        lambda x, i: tp.index_select(x, 1, i),
        lambda x, i: tp.scatter(
            x,
            1,
            i.reshape(1, 1).expand(3, 1).contiguous(),
            tp.ones(3, 1, device="cuda"),
            reduce="add",
        ),
    ],
    ids=["gather", "index_select", "scatter"],
)
def test_bad_index_is_reported_at_the_next_sync(launches, call):
    x = tp.zeros(3, 4, device="cuda")
    call(x, tp.tensor([7], device="cuda"))
    with pytest.raises(RuntimeError, match=r"index 7 is out of bounds for dimension 1 with size 4"):
        tp.cuda.synchronize()
    tp.cuda.synchronize()  # reported once
    assert len(launches) == 1
