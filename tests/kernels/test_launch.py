"""The launch glue on CPU: tpk.kernel launches a Triton kernel on TensorPlay tensors
through the interpreter, leaves inputs' version counters alone, refuses devices it
cannot run on with a clear error, and reports capabilities with reasons."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
import tensorplay.kernels as tpk
from tensorplay import library
from tensorplay.kernels._launch import next_power_of_2

pytestmark = pytest.mark.usefixtures("cpu_triton")


def _make_kernel():
    tpk.import_triton()
    import triton.language as tl

    def axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):  # noqa: N803
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        for _ in range(0, n, BLOCK * 1000):  # a runtime loop bound (NumPy 2 glue fix)
            x = x * alpha
        tl.store(out_ptr + offs, x + y, mask=mask)

    return tpk.kernel(axpy)


def test_kernel_runs_on_cpu_tensors_and_leaves_input_versions_alone():
    k = _make_kernel()
    assert isinstance(k, tpk.TritonKernel) and repr(k) == "<TritonKernel axpy>"
    x, y = tp.arange(10.0), tp.ones(10)
    out = tp.empty(10)
    versions = (x._version, y._version)
    k[(3,)](x, y, out, 10, 2.0, BLOCK=4)
    np.testing.assert_allclose(out.numpy(), np.arange(10.0) * 2 + 1)
    assert (x._version, y._version) == versions  # no in-place "copy back" of inputs


def test_kernel_reads_views_at_their_offset():
    k = _make_kernel()
    base = tp.arange(12.0)
    x = base[2:8]  # a view with a storage offset
    out = tp.empty(6)
    k[(1,)](x, tp.zeros(6), out, 6, 1.0, BLOCK=8)
    assert out.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def test_saved_inputs_survive_a_triton_op_under_autograd():
    k = library.wrap_triton(_make_kernel())

    @library.triton_op("tpk_test::axpy", mutates_args=())
    def axpy(x: tp.Tensor, y: tp.Tensor) -> tp.Tensor:
        out = tp.empty_like(x)
        k[(1,)](x, y, out, x.numel(), 3.0, BLOCK=16)
        return out

    axpy.register_fake(lambda x, y: x.new_empty(x.shape))
    axpy.register_autograd(
        lambda ctx, g: (g * 3.0 * ctx.saved_tensors[0] / ctx.saved_tensors[0], g),
        setup_context=lambda ctx, inputs, out: ctx.save_for_backward(inputs[0]),
    )
    x = tp.tensor([1.0, 2.0], requires_grad=True)
    y = tp.tensor([0.5, 0.5], requires_grad=True)
    z = axpy(x, y)
    axpy(x, y)  # a second launch reading x must not invalidate the first node's saved x
    z.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0] and y.grad.tolist() == [1.0, 1.0]


def test_launch_on_a_device_the_mode_cannot_run_names_it():
    k = _make_kernel()
    m = tp.empty(4, device="meta")
    with pytest.raises(RuntimeError, match="Triton kernel axpy: cannot launch on a meta tensor"):
        k[(1,)](m, m, m, 4, 1.0, BLOCK=4)


def test_capabilities_come_with_reasons():
    assert tpk.interpreting() and tpk.triton_unavailable_reason("cpu") is None
    assert "not 'meta'" in tpk.triton_unavailable_reason("meta")
    if not tp.cuda.is_available():
        assert "CUDA not available" in tpk.triton_unavailable_reason("cuda")
        assert tpk.tilelang_unavailable_reason() is not None


def test_pointer_and_block_helpers():
    p = tpk.Pointer(4096, tp.bfloat16)
    assert p.data_ptr() == 4096 and p.dtype is tp.bfloat16 and "0x1000" in repr(p)
    assert [next_power_of_2(n) for n in (0, 1, 2, 3, 1000, 1024)] == [1, 1, 2, 4, 1024, 1024]


def test_an_autotune_key_naming_no_parameter_is_refused_at_definition():
    from tensorplay.kernels import kernel

    def body(x_ptr, n, BLOCK):
        pass

    with pytest.raises(ValueError, match=r"key \['N'\] names no parameter.*x_ptr, n, BLOCK"):
        kernel(body, configs=[{"BLOCK": 64}], key=["N"])
    assert kernel(body, configs=[{"BLOCK": 64}], key=["n"]).__name__ == "body"
