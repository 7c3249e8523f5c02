"""Views of CUDA tensors taken from the source's own array (``_tensor._derived_cuda_view``):
a reshape of a contiguous tensor or a permutation of its dims gives the same array (shape,
strides, address, values) as the general construction over the storage, and every other
view is left to it. The logic only needs an array with ``reshape``/``transpose``, so it is
checked on numpy arrays here and on CuPy arrays where CUDA exists."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._tensor import _derived_cuda_view, _view_array, strides_of

# (name, view of x): each takes a (2, 3, 4) tensor
VIEWS = {
    "reshape": lambda x: x.reshape(6, 4),
    "flatten": lambda x: x.flatten(),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "view": lambda x: x.view(3, 8),
    "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(1, 2, 0),
    "mT": lambda x: x.mT,
    "transpose then reshape": lambda x: x.transpose(0, 1).reshape(3, 8),  # a copy, then a view
    "narrow (offset)": lambda x: x.narrow(2, 1, 2),
    "select (offset)": lambda x: x.select(0, 1),
    "expand (stride 0)": lambda x: x[:, :1].expand(2, 5, 4),
}
DERIVED = {"reshape", "flatten", "unsqueeze", "view", "transpose", "permute", "mT"}


def _general(src, view):
    return _view_array(src._storage, src.dtype, view._shape, strides_of(view), view._offset)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_the_logic_on_numpy_arrays(name):
    x = tp.arange(24.0).reshape(2, 3, 4)
    v = VIEWS[name](x)
    src = v._base if v._base is not None else x
    got = _derived_cuda_view(src, v._shape, strides_of(v), v._offset)
    if name not in DERIVED:
        assert got is None or name == "transpose then reshape"
    if got is None:
        return
    want = _general(src, v)
    assert got.shape == want.shape and got.strides == want.strides
    assert got.__array_interface__["data"][0] == want.__array_interface__["data"][0]
    np.testing.assert_array_equal(got, want)


def test_equal_dims_permute_to_the_same_layout():
    x = tp.arange(16.0).reshape(1, 4, 1, 4)
    v = x.permute(2, 1, 0, 3)  # two (1, stride) dims swap: either match gives this view
    got = _derived_cuda_view(x, v._shape, strides_of(v), v._offset)
    np.testing.assert_array_equal(got, v.numpy())


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(VIEWS))
def test_cuda_views_match_the_general_construction(name):
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    x = tp.arange(24.0, device="cuda").reshape(2, 3, 4)
    v = VIEWS[name](x)
    src = v._base if v._base is not None else x
    want = _general(src, v)
    assert v._data.shape == want.shape and v._data.strides == want.strides
    assert v._data.data.ptr == want.data.ptr
    np.testing.assert_array_equal(v.cpu().numpy(), VIEWS[name](x.cpu()).numpy())
    if name not in ("expand (stride 0)", "transpose then reshape"):
        v.fill_(-1.0)  # writes through the view reach the source
        assert (x.cpu().numpy() == -1).sum() == v.numel()


class _Arr:
    """Stands in for a CuPy array in the native branch's test: reshape and transpose, and
    not a numpy array (the branch takes any such array of a CUDA storage)."""

    def __init__(self, a):
        self.a = a

    def reshape(self, shape):
        return _Arr(self.a.reshape(shape))

    def transpose(self, perm):
        return _Arr(self.a.transpose(perm))


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_the_native_branch_is_the_twin(name):
    """``_C.make_view`` on a CUDA tensor (here a stand-in: a CUDA storage over a numpy
    array behind ``_Arr``) makes the views ``_derived_cuda_view`` makes, with the same
    geometry and base, and declines the others."""
    from tensorplay._native import NATIVE
    from tensorplay._storage import CudaStorage
    from tensorplay._tensor import Tensor, _new

    if NATIVE is None:
        pytest.skip("tensorplay._C is not loaded (TENSORPLAY_PURE_PYTHON=1 or not built)")
    x = tp.arange(24.0).reshape(2, 3, 4)
    v = VIEWS[name](x)
    src = v._base if v._base is not None else x
    cuda = tp.device("cuda")
    storage = CudaStorage(object(), src._storage._nbytes, cuda)
    fake = _new(
        Tensor, _Arr(src._data), storage, src._offset, src._shape, src._stride, src.dtype, cuda
    )
    got = NATIVE.make_view(fake, v._shape, strides_of(v), v._offset)
    want = _derived_cuda_view(src, v._shape, strides_of(v), v._offset)
    if want is None:
        assert got is None
        return
    assert type(got) is Tensor and type(got._data) is _Arr
    assert got._data.a.shape == want.shape and got._data.a.strides == want.strides
    assert got._data.a.__array_interface__["data"][0] == want.__array_interface__["data"][0]
    assert (got._shape, got._stride, got._offset) == (v._shape, strides_of(v), v._offset)
    assert got._storage is storage and got.device is cuda and got.dtype is src.dtype
    assert got._base is fake
