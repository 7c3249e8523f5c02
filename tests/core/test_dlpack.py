"""DLPack both ways (``Tensor.__dlpack__`` / ``tp.from_dlpack``): zero-copy, every dtype,
strides, read-only flag, lifetimes, and interop with numpy, torch, tvm-ffi, JAX, CuPy."""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _dlpack as dl, _dtype as D

ALL_DTYPES = list(D.ALL)
EXPECTED_CODES = {
    tp.bool: (6, 8),
    tp.uint8: (1, 8),
    tp.int8: (0, 8),
    tp.int16: (0, 16),
    tp.int32: (0, 32),
    tp.int64: (0, 64),
    tp.float16: (2, 16),
    tp.bfloat16: (4, 16),
    tp.float32: (2, 32),
    tp.float64: (2, 64),
    tp.complex64: (5, 64),
    tp.complex128: (5, 128),
}

# private prototypes (setting argtypes on ctypes.pythonapi.X would change them for everyone)
_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi)
)
_ptr = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def managed(capsule):
    """The DLManagedTensor[Versioned] struct inside an (unconsumed) capsule."""
    name = _name(capsule)
    cls = dl.DLManagedTensorVersioned if name == b"dltensor_versioned" else dl.DLManagedTensor
    return cls.from_address(_ptr(capsule, name))


def sample(dt, shape=(3, 4)):
    vals = np.arange(int(np.prod(shape))).reshape(shape) % 5
    if dt is tp.bool:
        vals = vals % 2 == 1
    return tp.tensor(vals.tolist(), dtype=dt)


class Producer:
    """Exposes only the protocol, so ``tp.from_dlpack`` must go through a capsule."""

    def __init__(self, t, **fixed):
        self.t, self.fixed = t, fixed

    def __dlpack__(self, **kw):
        kw.update(self.fixed)
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def legacy_only(t):
    """A producer from before DLPack 1.0: no ``max_version`` keyword."""

    class Old:
        def __dlpack__(self, stream=None):
            return t.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return t.__dlpack_device__()

    return Old()


def collect():
    for _ in range(2):
        gc.collect()


# ---- capsule contents ----------------------------------------------------------------------------


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_capsule_struct_fields(dt):
    t = sample(dt)
    legacy = t.__dlpack__()
    versioned = t.__dlpack__(max_version=(1, 0))
    assert _name(legacy) == b"dltensor"
    assert _name(versioned) == b"dltensor_versioned"
    for cap in (legacy, versioned):
        m = managed(cap)
        d = m.dl_tensor
        assert (d.dtype.code, d.dtype.bits, d.dtype.lanes) == (*EXPECTED_CODES[dt], 1)
        assert (d.device.device_type, d.device.device_id) == (1, 0)
        assert d.data == t.data_ptr() and d.byte_offset == 0
        assert [d.shape[i] for i in range(d.ndim)] == [3, 4]
        assert [d.strides[i] for i in range(d.ndim)] == [4, 1]  # elements, not bytes
    v = managed(versioned)
    assert (v.version.major, v.version.minor) == (1, 0)  # never above the consumer's max
    assert v.flags == 0
    assert managed(t.__dlpack__(max_version=(1, 5))).version.minor == 1


def test_strides_of_non_contiguous_views():
    base = tp.arange(24, dtype=tp.int32).reshape(4, 6)
    for view in (base.t(), base[:, 1::2], base[1:3, ::3], base.reshape(2, 3, 4).permute(2, 0, 1)):
        d = managed(view.__dlpack__(max_version=(1, 0))).dl_tensor
        assert tuple(d.strides[i] for i in range(d.ndim)) == view.stride()
        assert d.data == view.data_ptr()
        a = np.from_dlpack(view)
        assert a.strides == tuple(s * 4 for s in view.stride())
        np.testing.assert_array_equal(a, np.array(view.tolist()))


