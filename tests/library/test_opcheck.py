"""opcheck: test selection, the four default checks, test_gradcheck and devices= (spec:
opcheck)."""

from __future__ import annotations

import warnings

import pytest

import tensorplay as tp
from tensorplay import capture, library
from tensorplay.library import _opcheck


def _good(qualname):
    op = library.custom_op(qualname(), lambda x, w: x * w)
    op.register_fake(lambda x, w: x.new_empty(x.shape))

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x

    op.register_autograd(backward, setup_context=lambda ctx, i, o: ctx.save_for_backward(*i))
    return op


class _Node:
    def __init__(self, op, target):
        self.op, self.target = op, target


class MiniTracer:
    """A stand-in for tensorplay.graph.Tracer: records library calls through core's capture
    interface and replays them (enough for test_aot_dispatch_dynamic's contract)."""

    def trace(self, fn, sample_inputs):
        nodes = []

        class Rec:
            def record_call(self, target, args, kwargs):
                nodes.append(_Node("call_function", target))
                return P()

        class P(capture.Proxy):
            pass

        with capture.tracing(Rec()):
            fn(*[P() for _ in sample_inputs])

        class GM:
            graph = type("G", (), {"nodes": nodes})

            def __call__(self, *tensors):
                return fn(*tensors)

        return GM()


@pytest.fixture
def mini_tracer(monkeypatch):
    monkeypatch.setattr(_opcheck, "_tracer_class", lambda: MiniTracer)


def test_good_op_passes_every_check(qualname, mini_tracer):
    op = _good(qualname)
    args = (tp.randn(3, 2), tp.randn(3, 2))
    assert library.opcheck(op, args) == {}
    assert library.opcheck(op.name, args, test_utils="all") == {}


def test_unknown_test_is_a_value_error_before_anything_runs(qualname):
    runs = []
    op = library.custom_op(qualname(), lambda x: runs.append(1) or x * 1)
    with pytest.raises(ValueError, match="unknown test 'test_nope'"):
        library.opcheck(op, (tp.ones(1),), test_utils=["test_schema", "test_nope"])
    assert runs == []


def test_single_str_selects_one_check(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)  # no fake kernel
    assert library.opcheck(op, (tp.ones(2),), test_utils="test_schema") == {}
    failures = library.opcheck(
        op, (tp.ones(2),), test_utils="test_faketensor", raise_exception=False
    )
    assert list(failures) == ["test_faketensor"]
    assert failures["test_faketensor"].startswith("OpCheckError: ")
    assert "register_fake" in failures["test_faketensor"]


def test_failures_raise_with_count_and_op_name(qualname):
    name = qualname()
    op = library.custom_op(name, lambda x: x * 2)
    with pytest.raises(RuntimeError, match=rf"opcheck\({name}\) failed 1 check\(s\): test_fake"):
        library.opcheck(op, (tp.ones(2),), test_utils=("test_schema", "test_faketensor"))


def test_schema_catches_undeclared_mutation(qualname):
    def body(x, y):
        y.add_(1)
        return x + 1

    op = library.custom_op(qualname(), body)
    user_y = tp.zeros(2)
    failures = library.opcheck(
        op, (tp.ones(2), user_y), test_utils="test_schema", raise_exception=False
    )
    assert "argument 'y'" in failures["test_schema"]
    assert "mutates_args=('y',)" in failures["test_schema"]
    assert user_y.tolist() == [0.0, 0.0]  # opcheck works on clones


def test_schema_trusts_declared_mutation(qualname):
    def body(x, y):
        y.add_(1)
        return x + 1

    op = library.custom_op(qualname(), body, mutates_args=("y",))
    assert library.opcheck(op, (tp.ones(2), tp.zeros(2)), test_utils="test_schema") == {}


def test_schema_catches_output_aliasing_an_input(qualname):
    op = library.custom_op(qualname(), lambda x: x[1:])
    failures = library.opcheck(op, (tp.ones(3),), test_utils="test_schema", raise_exception=False)
    assert "output 0 aliases input 'x'" in failures["test_schema"]


@pytest.mark.parametrize(
    "body, aliased",
    [
        (lambda x: tp.from_numpy(x.numpy()), "output 0 aliases input 'x'"),
        (lambda x: tp.from_numpy(x.numpy()[1:]), "output 0 aliases input 'x'"),
        (lambda x: (lambda y: (y, tp.from_numpy(y.numpy())))(x * 2), "output 1 aliases output 0"),
    ],
    ids=["same_memory", "part_of_it", "two_outputs"],
)
def test_schema_catches_a_new_tensor_over_an_inputs_memory(qualname, body, aliased):
    op = library.custom_op(qualname(), body)
    failures = library.opcheck(op, (tp.ones(3),), test_utils="test_schema", raise_exception=False)
    assert failures["test_schema"].startswith(f"OpCheckError: {op.name}: {aliased}")
    assert ".clone()" in failures["test_schema"]


