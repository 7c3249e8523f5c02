"""``tp.autocast``: per-op precision (PyTorch's lists), state, nesting, threads, autograd."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from tensor_helpers import to_numpy

import tensorplay as tp
from tensorplay import _dispatch


def _mats(dtype=tp.float32, requires_grad=False):
    tp.manual_seed(0)
    a = tp.randn(4, 5, dtype=dtype, requires_grad=requires_grad)
    b = tp.randn(5, 3, dtype=dtype, requires_grad=requires_grad)
    return a, b


def test_matmul_runs_in_autocast_dtype():
    a, b = _mats()
    ref = to_numpy(a @ b)
    with tp.autocast("cpu", dtype=tp.bfloat16):
        for r in (a @ b, tp.matmul(a, b), tp.mm(a, b), tp.einsum("ij,jk->ik", a, b)):
            assert r.dtype is tp.bfloat16
            np.testing.assert_allclose(to_numpy(r.float()), ref, rtol=3e-2, atol=5e-2)
        assert tp.bmm(a[None], b[None]).dtype is tp.bfloat16
    with tp.autocast("cpu", dtype=tp.float16):
        assert (a @ b).dtype is tp.float16


def test_fp32_ops_stay_float32():
    a, _ = _mats(tp.bfloat16)
    with tp.autocast("cpu"):
        assert a.sum().dtype is tp.float32
        assert a.softmax(1).dtype is tp.float32
        assert a.log_softmax(1).dtype is tp.float32
        assert a.exp().dtype is tp.float32
        assert a.cumsum(0).dtype is tp.float32
        assert a.float().sum().dtype is tp.float32
        # an explicit dtype= is respected
        assert a.sum(dtype=tp.bfloat16).dtype is tp.bfloat16
        np.testing.assert_allclose(
            to_numpy(a.sum()), to_numpy(a.float().sum()), rtol=1e-5, atol=1e-5
        )


def test_other_ops_unchanged_and_ineligible_dtypes():
    a, b = _mats()
    h = a.to(tp.bfloat16)
    with tp.autocast("cpu"):
        assert (a + a).dtype is tp.float32
        assert (h + h).dtype is tp.bfloat16
        assert (h * 2).dtype is tp.bfloat16
        assert tp.matmul(a.double(), b.double()).dtype is tp.float64  # float64 not eligible
        i = tp.ones(2, 2, dtype=tp.int64)
        assert (i @ i).dtype is tp.int64
        assert i.sum().dtype is tp.int64
        # promote: the widest floating input
        assert tp.cat([a, h]).dtype is tp.float32
        assert tp.stack([h, h]).dtype is tp.bfloat16


def test_inplace_and_out_not_autocast():
    a, b = _mats()
    with tp.autocast("cpu"):
        out = tp.empty(4, 3)
        assert tp.matmul(a, b, out=out) is out and out.dtype is tp.float32
        x = a.to(tp.bfloat16)
        x.exp_()
        assert x.dtype is tp.bfloat16


def test_enabled_false_and_nesting_restore():
    a, b = _mats()
    assert not tp.is_autocast_enabled("cpu")
    with tp.autocast("cpu", enabled=False):
        assert not tp.is_autocast_enabled("cpu")
        assert (a @ b).dtype is tp.float32
    with tp.autocast("cpu"):
        assert tp.is_autocast_enabled("cpu")
        assert tp.get_autocast_dtype("cpu") is tp.bfloat16
        with tp.autocast("cpu", enabled=False):
            assert not tp.is_autocast_enabled("cpu")
            assert (a @ b).dtype is tp.float32
        assert (a @ b).dtype is tp.bfloat16
        with tp.autocast("cpu", dtype=tp.float16):
            assert (a @ b).dtype is tp.float16
        assert tp.get_autocast_dtype("cpu") is tp.bfloat16
        assert (a @ b).dtype is tp.bfloat16
    assert not tp.is_autocast_enabled("cpu")
    assert (a @ b).dtype is tp.float32
    # the layer is gone and the fast path is back
    assert tp.amp._layer not in _dispatch.layers


def test_exception_restores_state():
    with pytest.raises(KeyError):
        with tp.autocast("cpu"):
            raise KeyError("x")
    assert not tp.is_autocast_enabled("cpu")


def test_decorator():
    a, b = _mats()

    @tp.autocast("cpu")
    def f(x, y):
        assert tp.is_autocast_enabled("cpu")
        return x @ y

    assert f(a, b).dtype is tp.bfloat16
    assert f.__name__ == "f"
    assert not tp.is_autocast_enabled("cpu")


def test_is_autocast_enabled_per_device():
    assert tp.is_autocast_enabled() is False  # no argument: "cuda", like torch
    with tp.autocast("cpu"):
        assert tp.is_autocast_enabled("cpu")
        assert not tp.is_autocast_enabled("cuda")
        assert not tp.is_autocast_enabled()
    assert tp.get_autocast_dtype("cuda") is tp.float16
    assert tp.amp.autocast is tp.autocast


def test_cuda_autocast_does_not_touch_cpu_tensors():
    a, b = _mats()
    with tp.autocast("cuda"):
        assert tp.is_autocast_enabled()
        assert (a @ b).dtype is tp.float32


def test_thread_local():
    a, b = _mats()
    seen = {}

    def worker():
        seen["enabled"] = tp.is_autocast_enabled("cpu")
        seen["dtype"] = (a @ b).dtype

    with tp.autocast("cpu"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert (a @ b).dtype is tp.bfloat16
    assert seen == {"enabled": False, "dtype": tp.float32}


def test_validation():
    with pytest.raises(ValueError, match=r"int32.*bfloat16"):
        tp.autocast("cpu", dtype=tp.int32)
    with pytest.raises(ValueError, match="device_type"):
        tp.autocast("tpu")
    with pytest.raises(ValueError, match="device_type"):
        tp.is_autocast_enabled("tpu")


def test_gradients_flow_to_float32_leaves():
    a, b = _mats(requires_grad=True)
    with tp.autocast("cpu"):
        c = a @ b
        assert c.dtype is tp.bfloat16
        loss = c.sum()
        assert loss.dtype is tp.float32
    loss.backward()
    assert a.grad.dtype is tp.float32 and b.grad.dtype is tp.float32
    ones = np.ones((4, 3), np.float32)
    np.testing.assert_allclose(to_numpy(a.grad), ones @ to_numpy(b).T, rtol=3e-2, atol=5e-2)
    np.testing.assert_allclose(to_numpy(b.grad), to_numpy(a).T @ ones, rtol=3e-2, atol=5e-2)


def test_matches_torch_on_shared_ops():
    torch = pytest.importorskip("torch")
    a, b = _mats()
    ta, tb = torch.from_numpy(to_numpy(a)), torch.from_numpy(to_numpy(b))
    h, th = a.to(tp.bfloat16), ta.bfloat16()
    cases = {
        "matmul": (lambda: a @ b, lambda: ta @ tb),
        "mm": (lambda: tp.mm(a, b), lambda: torch.mm(ta, tb)),
        "bmm": (lambda: tp.bmm(a[None], b[None]), lambda: torch.bmm(ta[None], tb[None])),
        "einsum": (
            lambda: tp.einsum("ij,jk->ik", a, b),
            lambda: torch.einsum("ij,jk->ik", ta, tb),
        ),
        "prod": (lambda: h.prod(), lambda: th.prod()),
        "add": (lambda: a + h, lambda: ta + th),
        "cat": (lambda: tp.cat([a, h]), lambda: torch.cat([ta, th])),
        "dot": (lambda: tp.dot(a[0], a[0]), lambda: torch.dot(ta[0], ta[0])),
    }
    for dt, tdt in ((tp.bfloat16, torch.bfloat16), (tp.float16, torch.float16)):
        for name, (ours, theirs) in cases.items():
            with tp.autocast("cpu", dtype=dt):
                got = ours().dtype.name
            with torch.autocast("cpu", dtype=tdt):
                want = str(theirs().dtype).removeprefix("torch.")
            assert got == want, name
