"""The library examples of the seeds (shared/seeds/*.md), verbatim, and checks of what the
seed text promises about them.

The snippets define operators under the seeds' own names (``mylib::square_op``, ...),
which are process-wide: ``test_seeds.py`` runs this module in a subprocess so that the
test session's registry stays free of them.
"""

# ruff: noqa: I001 - the seed snippets keep their own import lines verbatim
from __future__ import annotations

import numpy as np

import tensorplay.library  # library-api.md spells it tensorplay.library.custom_op

# ---- extending.md, "Adding new operators" (verbatim) ---------------------------------------
import tensorplay as tp
from tensorplay.library import custom_op, register_fake, register_autograd


@custom_op("mylib::square_op", mutates_args=())
def square_op(x: tp.Tensor) -> tp.Tensor:
    return x * x


register_fake("mylib::square_op", lambda x: x.new_empty(x.shape))


def square_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return 2 * x * grad


register_autograd(
    "mylib::square_op",
    square_backward,
    setup_context=lambda ctx, inputs, output: ctx.save_for_backward(*inputs),
)


# ---- library-api.md, custom_op example (verbatim) -----------------------------------------
@tensorplay.library.custom_op("mylib::weighted_sum", mutates_args=())
def weighted_sum(x, weight):
    return (x * weight).sum()


# Optional extra kernels per device:
@weighted_sum.register_kernel("cuda")
def _(x, weight): ...


# ---- custom-op-path.md, the decorator form (verbatim) -------------------------------------
from tensorplay import library  # noqa: E402


@library.custom_op("demo::scaled", mutates_args=())
def scaled(x):
    return tp.mul(x, 2.0)


@scaled.register_autograd
def backward(ctx, grad_out):
    return (tp.mul(grad_out, 2.0),)


# ---- the checks (run by test_seeds.py) ----------------------------------------------------


def check_square_op_backpropagates_exactly_2x():
    values = np.array([-1.5, 0.0, 2.0, 3.25], dtype=np.float32)
    x = tp.tensor(values, requires_grad=True)
    y = square_op(x)
    np.testing.assert_array_equal(y.detach().numpy(), values * values)
    y.backward(tp.ones_like(y))
    np.testing.assert_array_equal(x.grad.numpy(), 2 * values)


def check_square_op_fake_kernel_propagates_shapes_on_meta():
    out = square_op(tp.empty(4, 5, device="meta"))
    assert out.device.type == "meta" and out.shape == (4, 5) and out.dtype == tp.float32


def check_square_op_is_registered_and_passes_opcheck():
    assert tp.ops.mylib.square_op is square_op
    assert library.opcheck(square_op, (tp.randn(3, 2),), test_utils="all") == {}


def check_weighted_sum_body_is_the_default_kernel():
    x, w = tp.tensor([1.0, 2.0, 3.0]), tp.tensor([0.5, 0.25, 2.0])
    assert weighted_sum(x, w).item() == 0.5 + 0.5 + 6.0
    # the extra "cuda" kernel occupies its own slot; CPU calls still run the body
    assert library.get_kernel(weighted_sum, "cuda") is _
    assert library.get_kernel(weighted_sum, "default") is weighted_sum.__wrapped__


def check_weighted_sum_without_a_formula_raises_at_backward():
    # NOTE: library-api.md (opcheck, test_autograd_registration) still says a missing
    # formula is legal because kernels compose implicitly; since issue 13 an op without
    # register_autograd is not differentiated through its body (as in PyTorch)
    x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = tp.tensor([0.5, 0.25, 2.0], requires_grad=True)
    y = weighted_sum(x, w)
    assert y.requires_grad and y.item() == 0.5 + 0.5 + 6.0
    try:
        y.backward()
    except RuntimeError as e:
        assert "Autograd has not been implemented for operator mylib::weighted_sum" in str(e)
    else:
        raise AssertionError("backward through an op without a formula must raise")
    assert x.grad is None and w.grad is None


def check_demo_scaled_uses_its_registered_backward():
    x = tp.tensor([1.0, -2.0], requires_grad=True)
    y = scaled(x)
    assert y.tolist() == [2.0, -4.0]
    assert y.grad_fn.name() == "demo::scaledBackward"
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def check_register_autograd_without_setup_context_has_an_empty_context():
    seen = {}

    @library.custom_op("seedtest::empty_ctx", mutates_args=())
    def op(x):
        return x * 3

    def bwd(ctx, grad):
        seen["saved"] = ctx.saved_tensors
        return grad * 3

    library.register_autograd("seedtest::empty_ctx", bwd)
    x = tp.ones(2, requires_grad=True)
    op(x).sum().backward()
    assert seen["saved"] == () and x.grad.tolist() == [3.0, 3.0]


def main() -> None:
    """Run every check; print one JSON object ``{check: "ok" | traceback}``."""
    import json
    import traceback

    results = {}
    for name, fn in sorted(globals().items()):
        if name.startswith("check_"):
            try:
                fn()
                results[name] = "ok"
            except BaseException:  # noqa: BLE001 - reported per check
                results[name] = traceback.format_exc()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
