"""Kernel selection per device, the agnostic slot, hot swap, set_kernel_enabled and
get_kernel (spec: Dispatch)."""

from __future__ import annotations

import warnings

import pytest

import tensorplay as tp
from tensorplay import library


def _tag(value):
    return lambda x, *args, **kwargs: tp.full_like(x, value)


def test_body_is_the_agnostic_kernel_by_default(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    assert library.get_kernel(op, "default")(tp.zeros(1)).tolist() == [1.0]
    assert op(tp.zeros(2)).tolist() == [1.0, 1.0]
    with pytest.raises(LookupError, match="no 'cpu' kernel"):
        library.get_kernel(op, "cpu")  # concrete lookups never fall back


def test_device_types_put_the_body_in_per_device_slots(qualname):
    op = library.custom_op(qualname(), _tag(1.0), device_types="CPU")
    assert op(tp.zeros(1)).tolist() == [1.0]
    with pytest.raises(LookupError):
        library.get_kernel(op, "default")
    assert library.get_kernel(op, "cpu") is op.__wrapped__


def test_concrete_kernel_wins_over_agnostic(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    op.register_kernel("cpu", _tag(2.0))
    assert op(tp.zeros(1)).tolist() == [2.0]


def test_missing_kernel_names_op_device_and_registered(qualname):
    name = qualname()
    op = library.custom_op(name, _tag(1.0), device_types=["cuda"])
    with pytest.raises(NotImplementedError) as e:
        op(tp.zeros(1))
    msg = str(e.value)
    assert name in msg and "'cpu'" in msg and "['cuda']" in msg
    assert f"{name}.register_kernel('cpu')" in msg


def test_first_tensor_argument_picks_the_device_keyword_too(qualname):
    seen = []

    def body(scale, x=None):
        seen.append(x.device.type)
        return x * scale

    op = library.custom_op(qualname(), body, device_types="cpu")
    assert op(2.0, x=tp.ones(1)).tolist() == [2.0]
    assert seen == ["cpu"]


def test_keyword_arguments_reach_the_kernel_unchanged(qualname):
    received = []

    def body(x, *, alpha=1.0, **extra):
        received.append((alpha, extra))
        return x * alpha

    op = library.custom_op(qualname(), body)
    assert op(tp.ones(1), alpha=3.0, beta="b").tolist() == [3.0]
    assert received == [(3.0, {"beta": "b"})]


def test_hot_swap_replaces_and_never_raises(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    for value in (2.0, 3.0, 4.0):
        op.register_kernel("cpu", _tag(value))
        assert op(tp.zeros(1)).tolist() == [value]
    op.register_kernel(None, _tag(9.0))
    assert library.get_kernel(op, "CompositeExplicitAutograd")(tp.zeros(1)).tolist() == [9.0]


@pytest.mark.parametrize(
    "spelling", ["CompositeExplicitAutograd", "CompositeImplicitAutograd", "default", ()]
)
def test_composite_spellings_mean_the_agnostic_slot(qualname, spelling):
    op = library.custom_op(qualname(), _tag(1.0), device_types="cpu")
    op.register_kernel(spelling, _tag(5.0))
    assert library.get_kernel(op, "composite")(tp.zeros(1)).tolist() == [5.0]


def test_device_names_are_case_insensitive_and_validated(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    op.register_kernel("CPU", _tag(7.0))
    assert library.get_kernel(op, "cpu")(tp.zeros(1)).tolist() == [7.0]
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        op.register_kernel("tpu", _tag(1.0))
    with pytest.raises(ValueError, match="register_fake"):
        op.register_kernel("meta", _tag(1.0))


def test_set_kernel_enabled_falls_back_and_restores(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    op.register_kernel("cpu", _tag(2.0))
    with op.set_kernel_enabled("cpu", False):
        assert op(tp.zeros(1)).tolist() == [1.0]
        with pytest.raises(LookupError, match="disabled"):
            library.get_kernel(op, "cpu")
    assert op(tp.zeros(1)).tolist() == [2.0]
    assert library.get_kernel(op, "cpu")(tp.zeros(1)).tolist() == [2.0]


def test_set_kernel_enabled_warns_when_nothing_changes(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    op.register_kernel("cpu", _tag(2.0))
    with pytest.warns(UserWarning, match="already enabled"):
        with op.set_kernel_enabled("cpu", True):
            pass
    with op.set_kernel_enabled("cpu", False):
        with pytest.warns(UserWarning, match="already disabled"):
            with op.set_kernel_enabled("cpu", False):
                assert op(tp.zeros(1)).tolist() == [1.0]
        assert op(tp.zeros(1)).tolist() == [1.0]  # the outer block's state is back
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert op(tp.zeros(1)).tolist() == [2.0]


def test_disabled_kernel_without_agnostic_fallback_raises(qualname):
    op = library.custom_op(qualname(), _tag(1.0), device_types="cpu")
    with op.set_kernel_enabled("cpu", False):
        with pytest.raises(NotImplementedError, match="no kernel for device 'cpu'"):
            op(tp.zeros(1))


def test_get_kernel_validates_the_key(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    with pytest.raises(ValueError, match="unknown device type"):
        library.get_kernel(op, "Autograd")


def test_meta_tensors_run_the_fake_kernel(qualname):
    calls = []
    op = library.custom_op(qualname(), lambda x: x.sum(dim=0))

    @op.register_fake
    def _(x):
        calls.append(x.device.type)
        return tp.empty(x.shape[1:], dtype=x.dtype, device=x.device)

    out = op(tp.empty(3, 4, device="meta"))
    assert calls == ["meta"] and out.device.type == "meta" and out.shape == (4,)
    assert op(tp.ones(3, 4)).tolist() == [3.0] * 4 and calls == ["meta"]


def test_meta_without_fake_kernel_uses_agnostic_body_or_explains(qualname):
    agnostic = library.custom_op(qualname("a"), lambda x: x * 2)
    assert agnostic(tp.empty(2, device="meta")).shape == (2,)
    name = qualname("b")
    cpu_only = library.custom_op(name, lambda x: x * 2, device_types="cpu")
    with pytest.raises(NotImplementedError, match=rf"{name}.register_fake"):
        cpu_only(tp.empty(2, device="meta"))


def test_register_fake_allow_override(qualname):
    op = library.custom_op(qualname(), _tag(1.0))
    library.register_fake(op, lambda x: x.new_empty(x.shape))
    with pytest.raises(RuntimeError, match="allow_override=True"):
        library.register_fake(op, lambda x: x.new_empty(x.shape), allow_override=False)


def test_call_without_tensors_uses_the_agnostic_kernel(qualname):
    op = library.custom_op(qualname("a"), lambda n: tp.ones(n))
    assert op(3).tolist() == [1.0, 1.0, 1.0]
    name = qualname("b")
    cpu_only = library.custom_op(name, lambda n: tp.ones(n), device_types="cpu")
    with pytest.raises(NotImplementedError, match="without tensor arguments"):
        cpu_only(3)


def test_list_of_tensors_argument_picks_device(qualname):
    op = library.custom_op(qualname(), lambda xs: tp.stack(xs).sum(dim=0), device_types="cpu")
    assert op([tp.ones(2), tp.ones(2)]).tolist() == [2.0, 2.0]


@pytest.mark.cuda
def test_cuda_tensors_dispatch_to_the_cuda_kernel(qualname):
    if not tp.cuda.is_available():
        pytest.skip("CUDA not available")
    op = library.custom_op(qualname(), _tag(1.0), device_types="cpu")
    op.register_kernel("cuda", _tag(2.0))
    x = tp.zeros(3, device="cuda")
    out = op(x)
    assert out.device.type == "cuda" and out.cpu().tolist() == [2.0] * 3
    assert op(tp.zeros(1)).tolist() == [1.0]
    with op.set_kernel_enabled("cuda", False):
        with pytest.raises(NotImplementedError, match="'cuda'"):
            op(x)


def test_signature_binding_on_the_fast_path(qualname):
    def body(x, y=None, *, alpha=1.0):
        return x * alpha if y is None else (x + y) * alpha

    op = library.custom_op(qualname(), body)
    x = tp.ones(2)
    assert op(x).tolist() == [1.0, 1.0]
    assert op(x, x, alpha=2.0).tolist() == [4.0, 4.0]
    assert op(x=x, y=x).tolist() == [2.0, 2.0]
    with pytest.raises(TypeError):
        op(x, x, 3.0)  # alpha is keyword-only, as in the body
    with pytest.raises(TypeError):
        op()


def test_body_named_parameters_do_not_clash_with_the_generated_call(qualname):
    def body(self, kernel, op):
        return self + kernel + op

    f = library.custom_op(qualname(), body)
    assert f(tp.ones(1), tp.ones(1), op=tp.ones(1)).tolist() == [3.0]