def test_schema_passes_outputs_in_fresh_memory(qualname):
    op = library.custom_op(qualname(), lambda x: (tp.from_numpy(x.numpy() * 2), x.sum()))
    assert library.opcheck(op, (tp.ones(3),), test_utils="test_schema") == {}


def test_autograd_registration_catches_a_missing_formula(qualname):
    name = qualname()
    op = library.custom_op(name, lambda x: tp.from_numpy(x.numpy() * 2))
    failures = library.opcheck(
        op, (tp.ones(2),), test_utils="test_autograd_registration", raise_exception=False
    )
    assert failures["test_autograd_registration"].startswith(
        f"RuntimeError: Autograd has not been implemented for operator {name}"
    )
    assert f"{name}.register_autograd(" in failures["test_autograd_registration"]


def test_autograd_registration_catches_a_non_differentiable_output(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    op.register_autograd(
        lambda ctx, g: g * 2,
        setup_context=lambda ctx, inputs, output: ctx.mark_non_differentiable(output),
    )
    failures = library.opcheck(
        op, (tp.ones(2),), test_utils="test_autograd_registration", raise_exception=False
    )
    assert "output 0 does not require grad" in failures["test_autograd_registration"]


def test_autograd_registration_catches_a_dropped_gradient(qualname):
    op = library.custom_op(qualname(), lambda x, w: x * w)
    op.register_autograd(lambda ctx, g: (g, None))
    failures = library.opcheck(
        op, (tp.ones(2), tp.ones(2)), test_utils="test_autograd_registration", raise_exception=False
    )
    assert "input 'w' got no gradient" in failures["test_autograd_registration"]


def test_a_registered_formula_passes_the_registration_check(qualname):
    op = library.custom_op(qualname(), lambda x: (x * x).sum(dim=0))
    op.register_autograd(
        lambda ctx, g: 2 * ctx.saved_tensors[0] * g,
        setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]),
    )
    assert library.opcheck(op, (tp.ones(3, 2),), test_utils="test_autograd_registration") == {}


def test_faketensor_catches_wrong_shape_and_dtype(qualname):
    op = library.custom_op(qualname(), lambda x: x.sum(dim=0))
    op.register_fake(lambda x: x.new_empty(x.shape))
    failures = library.opcheck(
        op, (tp.ones(3, 2),), test_utils="test_faketensor", raise_exception=False
    )
    assert "shape [3, 2]" in failures["test_faketensor"] and "[2]" in failures["test_faketensor"]
    op.register_fake(lambda x: tp.empty(x.shape[1:], dtype=tp.float64, device="meta"))
    failures = library.opcheck(
        op, (tp.ones(3, 2),), test_utils="test_faketensor", raise_exception=False
    )
    assert "float64" in failures["test_faketensor"]


