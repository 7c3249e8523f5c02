"""Devices: parsing, meta tensors, CUDA through CuPy (skipped with the reason without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from tensor_helpers import to_numpy

import tensorplay as tp


def test_device_parsing():
    assert tp.device("cpu").type == "cpu" and tp.device("cpu").index is None
    d = tp.device("cuda:1")
    assert d.type == "cuda" and d.index == 1 and str(d) == "cuda:1"
    assert tp.device("cuda", 0) is tp.device("cuda:0")
    assert tp.device("meta") == "meta"
    with pytest.raises(RuntimeError, match="unknown device type"):
        tp.device("gpu")
    with pytest.raises(RuntimeError, match="invalid device index"):
        tp.device("cuda:x")


def test_meta_tensors_compute_shapes_only():
    a = tp.empty(8, 1, 5, device="meta")
    b = tp.empty(3, 5, dtype=tp.float64, device="meta")
    c = (a + b).sum(-1)
    assert c.device == "meta" and c.shape == (8, 3) and c.dtype is tp.float64
    assert (a.transpose(0, 2) @ tp.empty(8, 4, device="meta")).shape == (5, 1, 4)
    with pytest.raises(RuntimeError, match="cannot broadcast"):
        a + tp.empty(4, device="meta")
    with pytest.raises(NotImplementedError, match="meta"):
        a.tolist()


def test_mixing_devices_raises():
    with pytest.raises(RuntimeError, match="same device"):
        tp.ones(2) + tp.ones(2, device="meta")


def test_cuda_unavailable_is_explained():
    if tp.cuda.is_available():
        pytest.skip("CUDA is available here; this test covers machines without it")
    assert (
        "tensorplay-core[cuda]" in tp.cuda.unavailable_reason()
        or "CUDA" in tp.cuda.unavailable_reason()
    )
    with pytest.raises(RuntimeError, match=r"tensorplay-core\[cuda\]"):
        tp.ones(2, device="cuda")


def test_ops_run_on_every_device(device):
    x = tp.arange(6.0, device=device).reshape(2, 3)
    y = (x * 2 + 1).exp().sum(dim=1)
    assert y.device.type == device
    np.testing.assert_allclose(
        to_numpy(y), np.exp(np.arange(6.0).reshape(2, 3) * 2 + 1).sum(1), rtol=1e-5
    )
    assert (x @ x.t()).tolist() == [[5.0, 14.0], [14.0, 50.0]]


def test_cuda_round_trip_and_stream(device):
    if device != "cuda":
        pytest.skip("CUDA-only behaviour")
    x = tp.randn(4, 4)
    g = x.cuda()
    assert g.device == "cuda:0" and g.to("cpu").tolist() == x.tolist()
    assert g.data_ptr() != 0 and g.untyped_storage().device == g.device
    s = tp.cuda.current_stream()
    assert isinstance(s.cuda_stream, int)
    tp.cuda.synchronize()
    with pytest.raises(RuntimeError, match="same device"):
        x + tp.ones(4, 4, device="cuda")
    # a 0-d CPU tensor acts as a scalar next to CUDA tensors, as in torch
    assert (g + tp.tensor(1.0)).device == g.device


def test_cuda_storage_byte_view_is_made_on_demand_and_shares_memory(device):
    if device != "cuda":
        pytest.skip("CUDA-only behaviour")
    from tensorplay._storage import _BUF, CudaStorage

    for t in (tp.empty(3, 5, device="cuda"), tp.ones(7, device="cuda") * 2):  # new, adopted
        st = t.untyped_storage()
        assert type(st) is CudaStorage
        with pytest.raises(AttributeError):
            _BUF.__get__(st, CudaStorage)  # no byte view yet
        assert t.data_ptr() == st.data_ptr() == t._data.data.ptr
        view = st.bytes_view()  # made now, over the same memory
        assert view.dtype == np.uint8 and view.size == st.nbytes() == t.numel() * 4
        assert view.data.ptr == t.data_ptr() and _BUF.__get__(st, CudaStorage) is st._buf
        t.fill_(0.0)
        assert int(view.sum()) == 0
        t.fill_(1.0)
        assert int(view.sum()) == t.numel() * (0x80 + 0x3F)  # bytes of float32 1.0
    # views of such storages read the right memory without building the byte view
    g = tp.arange(12.0, device="cuda").reshape(3, 4)
    assert g[1:, ::2].tolist() == [[4.0, 6.0], [8.0, 10.0]]
    assert g.t().contiguous().cpu().tolist() == [
        [0.0, 4.0, 8.0],
        [1.0, 5.0, 9.0],
        [2.0, 6.0, 10.0],
        [3.0, 7.0, 11.0],
    ]
