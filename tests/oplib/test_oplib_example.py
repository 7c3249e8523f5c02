"""The example library's operators (examples/oplib/ops.yaml) behave like the same operators
declared with custom_op: values (numpy and a custom_op/TensorPlay reference), gradients,
opcheck with every check, meta tensors, profiler, modes and overrides."""

from __future__ import annotations

import importlib.util
import math
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import library
from tensorplay.profiler import profile
from tensorplay.utils._python_dispatch import TensorPlayDispatchMode

_erf = np.vectorize(math.erf)


def gelu_np(z):
    return 0.5 * z * (1.0 + _erf(z / math.sqrt(2.0)))


def gelu_grad_np(z):
    return 0.5 * (1.0 + _erf(z / math.sqrt(2.0))) + z * np.exp(-0.5 * z * z) / math.sqrt(
        2 * math.pi
    )


@pytest.fixture(scope="module")
def ops(example):
    return tp.ops.oplib_example


@pytest.fixture(scope="module")
def reference():
    """fused_bias_gelu declared with custom_op from TensorPlay ops: the behavioural twin."""

    @library.custom_op("oplib_ref::fused_bias_gelu", mutates_args=())
    def ref(x: tp.Tensor, b: tp.Tensor, *, alpha: float = 1.0) -> tp.Tensor:
        return tp.mul(tp.gelu(tp.add(x, b)), alpha)

    ref.register_fake(lambda x, b, *, alpha=1.0: tp.empty(tp.broadcast_shapes(x.shape, b.shape)))

    def backward(ctx, grad):
        z = ctx.saved_tensors[0]
        d = (
            0.5 * (1.0 + tp.erf(z * 0.7071067811865476))
            + z * tp.exp(-0.5 * z * z) * 0.3989422804014327
        )
        return grad * ctx.alpha * d, grad * ctx.alpha * d, None

    def setup(ctx, inputs, output):
        x, b, alpha = inputs
        ctx.save_for_backward(tp.add(x, b))
        ctx.alpha = alpha

    ref.register_autograd(backward, setup_context=setup)
    return ref


def test_fused_bias_gelu_values_match_numpy_and_the_custom_op(ops, reference):
    x, b = tp.randn(5, 7), tp.randn(7)
    z = x.numpy() + b.numpy()
    y = ops.fused_bias_gelu(x, b, alpha=1.5)
    assert y.shape == (5, 7) and y.dtype is tp.float32
    np.testing.assert_allclose(y.numpy(), 1.5 * gelu_np(z), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), reference(x, b, alpha=1.5).numpy(), rtol=1e-5, atol=1e-6)
    assert ops.fused_bias_gelu(x, b).allclose(reference(x, b))  # alpha's default: 1.0


def test_float64_runs_the_double_kernel(ops):
    x, b = tp.randn(3, 4, dtype=tp.float64), tp.randn(4, dtype=tp.float64)
    y = ops.fused_bias_gelu(x, b)
    assert y.dtype is tp.float64
    np.testing.assert_allclose(y.numpy(), gelu_np(x.numpy() + b.numpy()), rtol=1e-12)


def test_gradients_match_numpy_and_the_custom_op(ops, reference):
    x0, b0 = tp.randn(4, 6), tp.randn(6)
    x, b = x0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
    g = tp.randn(4, 6)
    ops.fused_bias_gelu(x, b, alpha=2.0).backward(g)
    d = g.numpy() * 2.0 * gelu_grad_np(x0.numpy() + b0.numpy())
    np.testing.assert_allclose(x.grad.numpy(), d, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), d.sum(0), rtol=1e-5, atol=1e-5)  # broadcast: summed
    xr, br = x0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
    reference(xr, br, alpha=2.0).backward(g)
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), br.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_second_derivative_through_the_backward_op(ops):
    x = tp.randn(5, dtype=tp.float64, requires_grad=True)
    b = tp.zeros(5, dtype=tp.float64)
    (gx,) = tp.autograd.grad(ops.fused_bias_gelu(x, b).sum(), (x,), create_graph=True)
    (ggx,) = tp.autograd.grad(gx.sum(), (x,))
    z = x.detach().numpy()
    phi = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(ggx.numpy(), phi * (2.0 - z * z), rtol=1e-10)