def test_faketensor_catches_a_fake_that_leaves_the_meta_device(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    op.register_fake(lambda x: tp.empty(x.shape))  # a CPU tensor, even for meta inputs
    failures = library.opcheck(
        op, (tp.ones(2),), test_utils="test_faketensor", raise_exception=False
    )
    assert failures["test_faketensor"] == (
        f"OpCheckError: {op.name}: the op on meta tensors puts output 0 on cpu; for meta "
        "inputs a fake kernel must return meta tensors (build them from the inputs, e.g. "
        "x.new_empty(shape), or pass device=x.device)"
    )
    op.register_fake(lambda x: tp.empty(x.shape, device=x.device))
    assert library.opcheck(op, (tp.ones(2),), test_utils="test_faketensor") == {}


def test_faketensor_catches_a_fake_that_reads_data(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    op.register_fake(lambda x: tp.tensor(x.tolist()))
    failures = library.opcheck(
        op, (tp.ones(2),), test_utils="test_faketensor", raise_exception=False
    )
    assert "test_faketensor" in failures


def test_aot_dispatch_dynamic_compares_captured_and_eager(qualname, mini_tracer):
    op = _good(qualname)
    assert (
        library.opcheck(op, (tp.ones(2), tp.ones(2)), test_utils="test_aot_dispatch_dynamic") == {}
    )


def test_aot_dispatch_dynamic_catches_a_body_that_is_traced_into(qualname, monkeypatch):
    op = _good(qualname)

    class TracesInto(MiniTracer):
        def trace(self, fn, sample_inputs):
            gm = super().trace(fn, sample_inputs)
            gm.graph.nodes = [_Node("call_function", "mul")]
            return gm

    monkeypatch.setattr(_opcheck, "_tracer_class", lambda: TracesInto)
    failures = library.opcheck(
        op, (tp.ones(2), tp.ones(2)), test_utils="test_aot_dispatch_dynamic", raise_exception=False
    )
    assert "expected exactly one" in failures["test_aot_dispatch_dynamic"]


def test_aot_dispatch_dynamic_without_compile_is_an_explicit_skip(qualname, monkeypatch):
    def missing():
        raise _opcheck._Skip("graph capture needs the tensorplay-compile distribution")

    monkeypatch.setattr(_opcheck, "_tracer_class", missing)
    op = _good(qualname)
    with pytest.warns(UserWarning, match="test_aot_dispatch_dynamic skipped.*tensorplay-compile"):
        failures = library.opcheck(op, (tp.ones(2), tp.ones(2)))
    assert failures == {}


def test_gradcheck_catches_a_wrong_formula(qualname):
    op = library.custom_op(qualname(), lambda x: x * x)
    op.register_autograd(lambda ctx, g: g * 3)  # wrong: d(x*x)/dx = 2x
    assert library.opcheck(op, (tp.ones(3),), test_utils="test_autograd_registration") == {}
    failures = library.opcheck(
        op, (tp.ones(3),), test_utils="test_gradcheck", raise_exception=False
    )
    assert "GradcheckError" in failures["test_gradcheck"]


def test_tolerances_are_forwarded(qualname, mini_tracer):
    op = _good(qualname)
    assert library.opcheck(op, (tp.ones(2), tp.ones(2)), atol=1e-3, rtol=1e-3) == {}


def test_devices_runs_per_device_and_keys_failures(qualname, mini_tracer):
    op = library.custom_op(qualname(), lambda x: x * 2, device_types="cpu")
    op.register_autograd(lambda ctx, g: g * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        failures = library.opcheck(
            op, (tp.ones(2),), devices=["cpu", "cuda"], raise_exception=False
        )
    assert "test_faketensor[cpu]" in failures and "test_schema[cpu]" not in failures
    if not tp.cuda.is_available():
        assert any("device 'cuda' skipped" in str(w.message) for w in caught)
    assert set(library.opcheck(op, (tp.ones(2),), devices="all", raise_exception=False)) == {
        "test_faketensor[cpu]"
    }


@pytest.mark.cuda
def test_devices_on_cuda(qualname, mini_tracer):
    if not tp.cuda.is_available():
        pytest.skip("CUDA not available")
    op = _good(qualname)
    assert library.opcheck(op, (tp.randn(3), tp.randn(3)), devices="all") == {}


def test_gradcheck_check_leaves_tp_autograd_gradcheck_callable(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2)
    op.register_autograd(lambda ctx, g: g * 2)
    library.opcheck(op, (tp.ones(2),), test_utils="test_gradcheck")
    assert callable(tp.autograd.gradcheck)


def test_opcheck_test_vmap_checks_the_rule_against_the_loop():
    with library._scoped_library("opcheck_vmap", "FRAGMENT") as lib:
        lib.define("scale(Tensor x, float s) -> Tensor")
        lib.impl("scale", lambda x, s: x * s)
        op = tp.ops.opcheck_vmap.scale
        with pytest.warns(UserWarning, match="no register_vmap rule"):  # reported, not passed
            assert library.opcheck(op, (tp.randn(3), 2.0), test_utils="test_vmap") == {}
        library.register_vmap(op, lambda info, in_dims, x, s: (op(x, s), in_dims[0]), lib=lib)
        assert library.opcheck(op, (tp.randn(3), 2.0), test_utils="test_vmap") == {}
    with library._scoped_library("opcheck_vmap2", "FRAGMENT") as lib:
        lib.define("scale(Tensor x, float s) -> Tensor")
        lib.impl("scale", lambda x, s: x * s)
        op = tp.ops.opcheck_vmap2.scale
        # a wrong rule: forgets the scale
        library.register_vmap(op, lambda info, in_dims, x, s: (x.clone(), in_dims[0]), lib=lib)
        failures = library.opcheck(
            op, (tp.randn(3), 2.0), test_utils="test_vmap", raise_exception=False
        )
        assert "differs from the op run on each sample" in failures["test_vmap"]
