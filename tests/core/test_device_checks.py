"""Index checks on the GPU run on the device (issue 16): gather, scatter and index_select
never read their index back to the host; a bad index raises at the next synchronisation,
naming the op, and scatter's "add" accumulates on the device. On the CPU the same calls
raise at once, with the same message."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import _device_checks

pytestmark = pytest.mark.cuda


@pytest.fixture
def cuda():
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    tp.cuda.synchronize()  # nothing left over from another test


BAD = [
    ("gather", lambda x, i: x.gather(0, i)),
    ("index_select", lambda x, i: x.index_select(0, i)),
    ("scatter", lambda x, i: x.scatter(0, i, tp.ones(2, device=x.device))),
    ("scatter", lambda x, i: x.scatter(0, i, tp.ones(2, device=x.device), reduce="add")),
]


@pytest.mark.parametrize(("name", "call"), BAD)
def test_a_bad_index_raises_at_the_next_sync_naming_the_op(cuda, name, call):
    x = tp.arange(4.0, device="cuda")
    call(x, tp.tensor([1, 7], device="cuda"))  # no host read here: the call returns
    msg = rf"{name}\(\): index 7 is out of bounds for dimension 0 with size 4 \(found on cuda"
    with pytest.raises(RuntimeError, match=msg):
        tp.cuda.synchronize()
    tp.cuda.synchronize()  # reported once: the record is cleared
    # the same message as the CPU's immediate check
    with pytest.raises(RuntimeError, match=rf"{name}\(\): index 7 is out of bounds"):
        call(tp.arange(4.0), tp.tensor([1, 7]))


@pytest.mark.parametrize("read", ["item", "tolist", "cpu", "numpy", "repr"])
def test_every_host_read_reports_a_pending_error(cuda, read):
    x = tp.arange(4.0, device="cuda")
    y = x.gather(0, tp.tensor([-1, 0], device="cuda"))
    with pytest.raises(RuntimeError, match=r"gather\(\): index -1 is out of bounds"):
        if read == "item":
            y[0].item()
        elif read == "repr":
            repr(y)
        elif read == "numpy":
            y.numpy(force=True)
        else:
            getattr(y, read)()
    assert x.gather(0, tp.tensor([3, 0], device="cuda")).tolist() == [3.0, 0.0]


def test_good_indices_give_torchs_values_on_the_device(cuda):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 6)).astype(np.float32)
    idx = rng.integers(0, 5, (7, 6))
    src = rng.standard_normal((7, 6)).astype(np.float32)
    x, i, s = (tp.tensor(v, device="cuda") for v in (a, idx, src))
    np.testing.assert_array_equal(x.gather(0, i).cpu().numpy(), np.take_along_axis(a, idx, 0))
    expected = a.copy()
    np.add.at(expected, (idx, np.arange(6)[None, :]), src)
    got = x.scatter(0, i, s, reduce="add").cpu().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    sel = x.index_select(1, tp.tensor([5, 0, 5], device="cuda")).cpu().numpy()
    np.testing.assert_array_equal(sel, a[:, [5, 0, 5]])


@pytest.mark.parametrize("dtype", ["float16", "float64", "int64", "int32", "int8", "complex64"])
def test_scatter_add_accumulates_repeated_indices_in_every_dtype(cuda, dtype):
    """float16/32/64 and 32/64-bit integers add with device atomics; int8 and complex go
    through the host; the values are the same."""
    dt = getattr(tp, dtype)
    idx = tp.tensor([0, 2, 2, 2, 1], device="cuda")
    src = tp.tensor([1, 2, 3, 4, 5], device="cuda").to(dt)
    out = tp.zeros(3, dtype=dt, device="cuda").scatter(0, idx, src, reduce="add")
    assert out.dtype is dt
    assert out.cpu().tolist() == tp.tensor([1, 5, 9]).to(dt).tolist()


def test_gather_backward_accumulates_on_the_device(cuda):
    x = tp.arange(4.0, device="cuda").requires_grad_()
    x.gather(0, tp.tensor([3, 3, 1], device="cuda")).sum().backward()
    assert x.grad.cpu().tolist() == [0.0, 1.0, 0.0, 2.0]
    y = tp.arange(4.0, device="cuda").requires_grad_()
    y[tp.tensor([0, 0, 2], device="cuda")].sum().backward()  # index_put(accumulate=True)
    assert y.grad.cpu().tolist() == [2.0, 0.0, 1.0, 0.0]


def test_a_training_step_with_gather_runs_under_stream_capture(cuda):
    """A hidden host read breaks CUDA stream capture; gather, its backward (scatter add)
    and the checks must not have one."""
    cp = pytest.importorskip("cupy")
    w = tp.randn(8, 4, device="cuda").requires_grad_()
    idx = tp.tensor([[1], [3], [0], [2], [1], [0], [3], [2]], device="cuda")

    def step():
        loss = -w.log_softmax(dim=1).gather(1, idx).mean()
        loss.backward()
        with tp.no_grad():
            w.sub_(0.1 * w.grad)
            w.grad = None

    for _ in range(3):  # warm-up: kernels compiled, the memory pool holds the blocks
        step()
    tp.cuda.synchronize()
    before = w.detach().clone()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        step()
        graph = stream.end_capture()
    graph.launch(stream)
    stream.synchronize()
    tp.cuda.synchronize()
    assert not np.allclose(w.detach().cpu().numpy(), before.cpu().numpy())
    assert not _device_checks._pending  # nothing bad recorded, and the record was read


def test_without_a_check_the_record_is_not_read(cuda):
    tp.cuda.synchronize()
    assert not _device_checks._pending
    (tp.ones(3, device="cuda") * 2).sum().item()
    assert not _device_checks._pending