@pytest.mark.parametrize("n", [1, 7, 64, 1000, 100_000])
def test_fresh_contiguous_tensors_export_64_byte_aligned(n):
    for dt in (tp.float32, tp.int8, tp.complex128):
        t = tp.empty(n, dtype=dt)
        assert managed(t.__dlpack__(max_version=(1, 0))).dl_tensor.data % 64 == 0


def test_meta_tensors_raise_buffer_error():
    t = tp.empty(2, 3, device="meta")
    with pytest.raises(BufferError):
        t.__dlpack__()
    with pytest.raises(BufferError):
        t.__dlpack_device__()
    with pytest.raises(BufferError):
        np.from_dlpack(t)


def test_stream_must_be_none_on_cpu():
    with pytest.raises(BufferError, match="stream"):
        tp.ones(2).__dlpack__(stream=5)


def test_dl_device_and_copy_arguments():
    t = tp.arange(4.0)
    same = managed(t.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    assert same.dl_tensor.data == t.data_ptr()
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), dl_device=(2, 0))
    copied = t.__dlpack__(max_version=(1, 0), copy=True)
    m = managed(copied)
    assert m.flags & dl.FLAG_IS_COPIED and m.dl_tensor.data != t.data_ptr()
    c = tp.from_dlpack(copied)
    c[0] = 99.0
    assert t[0].item() == 0.0


# ---- numpy ---------------------------------------------------------------------------------------


def test_numpy_consumes_tensor_zero_copy():
    t = tp.arange(6, dtype=tp.float32).reshape(2, 3)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr()
    a[1, 2] = -5.0
    assert t[1, 2].item() == -5.0
    t[0, 0] = 7.0
    assert a[0, 0] == 7.0


def test_tensorplay_consumes_numpy_zero_copy():
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    t = tp.from_dlpack(a)
    assert t.dtype is tp.float64 and t.shape == (3, 2) and t.stride() == (4, 2)
    assert t.data_ptr() == a.ctypes.data
    t[2, 1] = 100.0
    assert a[2, 1] == 100.0
    a[0, 0] = -1.0
    assert t[0, 0].item() == -1.0


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("protocol", ["versioned", "legacy"])
def test_round_trip_tensorplay_to_tensorplay(dt, protocol):
    t = sample(dt)
    src = Producer(t) if protocol == "versioned" else legacy_only(t)
    u = tp.from_dlpack(src)
    assert u.dtype is dt and u.shape == t.shape and u.stride() == t.stride()
    assert u.data_ptr() == t.data_ptr()
    assert u.tolist() == t.tolist()
    u[0, 0] = u[0, 1]  # writes show through: one memory
    assert t[0, 0].item() == t[0, 1].item()


@pytest.mark.parametrize("view", ["t", "slice", "permute"])
def test_round_trip_keeps_strides(view):
    base = tp.arange(60, dtype=tp.float64).reshape(3, 4, 5)
    v = {
        "t": lambda: base[0].t(),
        "slice": lambda: base[:, 1:, ::2],
        "permute": lambda: base.permute(2, 0, 1),
    }[view]()
    u = tp.from_dlpack(Producer(v))
    assert u.stride() == v.stride() and u.data_ptr() == v.data_ptr()
    assert u.tolist() == v.tolist()


def test_zero_dim_and_empty_tensors():
    s = tp.tensor(2.5)
    a = np.from_dlpack(s)
    assert a.shape == () and a[()] == 2.5
    u = tp.from_dlpack(Producer(s))
    assert u.shape == () and u.item() == 2.5 and u.data_ptr() == s.data_ptr()
    for shape in [(0,), (2, 0, 3)]:
        e = tp.empty(*shape)
        assert np.from_dlpack(e).shape == shape
        assert tp.from_dlpack(Producer(e)).shape == shape
    assert tp.from_dlpack(np.zeros((0, 4))).shape == (0, 4)


def test_negative_strides_from_numpy_are_copied():
    a = np.arange(5)[::-1]
    t = tp.from_dlpack(a)
    assert t.tolist() == [4, 3, 2, 1, 0]
    with pytest.raises(BufferError, match="negative"):
        tp.from_dlpack(a, copy=False)


