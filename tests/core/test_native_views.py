"""tensorplay._C.make_view against its twin, the CPU branch of ``_tensor.make_view``: the
same array (shape, strides, address, flags) and the same tensor fields for the geometries
views take, shared memory and version counter, and None (Python decides or raises) for
everything else."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _native, _tensor

C = _native.NATIVE
pytestmark = pytest.mark.skipif(
    C is None or not hasattr(C, "make_view"), reason=f"no _C: {_native.REASON}"
)


def _twin(src, shape, stride, offset):
    saved, _tensor._native_view = _tensor._native_view, None
    try:
        return _tensor.make_view(src, shape, stride, offset)
    finally:
        _tensor._native_view = saved


def _same(a, b):
    assert type(a) is type(b) is tp.Tensor
    assert a._shape == b._shape and a._stride == b._stride and a._offset == b._offset
    assert a.dtype is b.dtype and a.device is b.device and a._storage is b._storage
    assert a._base is b._base
    x, y = a._data, b._data
    assert x.shape == y.shape and x.strides == y.strides and x.dtype == y.dtype
    assert x.ctypes.data == y.ctypes.data
    assert x.flags.writeable == y.flags.writeable and x.flags.aligned == y.flags.aligned
    assert x.flags.c_contiguous == y.flags.c_contiguous
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "geo",
    [
        ((4, 3), (1, 4), 0),  # a transpose
        ((2, 2), (4, 1), 5),  # an offset block
        ((3, 4), (0, 1), 0),  # an expand (stride 0)
        ((0, 5), (5, 1), 12),  # empty, the offset at the end
        ((), (), 7),  # one element
        ((12,), (1,), 0),
    ],
    ids=str,
)
@pytest.mark.parametrize("dtype", [tp.float32, tp.int64, tp.complex128, tp.bfloat16])
def test_native_views_are_the_twins(geo, dtype):
    src = tp.arange(12).to(dtype).reshape(3, 4)
    got = C.make_view(src, *geo)
    assert got is not None
    _same(got, _twin(src, *geo))
    # a view of a view keeps the first base
    again = C.make_view(got, (1,), (1,), 0)
    assert again._base is (src if src._base is None else src._base)


def test_views_share_memory_and_version():
    src = tp.zeros(3, 4)
    v = C.make_view(src, (4, 3), (1, 4), 0)
    v.add_(1.0)  # through the view
    assert src.sum().item() == 12.0 and src._version == v._version == 1
    ro = tp.from_numpy(np.zeros(6, np.float32).reshape(2, 3))
    ro._data.flags.writeable = False  # a read-only buffer gives a read-only view
    ro._storage._buf.flags.writeable = False
    view = C.make_view(ro, (3, 2), (1, 3), 0)
    assert not view._data.flags.writeable


def test_what_python_makes_or_refuses():
    src = tp.arange(12.0).reshape(3, 4)
    assert C.make_view(src, [4, 3], (1, 4), 0) is None  # lists: Python converts them
    assert C.make_view(src, (4, 3), (-1, 4), 0) is None  # negative stride
    assert C.make_view(src, (4, 4), (4, 1), 0) is None  # past the storage (in a slab)
    big = tp.arange(1000.0)  # a buffer of its own: past it, numpy raises
    assert C.make_view(big, (1001,), (1,), 0) is None
    with pytest.raises((TypeError, ValueError)):
        _tensor.make_view(big, (1001,), (1,), 0)
    assert C.make_view(src, (2,), (1,), -1) is None
    assert C.make_view(src.as_subclass(type("Sub", (tp.Tensor,), {})), (2,), (1,), 0) is None
    assert C.make_view(tp.empty(3, device="meta"), (3,), (1,), 0) is None
    assert C.make_view(src, (2.5,), (1,), 0) is None
    with pytest.raises(TypeError):
        C.make_view(src, (2,))