@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, False), (-1, True), (1, True)])
def test_sum_of_squares_values_and_gradient(ops, dim, keepdim):
    x0 = tp.randn(3, 4, 5)
    x = x0.clone().requires_grad_(True)
    y = ops.sum_of_squares(x, dim, keepdim=keepdim)
    want = (x0.numpy() ** 2).sum(axis=dim, keepdims=keepdim)
    assert tuple(y.shape) == want.shape
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-5)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0.numpy(), rtol=1e-6)
    assert y.allclose(tp.sum(x0 * x0, dim=dim, keepdim=keepdim))


def test_scale_is_in_place_and_bumps_the_version(ops):
    x = tp.tensor([1.0, -2.0, 3.0])
    version = x._version
    assert ops.scale_(x, 2.5) is None
    assert x.tolist() == [2.5, -5.0, 7.5]
    assert x._version > version


def test_non_contiguous_inputs_are_read_through_a_copy(ops):
    x = tp.randn(6, 4).t()  # (4, 6), transposed strides
    b = tp.randn(6)
    y = ops.fused_bias_gelu(x, b)
    np.testing.assert_allclose(y.numpy(), gelu_np(x.numpy() + b.numpy()), rtol=1e-5, atol=1e-6)


def test_a_non_contiguous_argument_written_in_place_is_refused(ops):
    x = tp.randn(4, 6).t()
    with pytest.raises(RuntimeError, match="'x' is written in place .* not contiguous"):
        ops.scale_(x, 2.0)


def test_the_kernel_checks_its_dtypes(ops):
    with pytest.raises(TypeError, match="fused_bias_gelu: expected float32 or float64"):
        ops.fused_bias_gelu(tp.ones(3, dtype=tp.int64), tp.ones(3, dtype=tp.int64))


@pytest.mark.parametrize(
    "name,args,kwargs",
    [
        ("fused_bias_gelu", lambda: (tp.randn(3, 4), tp.randn(4)), {"alpha": 0.7}),
        (
            "fused_bias_gelu_backward",
            lambda: (tp.randn(3, 4), tp.randn(3, 4), tp.randn(4), 0.5),
            {},
        ),
        ("sum_of_squares", lambda: (tp.randn(3, 4), 1), {"keepdim": True}),
        ("sum_of_squares", lambda: (tp.randn(2, 3, 4), -2), {}),
        ("scale_", lambda: (tp.randn(3, 4), 2.0), {}),
    ],
)
def test_opcheck_passes_every_check(ops, name, args, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert library.opcheck(getattr(ops, name), args(), kwargs, test_utils="all") == {}
    # what cannot run is reported, not passed: test_vmap (an op library has no vmap rule)
    # and, without tensorplay-compile (this component's own CI), test_aot_dispatch_dynamic
    may_skip = {"test_vmap"}
    if importlib.util.find_spec("tensorplay.graph") is None:
        may_skip.add("test_aot_dispatch_dynamic")
    skipped = {
        str(w.message).split(": ")[1].split()[0] for w in caught if "skipped" in str(w.message)
    }
    assert skipped <= may_skip, skipped


def test_meta_tensors_go_through_the_shape_rules(ops):
    x = tp.empty(2, 3, 4, device="meta")
    y = ops.fused_bias_gelu(x, tp.empty(4, device="meta"))
    assert (y.device.type, tuple(y.shape)) == ("meta", (2, 3, 4))
    s = ops.sum_of_squares(x, 1, keepdim=True)
    assert (s.device.type, tuple(s.shape)) == ("meta", (2, 1, 4))
    with pytest.raises(IndexError, match="dim 3 is out of range"):
        ops.sum_of_squares(x, 3)


def test_profiler_spans_and_dispatch_modes_name_the_operator(ops):
    class Log(TensorPlayDispatchMode):
        def __init__(self):
            self.names = []

        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.name)
            return func(*args, **(kwargs or {}))

    x, b = tp.randn(2, 3), tp.randn(3)
    with profile() as prof, Log() as log:
        ops.fused_bias_gelu(x, b)
    assert log.names == ["oplib_example::fused_bias_gelu"]
    assert "oplib_example::fused_bias_gelu" in {e.name for e in prof.events()}


