"""``tensorplay._C.adopt_cuda``, the C twin of ``_tensor.adopt_array``'s CUDA branch, on a
stand-in for a CuPy array (so that CI, which has no GPU, checks it): the same Tensor and
CudaStorage fields as the twin for a C-contiguous result of the dtype asked for, None for
anything else. The CUDA tests run it on real CuPy results (every plain call adopts there)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _device
from tensorplay._native import NATIVE
from tensorplay._storage import CudaStorage
from tensorplay._tensor import Tensor, adopt_array

pytestmark = pytest.mark.skipif(
    NATIVE is None or not hasattr(NATIVE, "adopt_cuda"),
    reason="tensorplay._C is not loaded (TENSORPLAY_PURE_PYTHON=1 or not built)",
)


class _Array:
    """What adopt reads of a CuPy array."""

    def __init__(self, shape, dtype, contiguous=True, ptr=4096):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self._c_contiguous = contiguous
        self.flags = types.SimpleNamespace(c_contiguous=contiguous)
        self.data = types.SimpleNamespace(ptr=ptr)
        self.nbytes = int(np.prod(shape)) * self.dtype.itemsize


@pytest.fixture
def stand_in():
    NATIVE.init_cuda_adopt(_Array, CudaStorage)
    yield
    # put CuPy's class back where it is loaded (else the next load registers it)
    if _device._cupy.cache_info().currsize and _device._cupy()[0] is not None:
        NATIVE.init_cuda_adopt(_device._cupy()[0].ndarray, CudaStorage)


def _fields(t):
    s = t._storage
    return (
        type(t), t._data, t._shape, t.dtype, t.device, t._offset, t._stride,
        type(s), s._mem, s._start, s._nbytes, s.device, s._version,
    )  # fmt: skip


@pytest.mark.parametrize("shape", [(), (3,), (2, 0, 5), (4, 8)])
@pytest.mark.parametrize("dt", [tp.float32, tp.int64, tp.bool])
def test_the_same_tensor_as_the_twin(stand_in, shape, dt):
    cuda = tp.device("cuda")
    arr = _Array(shape, dt.np, ptr=1 << 20)
    got, want = NATIVE.adopt_cuda(arr, dt, cuda), adopt_array(arr, dt, cuda)
    assert _fields(got) == _fields(want)
    assert got._data is arr and got._storage._mem is arr.data and got.data_ptr() == 1 << 20
    assert got._version == 0 and got.shape == shape and type(got) is Tensor


def test_what_it_leaves_to_python(stand_in):
    cuda = tp.device("cuda")
    assert NATIVE.adopt_cuda(_Array((3, 4), "float32", contiguous=False), tp.float32, cuda) is None
    assert NATIVE.adopt_cuda(_Array((3,), "float64"), tp.float32, cuda) is None  # another dtype
    assert NATIVE.adopt_cuda(np.zeros(3, np.float32), tp.float32, cuda) is None  # not CuPy's


class _FlagsOnly(_Array):
    """A CuPy array of a version without ``_c_contiguous``: only ``flags`` says it."""

    def __getattribute__(self, name):
        if name == "_c_contiguous":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_contiguity_from_flags_where_the_attribute_is_missing():
    cuda = tp.device("cuda")
    NATIVE.init_cuda_adopt(_FlagsOnly, CudaStorage)
    try:
        arr = _FlagsOnly((3, 4), "float32")
        t = NATIVE.adopt_cuda(arr, tp.float32, cuda)
        assert t is not None and t._data is arr and t._shape == (3, 4)
        strided = _FlagsOnly((3, 4), "float32", contiguous=False)
        assert NATIVE.adopt_cuda(strided, tp.float32, cuda) is None
    finally:  # as the stand_in fixture: CuPy's class back where it is loaded
        if _device._cupy.cache_info().currsize and _device._cupy()[0] is not None:
            NATIVE.init_cuda_adopt(_device._cupy()[0].ndarray, CudaStorage)


def test_bad_registration_is_refused():
    with pytest.raises(TypeError, match="storage must subclass Storage"):
        NATIVE.init_cuda_adopt(_Array, dict)
    with pytest.raises(TypeError, match="two classes"):
        NATIVE.init_cuda_adopt(_Array, 3)
