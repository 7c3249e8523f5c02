"""gradcheck / gradgradcheck: PyTorch's semantics, checks and messages."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd import Function, GradcheckError, gradcheck, gradgradcheck


def _rand(*shape, dtype=tp.float64, requires_grad=True, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if dtype is tp.complex128:
        a = a + 1j * rng.standard_normal(shape)
    return tp.tensor(a, dtype=dtype, requires_grad=requires_grad)


# ---- custom Functions used as known-good / known-bad derivatives -------------------------------


class Exp(Function):  # the seed's combined style
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * x.exp()


class Mul(Function):  # the seed's separate style
    @staticmethod
    def forward(a, b):
        return a * b

    @staticmethod
    def setup_context(ctx, inputs, output):
        a, b = inputs
        ctx.save_for_backward(a, b)

    @staticmethod
    def backward(ctx, grad_out):
        a, b = ctx.saved_tensors
        return grad_out * b, grad_out * a


class WrongExp(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * x.exp() * 1.1


class FlatExp(Function):
    """Correct first derivative, but written on detached values: its second derivative is wrong."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * x.detach().exp()


# ---- passing checks ----------------------------------------------------------------------------


def test_seed_examples_pass():
    x = tp.randn(5, dtype=tp.float64, requires_grad=True)
    assert gradcheck(Exp.apply, (x,))
    a = tp.randn(5, dtype=tp.float64, requires_grad=True)
    b = tp.randn(5, dtype=tp.float64, requires_grad=True)
    assert gradcheck(Mul.apply, (a, b))


def test_builtin_ops_pass():
    a, b = _rand(3, 4, seed=1), _rand(3, 4, seed=2)
    assert gradcheck(lambda x, y: (x * y).sin() + x.exp() / (1 + y * y), (a, b))
    assert gradcheck(lambda x: x.tanh().sum(dim=1), (a,))


def test_tuple_outputs_and_non_tensor_inputs_pass_through():
    a = _rand(3, seed=3)
    c = _rand(3, requires_grad=False, seed=4)

    def f(x, k, y, name):
        assert k == 2.5 and name == "ok"
        return x * k * y, (x * x).sum()

    assert gradcheck(f, (a, 2.5, c, "ok"))


def test_single_tensor_input_not_in_a_tuple():
    assert gradcheck(lambda x: x * x, _rand(4, seed=5))


def test_non_contiguous_input():
    a = _rand(3, 4, seed=6).detach().t().requires_grad_()
    assert not a.is_contiguous()
    assert gradcheck(lambda x: (x * x).sum(dim=0), (a,))


def test_no_differentiable_outputs_is_true():
    a = _rand(4, seed=7)
    assert gradcheck(lambda x: x.argmax(), (a,))


def test_fast_mode_passes():
    a, b = _rand(4, seed=8), _rand(4, seed=9)
    assert gradcheck(lambda x, y: ((x * y).sin(), x.exp()), (a, b), fast_mode=True)


def test_check_batched_grad_passes():
    a, b = _rand(2, 3, seed=10), _rand(2, 3, seed=11)
    assert gradcheck(lambda x, y: (x * y).cos(), (a, b), check_batched_grad=True)


def test_complex_input_and_output():
    z = _rand(3, dtype=tp.complex128, seed=12)
    assert gradcheck(lambda x: x * x, (z,))
    assert gradcheck(lambda x: x * x, (z,), fast_mode=True)


def test_complex_input_real_output_known_convention():
    class Abs(Function):  # |z|: PyTorch's gradient convention gives z / |z| (times grad)
        @staticmethod
        def forward(ctx, z):
            ctx.save_for_backward(z)
            return z.abs()

        @staticmethod
        def backward(ctx, g):
            (z,) = ctx.saved_tensors
            return g * z / z.abs()

    class WrongAbs(Abs):
        @staticmethod
        def backward(ctx, g):
            (z,) = ctx.saved_tensors
            return g * z.conj() / z.abs()

    z = _rand(3, dtype=tp.complex128, seed=13)
    assert gradcheck(Abs.apply, (z,))
    assert gradcheck(Abs.apply, (z,), fast_mode=True)
    with pytest.raises(GradcheckError):
        gradcheck(WrongAbs.apply, (z,))
    with pytest.raises(GradcheckError):
        gradcheck(WrongAbs.apply, (z,), fast_mode=True)