def test_overrides_see_the_operator(ops):
    seen = []

    class Wrapped:
        def __init__(self, t):
            self.t = t

        @classmethod
        def __tensorplay_function__(cls, func, types, args=(), kwargs=None):
            seen.append(func)
            return "intercepted"

    assert ops.fused_bias_gelu(Wrapped(tp.ones(2)), tp.ones(2)) == "intercepted"
    assert seen == [ops.fused_bias_gelu]


def test_the_operator_is_the_library_entry(example, ops):
    assert example.ops["sum_of_squares"] is ops.sum_of_squares
    assert ops.fused_bias_gelu.schema == "(Tensor x, Tensor b, *, float alpha=1.0) -> Tensor"
    assert ops.scale_.mutates_args == ("x",)
    # cuda where the build found nvcc (recorded, with the reason when not)
    assert example.devices["fused_bias_gelu"] in (["cpu"], ["cpu", "cuda"])
    assert example.devices["sum_of_squares"] == ["cpu"]
    assert "gelu" in ops.fused_bias_gelu.__doc__


def test_a_device_without_a_built_kernel_says_why(example, ops):
    if tp.cuda.is_available():
        pytest.skip("CUDA is available: this checks the message on machines without it")
    cuda_kernel = library.get_kernel(ops.fused_bias_gelu, "cuda")
    with pytest.raises(NotImplementedError, match="has no cuda kernel in this build: .*Rebuild"):
        cuda_kernel(tp.ones(2), tp.ones(2))
    missing = library.get_kernel(ops.sum_of_squares, "cuda")
    with pytest.raises(NotImplementedError, match=r"no kernel for device 'cuda'.*ops.yaml:\d+"):
        missing(tp.ones(2), 0)


def test_cuda_kernels_run_on_a_gpu(example, ops):
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available ({tp.cuda.unavailable_reason()})")
    if "cuda" not in example.devices["fused_bias_gelu"]:
        pytest.skip("the example library was built without its CUDA kernels (no nvcc)")
    x, b = tp.randn(64, 33), tp.randn(33)
    y = ops.fused_bias_gelu(x.cuda(), b.cuda(), alpha=0.5)
    assert y.device.type == "cuda"
    np.testing.assert_allclose(
        y.cpu().numpy(), ops.fused_bias_gelu(x, b, alpha=0.5).numpy(), rtol=1e-5, atol=1e-6
    )
    # backward through the CUDA kernels of the op and of its derivative
    grads = []
    for dev in ("cpu", "cuda"):
        xd = x.detach().to(dev).requires_grad_()
        bd = b.detach().to(dev).requires_grad_()
        ops.fused_bias_gelu(xd, bd, alpha=0.5).sum().backward()
        assert xd.grad.device.type == dev and bd.grad.shape == (33,)
        grads.append((xd.grad.cpu().numpy(), bd.grad.cpu().numpy()))
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    args = (tp.randn(3, 4, dtype=tp.float64).cuda(), tp.randn(4, dtype=tp.float64).cuda())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # test_vmap is reported as a skip (no vmap rule)
        assert library.opcheck(ops.fused_bias_gelu, args, {"alpha": 0.7}, test_utils="all") == {}
