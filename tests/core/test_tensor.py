"""Tensor and Storage: alignment, version counters, metadata and the torch-compatible surface."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tensorplay as tp
from tensorplay._storage import ALIGNMENT


@pytest.mark.parametrize("n", [0, 1, 3, 10, 16, 100, 129, 1000, 100_000])
@pytest.mark.parametrize("dtype", [tp.float32, tp.float64, tp.int8, tp.bfloat16, tp.complex64])
def test_fresh_cpu_storage_is_64_byte_aligned(n, dtype):
    for make in (
        lambda: tp.empty(n, dtype=dtype),
        lambda: tp.zeros(n, dtype=dtype) + 1,
        lambda: tp.ones(n, dtype=dtype).clone(),
    ):
        t = make()
        assert t.untyped_storage().data_ptr() % ALIGNMENT == 0
        assert t.data_ptr() % ALIGNMENT == 0


def test_small_allocations_from_many_threads_never_share_memory():
    keep, wrong, barrier = [], [], threading.Barrier(4)

    def work(k):
        ts = [tp.ones(4) * (k * 1000 + i) for i in range(500)]
        keep.append(ts)
        barrier.wait()  # every thread's tensors are alive at once
        # nobody else's allocation overwrote ours
        wrong.extend(i for i, t in enumerate(ts) if t.tolist() != [float(k * 1000 + i)] * 4)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ptrs = [t.data_ptr() for ts in keep for t in ts]
    assert wrong == [] and len(ptrs) == len(set(ptrs)) == 2000


def test_views_share_storage_and_version_counter():
    x = tp.arange(12.0).reshape(3, 4)
    v = x.t()[1:]
    assert v.untyped_storage() is x.untyped_storage()
    before = x._version
    v.add_(1)
    assert x._version == v._version == before + 1
    assert x[0, 1].item() == 2.0  # write through the view is visible in the base


def test_metadata_matches_torch_conventions():
    x = tp.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.size() == (2, 3, 4) and x.size(-1) == 4
    assert x.stride() == (12, 4, 1) and x.stride(0) == 12
    assert x.dim() == x.ndim == 3 and x.numel() == 24 and x.element_size() == 4
    assert repr(x.shape) == "tensorplay.Size([2, 3, 4])"
    y = x.permute(2, 0, 1)
    assert y.stride() == (1, 12, 4) and not y.is_contiguous()
    z = y.contiguous()
    assert z.is_contiguous() and z.stride() == (6, 3, 1)
    s = x[1, 1:]
    assert s.storage_offset() == 16 and s.data_ptr() == x.data_ptr() + 16 * 4


def test_untyped_storage_surface():
    x = tp.arange(6, dtype=tp.int32)
    st = x.untyped_storage()
    assert st.nbytes() == 24 and st.device == tp.device("cpu")
    assert st.data_ptr() == x.data_ptr()
    other = tp.zeros(6, dtype=tp.int32).untyped_storage()
    other.copy_(st)
    y = tp.empty(0, dtype=tp.int32).set_(other, 0, (2, 3), (3, 1))
    assert y.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert st.cpu() is st


def test_set_shares_storage_and_checks_bounds():
    base = tp.arange(10.0)
    t = tp.empty(0)
    t.set_(base.untyped_storage(), 2, (2, 2), (4, 1))
    assert t.tolist() == [[2.0, 3.0], [6.0, 7.0]]
    base[2] = 100.0
    assert t[0, 0].item() == 100.0
    with pytest.raises(RuntimeError, match="requires? a storage of at least"):
        t.set_(base.untyped_storage(), 8, (2, 2), (4, 1))


def test_new_factories_inherit_dtype_and_device():
    x = tp.ones(2, dtype=tp.float64)
    assert x.new_empty(3).dtype is tp.float64 and x.new_empty(3).shape == (3,)
    assert x.new_zeros((2, 2)).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert x.new_ones(2).tolist() == [1.0, 1.0]
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0]
    assert x.new_tensor([1, 2]).dtype is tp.float64


def test_copy_broadcasts_casts_and_bumps_version():
    dst = tp.zeros(2, 3, dtype=tp.int32)
    v = dst._version
    dst.copy_(tp.tensor([1.7, 2.2, -3.9]))
    assert dst.tolist() == [[1, 2, -3], [1, 2, -3]] and dst._version == v + 1
    with pytest.raises(RuntimeError, match="copy_"):
        dst.copy_(tp.ones(4))


def test_tolist_item_numpy():
    x = tp.tensor([[1, 2], [3, 4]])
    assert x.tolist() == [[1, 2], [3, 4]]
    assert x[1, 0].item() == 3 and isinstance(x[1, 0].item(), int)
    arr = x.numpy()
    arr[0, 0] = 9  # numpy() shares memory on the CPU, like torch
    assert x[0, 0].item() == 9
    with pytest.raises(RuntimeError, match="a Tensor with 4 elements cannot be converted"):
        x.item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x)


def test_from_numpy_shares_memory_and_rejects_negative_strides():
    a = np.arange(6.0).reshape(2, 3)
    t = tp.from_numpy(a)
    a[1, 2] = -1
    assert t[1, 2].item() == -1
    tt = tp.from_numpy(a.T)
    assert tt.stride() == (1, 3) and tt.tolist() == a.T.tolist()
    with pytest.raises(ValueError, match="negative"):
        tp.from_numpy(a[:, ::-1])


def test_inplace_on_read_only_numpy_memory_raises():
    a = np.ones(3)
    a.flags.writeable = False
    t = tp.from_numpy(a)
    with pytest.raises(RuntimeError, match="read-only"):
        t.add_(1)
    with pytest.raises(RuntimeError, match="read-only"):
        t[0] = 2.0
    assert a.tolist() == [1.0, 1.0, 1.0]


def test_inplace_on_expanded_tensor_raises():
    x = tp.ones(3).expand(2, 3)
    with pytest.raises(RuntimeError, match="single memory location"):
        x.mul_(2)


def test_to_and_type_conversions():
    x = tp.tensor([1.5, -2.5])
    assert x.to(tp.int32).tolist() == [1, -2]
    assert x.to(tp.float64).dtype is tp.float64
    assert x.to("cpu") is x and x.to(x) is x
    assert x.to("cpu", copy=True) is not x
    assert x.double().dtype is tp.float64 and x.long().dtype is tp.int64
    assert x.bool().tolist() == [True, True]
    assert x.half().dtype is tp.float16 and x.bfloat16().float().tolist() == [1.5, -2.5]
    m = x.to("meta")
    assert m.device == "meta" and m.shape == (2,) and m.dtype is tp.float32
    with pytest.raises(NotImplementedError, match="meta"):
        m.to("cpu")


def test_pickle_round_trip():
    import pickle

    x = tp.tensor([[1.0, 2.0]], dtype=tp.float64)
    y = pickle.loads(pickle.dumps(x))
    assert y.dtype is tp.float64 and y.tolist() == x.tolist()


def test_tensor_constructor_and_requires_grad():
    t = tp.Tensor([1.0, 2.0], requires_grad=True)
    assert t.requires_grad and t.is_leaf and t.dtype is tp.float32
    with pytest.raises(RuntimeError, match="floating point and complex"):
        tp.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="requires grad"):
        t.numpy()
    assert t.detach().numpy().tolist() == [1.0, 2.0]