def test_gradgradcheck_passes():
    a, b = _rand(3, seed=14), _rand(3, seed=15)
    assert gradgradcheck(lambda x, y: (x * y).sin() * x, (a, b))
    assert gradgradcheck(Exp.apply, (a,))
    assert gradgradcheck(lambda x, y: (x * y).sin(), (a, b), fast_mode=True)


def test_gradgradcheck_with_explicit_grad_outputs():
    a = _rand(3, seed=16)
    go = _rand(3, seed=17)
    assert gradgradcheck(lambda x: x * x * x, (a,), (go,))


# ---- failing checks ----------------------------------------------------------------------------


def test_wrong_backward_raises_with_jacobians():
    x = _rand(3, seed=18)
    with pytest.raises(GradcheckError) as info:
        gradcheck(WrongExp.apply, (x,))
    msg = str(info.value)
    assert "Jacobian mismatch for output 0 with respect to input 0" in msg
    assert "numerical:tensor(" in msg and "analytical:tensor(" in msg
    assert isinstance(info.value, RuntimeError)


def test_mismatch_names_the_right_output_and_input():
    class SecondWrong(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b, a + b

        @staticmethod
        def backward(ctx, g1, g2):
            a, b = ctx.saved_tensors
            return g1 * b + g2, g1 * a + 2 * g2  # d(a+b)/db is 1, not 2

    a, b = _rand(2, seed=19), _rand(2, seed=20)
    with pytest.raises(GradcheckError, match="for output 1 with respect to input 1"):
        gradcheck(SecondWrong.apply, (a, b))


def test_raise_exception_false_returns_false():
    assert gradcheck(WrongExp.apply, (_rand(3, seed=21),), raise_exception=False) is False


def test_fast_mode_failure_recomputes_slow_jacobians():
    with pytest.raises(GradcheckError) as info:
        gradcheck(WrongExp.apply, (_rand(3, seed=22),), fast_mode=True)
    msg = str(info.value)
    assert "Jacobian mismatch for output 0 with respect to input 0" in msg
    assert "in fast mode" in msg and "The max per-element difference (slow mode)" in msg


def test_gradgradcheck_catches_wrong_second_derivative():
    x = _rand(3, seed=23)
    assert gradcheck(FlatExp.apply, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(FlatExp.apply, (x,))
    assert gradgradcheck(FlatExp.apply, (x,), raise_exception=False) is False


def test_backward_not_multiplied_by_grad_output():
    class IgnoresGrad(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return tp.ones_like(x)  # right only when grad_output is 1

    with pytest.raises(GradcheckError, match="backward not multiplied by grad_output"):
        gradcheck(IgnoresGrad.apply, (_rand(3, seed=24),))


def test_nondeterministic_backward_and_nondet_tol():
    rng = np.random.default_rng(0)

    class Noisy(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * (2 + 1e-9 * float(rng.standard_normal()))

    x = _rand(3, seed=25)
    with pytest.raises(GradcheckError, match="Backward is not reentrant"):
        gradcheck(Noisy.apply, (x,))
    assert gradcheck(Noisy.apply, (x,), nondet_tol=1e-6)


def test_undefined_output_grads_must_be_handled():
    class Fragile(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2  # fails when the gradient is undefined (None)

    class Robust(Fragile):
        @staticmethod
        def backward(ctx, g):
            return None if g is None else g * 2

    class Materialized(Function):  # the default: None arrives as zeros
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = _rand(3, seed=26)
    with pytest.raises(GradcheckError, match="handle undefined output grads"):
        gradcheck(Fragile.apply, (x,))
    assert gradcheck(Fragile.apply, (x,), check_undefined_grad=False)
    assert gradcheck(Robust.apply, (x,))
    assert gradcheck(Materialized.apply, (x,))


def test_undefined_grad_must_give_zero_input_grads():
    class NotZero(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return tp.ones_like(x) if g is None else g * 2

    with pytest.raises(GradcheckError, match="undefined or zero"):
        gradcheck(NotZero.apply, (_rand(3, seed=35),))


def test_multi_output_builtin_passes_undefined_check():
    x = _rand(2, 3, seed=36)
    assert gradcheck(lambda t: t.max(dim=1)[0], (x,))
    assert gradcheck(lambda t: ((t * 2).sin(), (t * t).sum()), (x,))


def test_check_grad_dtypes():
    class Float32Grad(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = _rand(3, seed=27)
    assert gradcheck(Float32Grad.apply, (x,), check_grad_dtypes=True)


# ---- forward mode ------------------------------------------------------------------------------


def test_check_forward_ad_builtin_ops():
    a, b = _rand(3, seed=28), _rand(3, seed=29)
    assert gradcheck(lambda x, y: ((x * y).sin(), x.exp()), (a, b), check_forward_ad=True)
    assert gradcheck(
        lambda x, y: (x * y).sin(), (a, b), check_forward_ad=True, check_backward_ad=False
    )
    assert gradcheck(
        lambda x, y: (x * y).sin(),
        (a, b),
        check_forward_ad=True,
        check_backward_ad=False,
        fast_mode=True,
    )


def test_check_forward_ad_catches_a_wrong_jvp():
    class BadJvp(Exp):
        @staticmethod
        def jvp(ctx, t):
            return t * 2

    x = _rand(3, seed=30)
    assert gradcheck(BadJvp.apply, (x,))  # reverse mode alone is fine
    with pytest.raises(GradcheckError, match="computed with forward mode mismatch for output 0"):
        gradcheck(BadJvp.apply, (x,), check_forward_ad=True)


# ---- input validation --------------------------------------------------------------------------


def test_no_input_requires_grad_is_value_error():
    x = _rand(3, requires_grad=False)
    with pytest.raises(ValueError, match="gradcheck expects at least one input tensor to require"):
        gradcheck(lambda t: t * 2, (x,))


def test_stride_zero_input_is_runtime_error():
    a = _rand(3, seed=31)
    b = _rand(1, seed=32).expand(3)
    assert b.stride() == (0,)
    with pytest.raises(RuntimeError, match="The 1th input has a dimension with stride 0"):
        gradcheck(lambda x, y: x * y, (a, b))


def test_single_precision_input_warns():
    x = _rand(3, dtype=tp.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gradcheck(lambda t: t * 2, (x,), eps=1e-3, atol=1e-2, rtol=1e-2)
    assert any(
        issubclass(w.category, UserWarning) and "not a double precision" in str(w.message)
        for w in caught
    )


def test_inputs_are_left_unchanged():
    x = _rand(2, 3, seed=33)
    before = x.detach().numpy().copy()
    version = x._version
    gradcheck(lambda t: (t * t).sum(), (x,))
    np.testing.assert_array_equal(x.detach().numpy(), before)
    assert x._version == version
    assert x.grad is None  # gradcheck uses autograd.grad, never .grad


# ---- names -------------------------------------------------------------------------------------


def test_import_paths():
    import tensorplay.autograd
    from tensorplay.autograd.gradcheck import gradcheck as gc2

    assert gc2 is gradcheck is tp.autograd.gradcheck
    assert tensorplay.autograd.gradcheck.gradcheck is gradcheck  # the docs' spelling
    assert tp.autograd.gradgradcheck is gradgradcheck
    assert issubclass(tp.autograd.GradcheckError, RuntimeError)
    for name in ("gradcheck", "gradgradcheck", "GradcheckError"):
        assert name in tp.autograd.__all__


def test_matches_torch_verdicts():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(34)
    an, bn = rng.standard_normal(4), rng.standard_normal(4)

    def f(lib):
        return lambda x, y: (x * y).tanh() * x.exp()

    a = tp.tensor(an, requires_grad=True)
    b = tp.tensor(bn, requires_grad=True)
    ta = torch.tensor(an, requires_grad=True)
    tb = torch.tensor(bn, requires_grad=True)
    assert gradcheck(f(tp), (a, b)) == torch.autograd.gradcheck(f(torch), (ta, tb))
    assert gradgradcheck(f(tp), (a, b)) == torch.autograd.gradgradcheck(f(torch), (ta, tb))


def test_importing_the_submodule_keeps_the_function():
    # `import tensorplay.autograd.gradcheck` first (fresh process) must not rebind the name
    import subprocess
    import sys

    code = (
        "import tensorplay.autograd.gradcheck, tensorplay as tp;"
        "print(callable(tp.autograd.gradcheck), type(tp.autograd.gradcheck).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "function"]
