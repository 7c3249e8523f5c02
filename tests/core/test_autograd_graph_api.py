"""The autograd graph API torch users reach for: ``grad_fn`` nodes (names, edges, metadata,
hooks), ``register_multi_grad_hook``, anomaly detection, ``InplaceFunction``, the gradcheck
Jacobians and the options of ``grad``/``backward``. Each behaviour runs the same program in
TensorPlay and torch (``both``) and compares values.

Deliberate differences, asserted here: our ``AccumulateGrad``/``CopySlices`` are named
without torch's ``torch::autograd::`` prefix; ``register_multi_grad_hook`` also works under
``autograd.grad`` with leaves (torch raises) and passes a tuple.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.autograd import graph as tp_graph

torch = pytest.importorskip("torch")


def both(fn):
    """``fn(L)`` with L = tensorplay, then L = torch."""
    return fn(tp), fn(torch)


def values(x):
    """Plain Python values of a (nested) result: tensors as lists, None kept."""
    if isinstance(x, (tp.Tensor, torch.Tensor)):
        return x.detach().tolist()
    if isinstance(x, (list, tuple)):
        return type(x)(values(v) for v in x)
    if isinstance(x, dict):
        return {k: values(v) for k, v in x.items()}
    return x


def node_name(node) -> str | None:
    return None if node is None else node.name().replace("torch::autograd::", "")


def edges(t) -> tuple:
    return tuple((node_name(n), nr) for n, nr in t.grad_fn.next_functions)


@pytest.fixture
def anomaly_off():
    """Anomaly detection is process-wide: leave it as found."""
    yield
    tp.autograd.set_detect_anomaly(False)
    torch.autograd.set_detect_anomaly(False)


# ---- grad_fn: the public Node type ------------------------------------------------------------


def test_every_grad_fn_is_a_public_node():
    def kinds(L):
        x = L.ones(3, requires_grad=True)
        y = x * 2
        b = x.clone()
        b[:1].mul_(2)
        acc = y.grad_fn.next_functions[0][0]
        nodes = (y.grad_fn, acc, b.grad_fn, Cube(L).apply(x).grad_fn)
        return [isinstance(n, L.autograd.graph.Node) for n in nodes]

    assert both(kinds) == ([True] * 4, [True] * 4)


def Cube(L):
    class Cube(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

    return Cube


def Scale(L):
    """A Function with a non-tensor argument between two tensors."""

    class Scale(L.autograd.Function):
        @staticmethod
        def forward(ctx, a, k, b):
            return a * k + b

        @staticmethod
        def backward(ctx, g):
            return g * 2, None, g

    return Scale


@pytest.mark.parametrize(
    "program",
    [
        lambda L, x, c: x * 2,
        lambda L, x, c: x + c,
        lambda L, x, c: L.cat([x, c, x]),
        lambda L, x, c: (x * 2).sum(),
        lambda L, x, c: L.stack([x, x]),
        lambda L, x, c: x.unbind(0)[1],
        lambda L, x, c: x.expand(2, 3),
        lambda L, x, c: Cube(L).apply(x),
        lambda L, x, c: Scale(L).apply(x, 2.0, c),
    ],
    ids=["mul", "add", "cat", "sum", "stack", "unbind", "expand", "function", "fn-non-tensor"],
)
def test_names_and_next_functions_match_torch(program):
    def structure(L):
        x, c = L.ones(3, requires_grad=True), L.ones(3)
        y = program(L, x, c)
        return node_name(y.grad_fn), edges(y)

    ours, theirs = both(structure)
    assert ours == theirs


def test_a_function_node_has_edges_for_its_tensor_arguments_only():
    x, c = tp.ones(3, requires_grad=True), tp.ones(3, requires_grad=True)
    y = Scale(tp).apply(x, 2.0, c)
    assert edges(y) == (("AccumulateGrad", 0), ("AccumulateGrad", 0))
    y.sum().backward()
    assert x.grad.tolist() == [2.0] * 3 and c.grad.tolist() == [1.0] * 3


def test_a_gradient_for_a_non_tensor_argument_is_an_error():
    class Bad(tp.autograd.Function):
        @staticmethod
        def forward(ctx, a, k):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="different than None at position 1"):
        Bad.apply(x, 2.0).sum().backward()


def test_metadata_is_a_dict_kept_on_the_node():
    def meta(L):
        y = L.ones(2, requires_grad=True) * 2
        y.grad_fn.metadata["tag"] = 7
        return y.grad_fn.metadata is y.grad_fn.metadata, dict(y.grad_fn.metadata)

    assert both(meta) == ((True, {"tag": 7}), (True, {"tag": 7}))


# ---- node hooks ---------------------------------------------------------------------------


def test_node_hooks_see_what_torch_shows_them():
    def seen(L):
        log = []
        x, c = L.tensor([1.0, 2.0], requires_grad=True), L.tensor([3.0, 4.0])
        y = x * c
        y.grad_fn.register_prehook(lambda go: log.append(("pre", values(go))))
        y.grad_fn.register_hook(lambda gi, go: log.append(("post", values(gi), values(go))))
        (y * 5).sum().backward()
        return log

    ours, theirs = both(seen)
    assert (
        ours
        == theirs
        == [
            ("pre", ([5.0, 5.0],)),
            ("post", ([15.0, 20.0], None), ([5.0, 5.0],)),
        ]
    )


def test_node_hooks_may_replace_the_gradients():
    def replaced(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        y = x * 3
        y.grad_fn.register_prehook(lambda go: (go[0] * 10,))
        y.grad_fn.register_hook(lambda gi, go: (gi[0] + 1, None))
        y.sum().backward()
        return x.grad.tolist()

    assert both(replaced) == ([31.0, 31.0], [31.0, 31.0])


def test_accumulate_grad_hooks_run_in_backward_and_not_in_grad():
    def events(L):
        log = []
        x = L.tensor([1.0, 2.0], requires_grad=True)
        acc = (x * 1).grad_fn.next_functions[0][0]
        x.register_hook(lambda g: log.append(("tensor", values(g))))
        acc.register_prehook(lambda go: (go[0] * 10,))
        acc.register_hook(lambda gi, go: log.append(("post", values(gi), values(go))))
        (x * 2).sum().backward()
        log.append(("grad", x.grad.tolist()))
        L.autograd.grad((x * 2).sum(), x)
        return log

    ours, theirs = both(events)
    assert ours == theirs
    assert ours[:3] == [
        ("tensor", [2.0, 2.0]),
        ("post", (), ([20.0, 20.0],)),
        ("grad", [20.0, 20.0]),
    ]
    assert ours[3] == ("tensor", [2.0, 2.0])  # autograd.grad: the tensor hook only


@pytest.mark.parametrize(
    ("hook", "error", "match"),
    [
        (lambda gi, go: gi[0], TypeError, "returned Tensor; a node hook returns None or a tuple"),
        (lambda gi, go: (gi[0],), RuntimeError, r"incorrect number of values \(got 1, but exp"),
        (lambda gi, go: (gi[0], gi[0]), RuntimeError, "can't replace a None gradient"),
    ],
    ids=["not-a-tuple", "count", "fills-none"],
)
def test_a_post_hook_returning_the_wrong_thing_is_an_error(hook, error, match):
    x, c = tp.ones(2, requires_grad=True), tp.ones(2)
    y = x * c
    y.grad_fn.register_hook(hook)
    with pytest.raises(error, match=match):
        y.sum().backward()


def test_a_prehook_returning_the_wrong_count_is_an_error():
    y = tp.ones(2, requires_grad=True) * 2
    y.grad_fn.register_prehook(lambda go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match=r"got 2, but expected 1"):
        y.sum().backward()


@pytest.mark.parametrize("method", ["register_hook", "register_prehook"])
def test_node_hooks_must_be_callable(method):
    y = tp.ones(2, requires_grad=True) * 2
    with pytest.raises(TypeError, match=f"Node.{method}: the hook must be callable, got int"):
        getattr(y.grad_fn, method)(3)


def test_a_handle_removes_its_hook_once_or_on_leaving_a_with_block():
    def calls(L):
        log = []
        x = L.ones(2, requires_grad=True)
        y = x * 2
        h = y.grad_fn.register_prehook(lambda go: log.append("kept"))
        with y.grad_fn.register_prehook(lambda go: log.append("scoped")):
            pass
        h.remove()
        h.remove()  # a second remove is a no-op
        y.grad_fn.register_prehook(lambda go: log.append("later"))
        y.sum().backward()
        return log

    assert both(calls) == (["later"], ["later"])


def test_a_tensor_hook_sees_none_for_an_output_that_got_no_gradient():
    def seen(L):
        log = []
        x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
        parts = x.unbind(0)
        parts[1].register_hook(lambda g: log.append(g))
        parts[0].sum().backward()
        return log, x.grad.tolist()

    assert both(seen) == (([None], [1.0, 0.0, 0.0]), ([None], [1.0, 0.0, 0.0]))


def test_a_tensor_hook_cannot_fill_a_missing_gradient():
    x = tp.ones(3, requires_grad=True)
    parts = x.unbind(0)
    parts[1].register_hook(lambda g: tp.ones(()))
    with pytest.raises(RuntimeError, match="can't replace a None gradient with a non-None"):
        parts[0].sum().backward()


# ---- autograd.grad runs only what leads to its inputs ------------------------------------------


def test_grad_runs_no_hook_off_the_path_to_its_inputs():
    def fired(L):
        log = []
        a = L.ones(2, requires_grad=True)
        p, q = a * 2, a * 3
        p.register_hook(lambda g: log.append("p"))
        q.register_hook(lambda g: log.append("q"))
        q.retain_grad()
        (gp,) = L.autograd.grad(p.sum() + q.sum(), p)
        return log, gp.tolist(), q.grad

    assert both(fired) == ((["p"], [1.0, 1.0], None), (["p"], [1.0, 1.0], None))


def test_backward_into_a_retained_non_leaf_accumulates_once():
    def grads(L):
        a = L.tensor([1.0, 2.0], requires_grad=True)
        q = a * 3
        q.retain_grad()
        (q * q).sum().backward(inputs=[q])
        return q.grad.tolist(), a.grad

    assert both(grads) == (([6.0, 12.0], None), ([6.0, 12.0], None))


# ---- register_multi_grad_hook ------------------------------------------------------------------


def _four(L):
    a = L.tensor([1.0, 2.0], requires_grad=True)
    b = L.tensor([3.0, 4.0], requires_grad=True)
    return a, b, a * b, a * b


def test_multi_grad_hook_all_marks_the_tensors_each_pass_reached():
    def reached(L):
        log = []
        a, b, c, d = _four(L)
        L.autograd.graph.register_multi_grad_hook(
            (a, b, c, d), lambda grads: log.append([g is not None for g in grads])
        )
        c.sum().backward(retain_graph=True)
        c.sum().backward(inputs=(a,), retain_graph=True)
        return log

    ours, theirs = both(reached)
    assert ours == theirs == [[True, True, True, False], [True, False, True, False]]


def test_multi_grad_hook_all_gets_the_gradients_once_per_pass():
    def got(L):
        log = []
        a, b, c, _ = _four(L)
        L.autograd.graph.register_multi_grad_hook((a, b), lambda grads: log.append(values(grads)))
        (c * c).sum().backward()
        return [list(g) for g in log]

    ours, theirs = both(got)
    assert ours == theirs == [[[18.0, 64.0], [6.0, 32.0]]]


def test_multi_grad_hook_all_also_works_in_grad_with_leaves():
    log = []
    a, b, c, _ = _four(tp)
    tp.autograd.graph.register_multi_grad_hook((a, b, c), lambda grads: log.append(values(grads)))
    tp.autograd.grad(c.sum(), [b])
    assert log == [(None, [1.0, 2.0], [1.0, 1.0])]  # (torch raises for leaves in grad())


def test_multi_grad_hook_any_gets_the_first_gradient_once():
    def got(L):
        log = []
        a, b, c, _ = _four(L)
        L.autograd.graph.register_multi_grad_hook(
            (a, b, L.ones(2)), lambda g: log.append(g.tolist()), mode="any"
        )
        c.sum().backward(retain_graph=True)
        c.sum().backward()
        return log

    # one call per pass, with a's gradient (b) or b's (a): which leaf runs first is the
    # engine's choice (torch's runs b's first)
    for log in both(got):
        assert len(log) == 2 and all(g in ([3.0, 4.0], [1.0, 2.0]) for g in log)


def test_multi_grad_hook_removed_runs_no_more():
    def calls(L):
        log = []
        a, b, c, _ = _four(L)
        h = L.autograd.graph.register_multi_grad_hook((a, b), lambda grads: log.append(1))
        h.remove()
        c.sum().backward()
        return log

    assert both(calls) == ([], [])


def test_multi_grad_hook_all_runs_at_the_end_when_a_gradient_never_comes():
    class Drop(tp.autograd.Function):  # backward returns no gradient for its input
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return None

    log = []
    a = tp.ones(2, requires_grad=True)
    h = a * 2
    out = Drop.apply(h).sum() + a.sum()
    tp.autograd.graph.register_multi_grad_hook((a, h), lambda grads: log.append(values(grads)))
    out.backward()
    assert log == [([1.0, 1.0], None)]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (lambda a: ((a,), print), {"mode": "some"}, ValueError, "mode must be 'all' or 'any'"),
        (lambda a: ((a,), 3), {}, TypeError, "the hook must be callable"),
        (lambda a: (a, print), {}, TypeError, r"sequence of tensors; wrap a single tensor"),
        (lambda a: ((a, 2.0), print), {}, TypeError, r"tensors\[1\] is a float"),
        (lambda a: ((a, tp.ones(2)), print), {}, RuntimeError, r"tensors\[1\] does not require"),
    ],
    ids=["mode", "fn", "single-tensor", "not-a-tensor", "no-grad"],
)
def test_multi_grad_hook_bad_arguments(args, kwargs, error, match):
    a = tp.ones(2, requires_grad=True)
    with pytest.raises(error, match=match):
        tp_graph.register_multi_grad_hook(*args(a), **kwargs)


def test_the_current_graph_task_knows_which_nodes_run():
    a, b, c, d = _four(tp)
    seen = []
    c.register_hook(
        lambda g: seen.append(
            [tp_graph.current_graph_task().will_execute(t.grad_fn) for t in (c, d)]
        )
    )
    assert tp_graph.current_graph_task() is None
    c.sum().backward()
    assert seen == [[True, False]]
    assert tp_graph.current_graph_task() is None


# ---- InplaceFunction ---------------------------------------------------------------------


def test_an_inplace_function_rebases_its_input_as_torch():
    def run(L):
        class Double(L.autograd.function.InplaceFunction):
            @staticmethod
            def forward(ctx, x):
                ctx.mark_dirty(x)
                return x.mul_(2)

            @staticmethod
            def backward(ctx, g):
                return g * 2

        a = L.tensor([1.0, 2.0], requires_grad=True)
        b = a * 3
        out = Double.apply(b)
        (out * out).sum().backward()
        return out is b, node_name(out.grad_fn), out.tolist(), a.grad.tolist()

    assert both(run) == (
        (True, "DoubleBackward", [6.0, 12.0], [72.0, 144.0]),
        (True, "DoubleBackward", [6.0, 12.0], [72.0, 144.0]),
    )
    assert tp.autograd.InplaceFunction is tp.autograd.function.InplaceFunction


def test_an_inplace_function_is_not_instantiated():
    with pytest.raises(RuntimeError, match=r"call InplaceFunction.apply\(...\) instead"):
        tp.autograd.InplaceFunction(inplace=True)


# ---- anomaly detection ------------------------------------------------------------------------


def _nan_backward(L):
    x = L.tensor([0.0, 1.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with L.autograd.detect_anomaly():
            y = x / x  # the forward line the report points at
            with pytest.raises(RuntimeError) as info:
                y.sum().backward()
    return str(info.value), [str(w.message) for w in caught], info.value


@pytest.mark.usefixtures("anomaly_off")
def test_anomaly_a_nan_gradient_raises_naming_the_node():
    (ours, _, _), (theirs, _, _) = both(_nan_backward)
    assert ours == theirs == "Function 'DivBackward0' returned nan values in its 1th output."


@pytest.mark.usefixtures("anomaly_off")
def test_anomaly_warns_with_the_forward_line_that_made_the_node():
    (_, ours, err), (_, theirs, _) = both(_nan_backward)
    assert ours[0] == theirs[0]  # "Anomaly Detection has been enabled. ..."
    report = ours[1]
    assert report.startswith("Error detected in DivBackward0. Traceback of forward call")
    assert theirs[1].startswith("Error detected in DivBackward0. Traceback of forward call")
    assert report.rstrip().endswith("y = x / x  # the forward line the report points at")
    assert "tensorplay" not in report  # the stack ends at the user's line
    if sys.version_info >= (3, 11):
        assert err.__notes__ == [report]


@pytest.mark.usefixtures("anomaly_off")
def test_anomaly_reports_any_error_of_a_node_with_its_forward_stack():
    class Boom(tp.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    x = tp.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        mode = tp.autograd.detect_anomaly()
    with mode:
        out = Boom.apply(x).sum()
        with pytest.warns(UserWarning, match="Error detected in BoomBackward") as caught:
            with pytest.raises(ValueError, match="boom"):
                out.backward()
    assert "out = Boom.apply(x).sum()" in str(caught[-1].message)


@pytest.mark.usefixtures("anomaly_off")
def test_anomaly_without_forward_information_says_so():
    x = tp.tensor([0.0], requires_grad=True)
    y = x / x  # recorded with detection off
    with tp.autograd.set_detect_anomaly(True):
        with pytest.warns(UserWarning, match="No forward pass information available"):
            with pytest.raises(RuntimeError, match="DivBackward0' returned nan"):
                y.backward()


@pytest.mark.usefixtures("anomaly_off")
def test_anomaly_check_nan_false_lets_the_nan_through():
    def grad(L):
        x = L.tensor([0.0, 1.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with L.autograd.detect_anomaly(check_nan=False):
                (x / x).sum().backward()
        return np.isnan(x.grad.tolist()).tolist(), x.grad.tolist()[1]

    assert both(grad) == (([True, False], 0.0), ([True, False], 0.0))


@pytest.mark.usefixtures("anomaly_off")
def test_anomaly_records_nothing_when_off():
    y = tp.ones(2, requires_grad=True) * 2
    assert not tp.autograd.anomaly_mode.is_anomaly_enabled()
    assert "traceback_" not in y.grad_fn.metadata


@pytest.mark.usefixtures("anomaly_off")
def test_set_detect_anomaly_acts_at_once_and_restores_as_a_context_manager():
    def flags(L):
        enabled = (
            L.is_anomaly_enabled if L is torch else tp.autograd.anomaly_mode.is_anomaly_enabled
        )
        check = (
            L.is_anomaly_check_nan_enabled
            if L is torch
            else tp.autograd.anomaly_mode.is_anomaly_check_nan_enabled
        )
        seen = []
        with L.autograd.set_detect_anomaly(True, check_nan=False):
            seen.append((enabled(), check()))
        seen.append((enabled(), check()))
        L.autograd.set_detect_anomaly(True)
        seen.append((enabled(), check()))
        L.autograd.set_detect_anomaly(False)
        seen.append(enabled())
        return seen

    assert both(flags)[0] == both(flags)[1] == [(True, False), (False, True), (True, True), False]


@pytest.mark.usefixtures("anomaly_off")
def test_anomaly_nodes_recorded_during_backward_know_their_parent():
    def parent(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with L.autograd.detect_anomaly():
                (g,) = L.autograd.grad((x * x).sum(), x, create_graph=True)
        meta = g.grad_fn.metadata
        return node_name(g.grad_fn), node_name(meta["parent_"]), "traceback_" in meta

    assert both(parent) == (("AddBackward0", "MulBackward0", True),) * 2


@pytest.mark.parametrize(
    "make",
    [
        lambda: tp.autograd.set_detect_anomaly("yes"),
        lambda: tp.autograd.set_detect_anomaly(True, check_nan=1),
        lambda: tp.autograd.detect_anomaly(check_nan=None),
    ],
    ids=["mode", "check_nan", "detect-check_nan"],
)
def test_anomaly_flags_must_be_bools(make, anomaly_off):
    with pytest.raises(TypeError, match="must be True or False"):
        make()
    assert not tp.autograd.anomaly_mode.is_anomaly_enabled()


# ---- the gradcheck Jacobians ----------------------------------------------------------------


def _jac_inputs(L):
    x = L.tensor([1.0, 2.0, 3.0], dtype=L.float64, requires_grad=True)
    w = L.tensor([[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]], dtype=L.float64, requires_grad=True)
    return x, w, L.ones(2, dtype=L.float64)


def test_get_numerical_jacobian_matches_torch():
    def jac(L):
        module = sys.modules[f"{L.__name__}.autograd.gradcheck"]
        x, w, c = _jac_inputs(L)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in torch
            jacs = module.get_numerical_jacobian(lambda a: (a[0] @ a[1]).sin() + a[2], (x, w, c))
        return [(tuple(j.shape), str(j.dtype).split(".")[-1]) for j in jacs], values(jacs)

    (ours_meta, ours), (theirs_meta, theirs) = both(jac)
    assert ours_meta == theirs_meta == [((3, 2), "float64"), ((6, 2), "float64")]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_get_numerical_jacobian_of_a_target_outside_the_inputs():
    def jac(L):
        module = sys.modules[f"{L.__name__}.autograd.gradcheck"]
        x, w, _ = _jac_inputs(L)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            (j,) = module.get_numerical_jacobian(lambda a: a[0] @ w, (x,), target=(w,))
        return values(j), w.tolist()

    (ours, w_after), (theirs, _) = both(jac)
    np.testing.assert_allclose(ours, theirs, atol=1e-9)
    assert w_after == [[1.0, -1.0], [0.5, 2.0], [0.0, 1.0]]  # the perturbation is undone


def test_get_analytical_jacobian_matches_torch():
    def jac(L):
        module = sys.modules[f"{L.__name__}.autograd.gradcheck"]
        x, w, _ = _jac_inputs(L)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            jacs, reentrant, sizes_ok, types_ok = module.get_analytical_jacobian(
                (x, w, 2.0), (x @ w).exp()
            )
        return values(jacs), reentrant, sizes_ok, types_ok

    (ours, *flags), (theirs, *torch_flags) = both(jac)
    assert flags == torch_flags == [True, True, True]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_the_jacobians_are_reached_through_the_gradcheck_function_too():
    x = tp.tensor([2.0], dtype=tp.float64, requires_grad=True)
    (j,) = tp.autograd.gradcheck.get_numerical_jacobian(lambda a: a[0] ** 2, (x,))
    (ja,), *_ = tp.autograd.gradcheck.get_analytical_jacobian((x,), x**2)
    np.testing.assert_allclose(j.tolist(), [[4.0]], rtol=1e-6)
    assert ja.tolist() == [[4.0]]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda m, x: m.get_numerical_jacobian(lambda a: a[0], (x,), grad_out=2.0),
            "Expected grad_out to be 1.0. get_numerical_jacobian",
        ),
        (
            lambda m, x: m.get_analytical_jacobian((x,), x * 2, grad_out=0.5),
            "Expected grad_out to be 1.0. get_analytical_jacobian",
        ),
        (
            lambda m, x: m.get_numerical_jacobian(lambda a: a[0] * 1j, (x,)),
            "Expected output to be non-complex. get_numerical_jacobian",
        ),
        (
            lambda m, x: m.get_analytical_jacobian((x,), x * 1j),
            "Expected output to be non-complex. get_analytical_jacobian",
        ),
    ],
    ids=["numerical-grad_out", "analytical-grad_out", "numerical-complex", "analytical-complex"],
)
def test_the_jacobians_refuse_what_torch_refuses(call, match):
    module = sys.modules["tensorplay.autograd.gradcheck"]
    x = tp.ones(2, dtype=tp.float64, requires_grad=True)
    with pytest.raises(ValueError, match=match):
        call(module, x)


# ---- options of grad and backward ---------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda L, x: L.autograd.grad((x * 2).sum(), []),
        lambda L, x: L.autograd.backward((x * 2).sum(), inputs=[]),
        lambda L, x: (x * 2).sum().backward(inputs=[]),
    ],
    ids=["grad", "autograd.backward", "Tensor.backward"],
)
def test_empty_inputs_are_an_error(call):
    def message(L):
        with pytest.raises(RuntimeError) as info:
            call(L, L.ones(2, requires_grad=True))
        return str(info.value)

    ours, theirs = both(message)
    assert ours == theirs and "cannot be empty" in ours


def test_materialize_grads_with_allow_unused_false_is_an_error():
    def message(L):
        x, z = L.ones(2, requires_grad=True), L.ones(2, requires_grad=True)
        with pytest.raises(ValueError) as info:
            L.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True, allow_unused=False)
        return str(info.value)

    ours, theirs = both(message)
    assert ours == theirs


def test_materialized_zeros_follow_create_graph():
    def grads(L):
        x, z = L.ones(2, requires_grad=True), L.ones(2, requires_grad=True)
        _, gz = L.autograd.grad((x * x).sum(), [x, z], create_graph=True, materialize_grads=True)
        (_, gz2) = L.autograd.grad((x * x).sum(), [x, z], materialize_grads=True)
        return gz.tolist(), gz.requires_grad, gz2.requires_grad

    assert both(grads) == (([0.0, 0.0], True, False), ([0.0, 0.0], True, False))


def test_grad_takes_torch_positional_order():
    def positional(L):
        x, z = L.ones(2, requires_grad=True), L.ones(2, requires_grad=True)
        # outputs, inputs, grad_outputs, retain_graph, create_graph, only_inputs, allow_unused
        return values(L.autograd.grad((x * 3).sum(), [x, z], None, None, False, True, True))

    assert both(positional) == (([3.0, 3.0], None), ([3.0, 3.0], None))


def test_only_inputs_false_warns_and_changes_nothing():
    def run(L):
        x = L.ones(2, requires_grad=True)
        with pytest.warns(FutureWarning, match="only_inputs argument is deprecated"):
            (g,) = L.autograd.grad((x * 3).sum(), x, only_inputs=False)
        return g.tolist(), x.grad

    assert both(run) == (([3.0, 3.0], None), ([3.0, 3.0], None))


def test_backward_takes_grad_tensors_and_the_old_grad_variables():
    def run(L):
        x = L.ones(2, requires_grad=True)
        L.autograd.backward(x * 2, grad_tensors=L.tensor([1.0, 2.0]))
        with pytest.warns(FutureWarning, match="`grad_variables` is deprecated"):
            L.autograd.backward(x * 2, grad_variables=L.tensor([1.0, 1.0]))
        with pytest.warns(FutureWarning), pytest.raises(RuntimeError, match="both passed to"):
            L.autograd.backward(x * 2, L.ones(2), grad_variables=L.ones(2))
        return x.grad.tolist()

    assert both(run) == ([4.0, 6.0], [4.0, 6.0])


def test_is_grads_batched_gives_one_gradient_per_row():
    def batched(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        z = L.ones(2, requires_grad=True)
        y = x * x * L.tensor([1.0, 10.0])
        eye = L.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        gx, gz = L.autograd.grad(y, [x, z], eye, is_grads_batched=True, allow_unused=True)
        return gx.tolist(), gz

    assert both(batched) == (([[2.0, 0.0], [0.0, 40.0], [2.0, 40.0]], None),) * 2


def test_is_grads_batched_needs_a_batch_dimension():
    x = tp.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"grad_output\[0\] has a shape of \[3, 3\] and outp"):
        tp.autograd.grad(x * 2, x, tp.ones(3, 3), is_grads_batched=True)
    with pytest.raises(RuntimeError, match="one Tensor per output, whose first dimension"):
        tp.autograd.grad(x * 2, x, None, is_grads_batched=True)


def test_grad_with_a_dict_of_inputs_returns_a_dict():
    def as_dict(L):
        x, z = L.ones(2, requires_grad=True), L.ones(2, requires_grad=True)
        return values(L.autograd.grad((x * 2 + z).sum(), {"x": x, "z": z}))

    assert both(as_dict) == ({"x": [2.0, 2.0], "z": [1.0, 1.0]},) * 2


@pytest.mark.parametrize(
    ("inputs", "error", "match"),
    [
        (lambda x: [x, 3], TypeError, r"backward\(\): inputs\[1\] must be a Tensor, got int"),
        (lambda x: [tp.ones(2)], RuntimeError, r"inputs\[0\]\) does not require grad"),
        (lambda x: 3, TypeError, "inputs must be a Tensor, a sequence of tensors or a dict"),
    ],
    ids=["not-a-tensor", "no-grad", "not-a-sequence"],
)
def test_backward_inputs_are_checked(inputs, error, match):
    x = tp.ones(2, requires_grad=True)
    with pytest.raises(error, match=match):
        (x * 2).sum().backward(inputs=inputs(x))