def test_read_only_flag():
    a = np.arange(4.0)
    a.flags.writeable = False
    t = tp.from_numpy(a)
    m = managed(t.__dlpack__(max_version=(1, 0)))
    assert m.flags & dl.FLAG_READ_ONLY and m.dl_tensor.data == a.ctypes.data
    # imported read-only memory stays read-only
    u = tp.from_dlpack(Producer(t))
    assert not u.numpy().flags.writeable and u.data_ptr() == a.ctypes.data
    # numpy (a 1.x consumer) gets a read-only view of the same memory
    b = np.from_dlpack(t)
    assert not b.flags.writeable and b.ctypes.data == a.ctypes.data
    # a legacy capsule cannot say "read-only": the consumer gets a private copy ...
    legacy = managed(t.__dlpack__())
    assert legacy.dl_tensor.data != a.ctypes.data
    # ... or a BufferError when it forbids copies
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(copy=False)
    writable = managed(tp.arange(3.0).__dlpack__(max_version=(1, 0)))
    assert not writable.flags & dl.FLAG_READ_ONLY


def test_capsule_can_be_consumed_only_once():
    cap = tp.arange(3).__dlpack__(max_version=(1, 0))
    tp.from_dlpack(cap)
    assert _name(cap) == b"used_dltensor_versioned"
    with pytest.raises(BufferError, match="already consumed"):
        tp.from_dlpack(cap)


def test_unsupported_dtype_is_buffer_error_and_releases_producer():
    a = np.arange(3, dtype=np.uint16)  # TensorPlay has no uint16
    ref = weakref.ref(a)
    with pytest.raises(BufferError, match="unsupported DLPack dtype"):
        tp.from_dlpack(a)
    del a
    collect()
    assert ref() is None  # numpy's capsule destructor freed its export


def test_from_dlpack_type_error():
    with pytest.raises(TypeError, match="__dlpack__"):
        tp.from_dlpack([1, 2, 3])


def test_from_dlpack_of_tensor_is_an_alias():
    t = tp.arange(3.0, requires_grad=True)
    u = tp.from_dlpack(t)
    assert u.data_ptr() == t.data_ptr() and not u.requires_grad


def test_from_numpy_misaligned_foreign_array():
    raw = np.zeros(8 * 4 + 1, np.uint8)
    a = np.frombuffer(raw, dtype=np.float64, count=4, offset=1)  # deliberately misaligned
    assert not a.flags.aligned
    t = tp.from_numpy(a)
    t[2] = 3.5
    assert a[2] == 3.5 and (t + 1).tolist() == [1.0, 1.0, 4.5, 1.0]
    assert managed(t.__dlpack__(max_version=(1, 0))).dl_tensor.data == a.ctypes.data
    assert tp.from_dlpack(a).tolist() == [0.0, 0.0, 3.5, 0.0]


# ---- lifetimes -----------------------------------------------------------------------------------


def test_exported_memory_outlives_the_tensor():
    t = tp.arange(1000, dtype=tp.float32)
    storage = weakref.ref(t.untyped_storage())
    a = np.from_dlpack(t)
    del t
    collect()
    assert storage() is not None
    np.testing.assert_array_equal(a, np.arange(1000, dtype=np.float32))
    del a
    collect()
    assert storage() is None  # numpy called our deleter


def test_imported_memory_outlives_the_producer():
    a = np.arange(1000.0)
    ref = weakref.ref(a)
    t = tp.from_dlpack(a)
    del a
    collect()
    assert ref() is not None and t[999].item() == 999.0
    view = t[10:20]
    del t
    collect()
    assert ref() is not None and view[0].item() == 10.0
    del view
    collect()
    assert ref() is None  # we called numpy's deleter once the last view died


def test_tensorplay_round_trip_lifetime():
    t = tp.arange(500, dtype=tp.int64)
    storage = weakref.ref(t.untyped_storage())
    u = tp.from_dlpack(Producer(t))
    del t
    collect()
    assert storage() is not None and u.sum().item() == sum(range(500))
    del u
    collect()
    assert storage() is None


def test_unconsumed_capsule_frees_its_export():
    t = tp.arange(1000, dtype=tp.float32)
    storage = weakref.ref(t.untyped_storage())
    before = len(dl._exports)
    cap = t.__dlpack__(max_version=(1, 0))
    del t
    collect()
    assert storage() is not None  # the capsule still owns it
    del cap
    collect()
    assert storage() is None and len(dl._exports) == before


def test_rejected_capsule_keeps_the_consumers_error():
    # A C consumer that rejects our capsule drops it while its error is pending; the
    # error must reach the caller intact (not become a SystemError) and the export must
    # be freed. PyCapsule_GetPointer with another name is such a consumer on every
    # Python and numpy (numpy >= 2.5 accepts every dtype we export, bfloat16 included).
    reject = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    t = tp.ones(4, dtype=tp.bfloat16)
    storage = weakref.ref(t.untyped_storage())
    with pytest.raises(ValueError, match="incorrect name") as info:
        reject(t.__dlpack__(), b"not_a_dltensor")
    assert not isinstance(info.value, SystemError)
    del t
    collect()
    assert storage() is None


def test_exports_outlive_the_module_names_of_their_callbacks():
    # At interpreter shutdown a consumer (numpy's array from np.from_dlpack, an unconsumed
    # capsule) may free our export after this module's globals are gone: the C thunks of the
    # deleter and the capsule destructor must stay callable.
    code = """if True:
        import gc, sys
        import numpy as np
        import tensorplay as tp
        a = np.from_dlpack(tp.ones(3) * 2)
        unconsumed = (tp.ones(2) * 3).__dlpack__()
        module = sys.modules["tensorplay._dlpack"]
        del module._deleter, module._capsule_destructor
        gc.collect()
        del a, unconsumed
        gc.collect()
        print("freed")
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "freed\n"), done.stderr


# ---- torch ---------------------------------------------------------------------------------------

TORCH_DTYPES = {}


def _torch():
    torch = pytest.importorskip("torch", reason="torch not installed (optional interop test)")
    TORCH_DTYPES.update(
        {
            tp.bool: torch.bool,
            tp.uint8: torch.uint8,
            tp.int8: torch.int8,
            tp.int16: torch.int16,
            tp.int32: torch.int32,
            tp.int64: torch.int64,
            tp.float16: torch.float16,
            tp.bfloat16: torch.bfloat16,
            tp.float32: torch.float32,
            tp.float64: torch.float64,
            tp.complex64: torch.complex64,
            tp.complex128: torch.complex128,
        }
    )
    return torch


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_torch_from_tensorplay(dt):
    torch = _torch()
    t = sample(dt)
    x = torch.from_dlpack(t)
    assert x.dtype == TORCH_DTYPES[dt] and x.data_ptr() == t.data_ptr()
    assert x.tolist() == t.tolist()
    x[0, 0] = x[0, 1]
    assert t[0, 0].item() == t[0, 1].item()


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=str)
def test_tensorplay_from_torch(dt):
    torch = _torch()
    x = torch.arange(12).reshape(3, 4).remainder(5).to(TORCH_DTYPES[dt])
    t = tp.from_dlpack(x)
    assert t.dtype is dt and t.data_ptr() == x.data_ptr() and t.tolist() == x.tolist()
    t[2, 3] = t[0, 1]
    assert x[2, 3].item() == x[0, 1].item()


def test_torch_non_contiguous_both_ways():
    torch = _torch()
    x = torch.arange(20.0).reshape(4, 5)[:, 1::2].t()
    t = tp.from_dlpack(x)
    assert t.stride() == x.stride() and t.tolist() == x.tolist()
    v = tp.arange(20.0).reshape(4, 5).t()[1:]
    y = torch.from_dlpack(v)
    assert y.stride() == v.stride() and y.data_ptr() == v.data_ptr()


def test_torch_lifetime():
    torch = _torch()
    t = tp.arange(100.0)
    storage = weakref.ref(t.untyped_storage())
    x = torch.from_dlpack(t)
    del t
    collect()
    assert storage() is not None and x.sum().item() == 4950.0
    del x
    collect()
    assert storage() is None
    y = torch.arange(10.0)
    u = tp.from_dlpack(y)
    del y
    collect()
    assert u.sum().item() == 45.0


# ---- tvm-ffi, JAX, CuPy --------------------------------------------------------------------------


def test_tvm_ffi_both_ways():
    tvm_ffi = pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed")
    for dt in (tp.float32, tp.bfloat16, tp.int8, tp.bool):
        t = sample(dt)
        v = tvm_ffi.from_dlpack(t)
        assert tuple(v.shape) == (3, 4)
        u = tp.from_dlpack(v)
        assert u.dtype is dt and u.data_ptr() == t.data_ptr() and u.tolist() == t.tolist()
    t = tp.zeros(2, 3)
    back = tp.from_dlpack(tvm_ffi.from_dlpack(t))
    back[1, 1] = 4.0
    assert t[1, 1].item() == 4.0


def test_jax_both_ways():
    jnp = pytest.importorskip("jax.numpy", reason="jax not installed")
    j = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    t = tp.from_dlpack(j)
    assert t.tolist() == j.tolist() and t.data_ptr() == j.unsafe_buffer_pointer()
    for dt, jdt in ((tp.float32, jnp.float32), (tp.bfloat16, jnp.bfloat16), (tp.int32, jnp.int32)):
        s = sample(dt)
        k = jnp.from_dlpack(s)
        assert k.dtype == jdt and k.tolist() == s.tolist()


def _cupy():
    if not tp.cuda.is_available():
        pytest.skip("CUDA not available")
    import cupy  # noqa: PLC0415 - available whenever tp.cuda is

    return cupy


def test_cupy_both_ways():
    cp = _cupy()
    t = tp.arange(12, dtype=tp.float32, device="cuda").reshape(3, 4)
    assert t.__dlpack_device__() == (2, cp.cuda.runtime.getDevice())
    c = cp.from_dlpack(t)
    assert c.data.ptr == t.data_ptr()
    c[0, 0] = 42
    assert t[0, 0].item() == 42.0
    x = cp.arange(20, dtype=cp.float64).reshape(4, 5)[:, ::2]
    u = tp.from_dlpack(x)
    assert u.device.type == "cuda" and u.data_ptr() == x.data.ptr and u.stride() == (5, 2)
    u[1, 1] = -1.0
    assert float(x[1, 1]) == -1.0


def test_cupy_lifetime_and_cpu_export():
    cp = _cupy()
    x = cp.arange(100, dtype=cp.float32)
    u = tp.from_dlpack(x)
    del x
    collect()
    assert u.sum().item() == 4950.0
    t = tp.arange(5.0, device="cuda")
    host = tp.from_dlpack(Producer(t, dl_device=(1, 0)))  # a copy to the CPU
    assert host.device.type == "cpu" and host.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    with pytest.raises(BufferError):
        t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=False)


def test_torch_cuda_both_ways():
    cp = _cupy()
    torch = _torch()
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA support here")
    t = tp.arange(6, dtype=tp.float32, device="cuda").reshape(2, 3)
    x = torch.from_dlpack(t)
    assert x.is_cuda and x.data_ptr() == t.data_ptr()
    x[1, 2] = 50.0
    torch.cuda.synchronize()
    assert t[1, 2].item() == 50.0
    y = torch.arange(12.0, device="cuda").reshape(3, 4).t()
    u = tp.from_dlpack(y)
    assert u.device.type == "cuda" and u.data_ptr() == y.data_ptr() and u.stride() == (1, 4)
    u[0, 0] = -7.0
    cp.cuda.get_current_stream().synchronize()
    assert y[0, 0].item() == -7.0
    del y
    collect()
    assert u.sum().item() == sum(range(12)) - 7.0
