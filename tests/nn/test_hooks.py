"""Module hooks against torch: full backward hooks and pre-hooks (the gradients they see and
the gradients they replace), and the forward hooks' ``prepend`` / ``with_kwargs`` options."""

from __future__ import annotations

import warnings
from collections import namedtuple

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import nn

torch = pytest.importorskip(
    "torch", reason="torch (the test oracle): pip install /opt/wheels/torch-2.13.0*.whl"
)

LIBS = {"tp": (tp, nn), "torch": (torch, torch.nn)}


def _np(t):
    if t is None:
        return None
    # a copy: torch may reuse a gradient a hook saw as a leaf's .grad and add into it later
    return np.array(t.detach().numpy(), copy=True)


def _grads(seq):
    """A tuple of gradients as numpy arrays (None kept), to compare across libraries."""
    return [_np(g) for g in seq]


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if x is None or y is None:
            assert x is None and y is None, (x, y)
        else:
            assert x.shape == y.shape
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


def _linear(lib, seed=0):
    """The same Linear(3, 2) in both libraries."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal(2).astype(np.float32)
    mod, nnmod = LIBS[lib]
    m = nnmod.Linear(3, 2)
    with mod.no_grad():
        m.weight.copy_(mod.tensor(w))
        m.bias.copy_(mod.tensor(b))
    return m


def _x(lib, requires_grad=True):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    return LIBS[lib][0].tensor(x, requires_grad=requires_grad)


def _both(fn):
    """``fn(lib)`` for tensorplay and torch, results compared entry by entry."""
    ours, theirs = fn("tp"), fn("torch")
    assert list(ours) == list(theirs)
    for k in ours:
        _assert_same(ours[k], theirs[k])
    return ours


# ---- full backward hooks ------------------------------------------------------------------------


def test_hook_sees_grad_input_and_grad_output():
    def run(lib):
        m, x = _linear(lib), _x(lib)
        seen = {}

        def hook(mod, gi, go):
            assert mod is m and isinstance(gi, tuple) and isinstance(go, tuple)
            seen["gi"], seen["go"] = _grads(gi), _grads(go)

        m.register_full_backward_hook(hook)
        (m(x) * LIBS[lib][0].tensor([1.0, -2.0])).sum().backward()
        return {**seen, "x": [_np(x.grad)], "w": [_np(m.weight.grad)]}

    out = _both(run)
    assert len(out["gi"]) == 1 and out["go"][0].shape == (2, 2)


def test_hook_replaces_grad_input():
    def run(lib):
        m, x = _linear(lib), _x(lib)
        m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 10,))
        m(x).pow(2).sum().backward()
        return {"x": [_np(x.grad)], "w": [_np(m.weight.grad)], "b": [_np(m.bias.grad)]}

    out = _both(run)
    ref = _linear("tp")
    x = _x("tp")
    ref(x).pow(2).sum().backward()
    np.testing.assert_allclose(out["x"][0], _np(x.grad) * 10, rtol=1e-6)
    np.testing.assert_allclose(out["w"][0], _np(ref.weight.grad), rtol=1e-6)  # params untouched


def test_pre_hook_replaces_grad_output_and_hook_sees_it():
    def run(lib):
        m, x = _linear(lib), _x(lib)
        seen = {}
        m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 3,))
        m.register_full_backward_pre_hook(lambda mod, go: seen.update(pre2=_grads(go)))
        m.register_full_backward_hook(lambda mod, gi, go: seen.update(go=_grads(go)))
        m(x).sum().backward()
        return {**seen, "x": [_np(x.grad)], "w": [_np(m.weight.grad)], "b": [_np(m.bias.grad)]}

    out = _both(run)
    np.testing.assert_allclose(out["go"][0], np.full((2, 2), 3.0))  # the replaced value
    np.testing.assert_allclose(out["b"][0], [6.0, 6.0])  # params see it too


def test_several_inputs_and_outputs_with_gaps():
    """Inputs that don't require grad, a non-tensor argument, an int tensor, a keyword
    argument, an output that gets no gradient and an integer output."""

    def run(lib):
        mod, nnmod = LIBS[lib]

        class M(nnmod.Module):
            def forward(self, a, b, scale, idx, k=2.0):
                return a * b * scale * k, a + 1, (a * 0).long(), b * 5

        m = M()
        seen = {}

        def hook(mod_, gi, go):
            seen["gi"], seen["go"] = _grads(gi), _grads(go)
            return (gi[0] + 1, gi[1], gi[2], gi[3])

        m.register_full_backward_pre_hook(lambda mod_, go: seen.update(pre=_grads(go)))
        m.register_full_backward_hook(hook)
        a = mod.tensor([1.0, 2.0], requires_grad=True)
        b = mod.tensor([3.0, 4.0])
        c = mod.tensor([0.5, 0.25], requires_grad=True)
        x, y, z, w = m(a, b * c, 3.0, mod.tensor([1, 2]), k=0.5)
        assert not z.requires_grad
        (x.sum() + (w * w).sum()).backward()
        return {**seen, "a": [_np(a.grad)], "c": [_np(c.grad)]}

    out = _both(run)
    assert out["gi"][2] is None and out["go"][1] is None and out["go"][2] is None
    np.testing.assert_allclose(out["a"][0], np.array([1.5, 1.0]) * 3 * 0.5 + 1)


def test_no_input_requires_grad_runs_hook_from_outputs():
    def run(lib):
        m = _linear(lib)
        seen = []
        m.register_full_backward_hook(lambda mod, gi, go: seen.append((_grads(gi), _grads(go))))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m(_x(lib, requires_grad=False)).sum().backward()
        assert any("no inputs require gradients" in str(x.message) for x in w)
        assert len(seen) == 1
        return {"gi": seen[0][0], "go": seen[0][1], "w": [_np(m.weight.grad)]}

    out = _both(run)
    assert out["gi"] == [None]

    m = _linear("tp")
    m.register_full_backward_hook(lambda mod, gi, go: (tp.ones(2, 3),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="should always return None"):
            m(_x("tp", requires_grad=False)).sum().backward()


def test_handles_remove_and_hooks_of_a_call_are_fixed_at_the_call():
    def run(lib):
        m, calls = _linear(lib), []
        h1 = m.register_full_backward_hook(lambda *a: calls.append("h1"))
        h2 = m.register_full_backward_pre_hook(lambda *a: calls.append("pre"))
        m.register_full_backward_hook(lambda *a: calls.append("h3"))
        h1.remove()
        out = m(_x(lib))
        h2.remove()  # after the forward: this call's backward still runs it (as torch)
        m.register_full_backward_hook(lambda *a: calls.append("late"))  # ... and not this
        out.sum().backward()
        m(_x(lib)).sum().backward()
        return {"calls": [np.array(len(c)) for c in calls], "order": calls}

    ours, theirs = run("tp"), run("torch")
    assert ours["order"] == theirs["order"] == ["pre", "h3", "h3", "late"]


def test_prepend_order_and_nested_modules():
    def run(lib):
        mod, nnmod = LIBS[lib]
        inner = _linear(lib)
        outer = nnmod.Sequential(inner, nnmod.ReLU())
        calls = []
        for name, m in (("inner", inner), ("outer", outer)):
            m.register_full_backward_hook(lambda *a, n=name: calls.append(f"{n}:a"))
            m.register_full_backward_hook(lambda *a, n=name: calls.append(f"{n}:b"), prepend=True)
            m.register_full_backward_pre_hook(lambda *a, n=name: calls.append(f"{n}:pre"))
            m.register_full_backward_pre_hook(
                lambda *a, n=name: calls.append(f"{n}:pre0"), prepend=True
            )
        outer(_x(lib)).sum().backward()
        return calls

    assert run("tp") == run("torch")


def test_invalid_returns_raise():
    m, x = _linear("tp"), _x("tp")
    h = m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 2, but expected 1"):
        m(x).sum().backward()
    h.remove()
    h = m.register_full_backward_pre_hook(lambda mod, go: ())
    with pytest.raises(RuntimeError, match="invalid number of grad_output, got 0, but expected 1"):
        m(x).sum().backward()
    h.remove()
    h = m.register_full_backward_hook(lambda mod, gi, go: (gi[0][:, :1],))
    with pytest.raises(RuntimeError, match=r"changed the size of value.*\[2, 3\], got \[2, 1\]"):
        m(x).sum().backward()
    h.remove()
    m.register_full_backward_pre_hook(lambda mod, go: (go[0].double(),))
    with pytest.raises(RuntimeError, match="changed the type of value"):
        m(x).sum().backward()
    with pytest.raises(TypeError, match="register_full_backward_hook\\(hook=\\)"):
        m.register_full_backward_hook(3)


def test_non_tensor_output_warns_and_skips_hooks():
    def run(lib):
        mod, nnmod = LIBS[lib]

        class L(nnmod.Module):
            def forward(self, a):
                return [a * 2, a * 3]

        m, calls = L(), []
        m.register_full_backward_hook(lambda *a: calls.append(1))
        a = mod.tensor([1.0], requires_grad=True)
        with pytest.warns(UserWarning, match="module output should be a Tensor or a tuple"):
            out = m(a)
        out[0].sum().backward()
        return {"calls": [np.array(len(calls))], "a": [_np(a.grad)]}

    assert _both(run)["calls"][0] == 0


def test_namedtuple_output_identity_module_and_retain_graph():
    Pair = namedtuple("Pair", ["x", "y"])

    def run(lib):
        mod, nnmod = LIBS[lib]

        class P(nnmod.Module):
            def forward(self, a):
                return Pair(a * 2, a)  # returns its input as is: still hooked

        m, seen = P(), []
        m.register_full_backward_hook(lambda mod_, gi, go: seen.append(_grads(gi) + _grads(go)))
        a = mod.tensor([1.0, -1.0], requires_grad=True)
        out = m(a)
        assert type(out) is Pair
        loss = (out.x * out.y).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        return {"first": seen[0], "second": seen[1], "a": [_np(a.grad)]}

    _both(run)


def test_no_grad_forward_installs_nothing_and_autograd_grad_runs_hooks():
    for lib in ("tp", "torch"):
        mod = LIBS[lib][0]
        m, calls = _linear(lib), []
        m.register_full_backward_hook(lambda *a: calls.append(1))
        with mod.no_grad():
            assert not m(_x(lib)).requires_grad
        x = _x(lib)
        (g,) = mod.autograd.grad(m(x).sum(), x)
        assert calls == [1], lib
        assert g.shape == (2, 3)


# ---- forward hooks: prepend and with_kwargs, against torch --------------------------------------


def test_forward_hooks_prepend_and_kwargs_match_torch():
    def run(lib):
        mod, nnmod = LIBS[lib]

        class M(nnmod.Module):
            def forward(self, a, scale=1.0):
                return a * scale

        m, calls = M(), []

        def pre_kw(mod_, args, kwargs):
            calls.append(("pre_kw", sorted(kwargs)))
            return args, {**kwargs, "scale": kwargs.get("scale", 1.0) * 2}

        def pre(mod_, args):
            calls.append(("pre", len(args)))
            return (args[0] + 1,)

        def post_kw(mod_, args, kwargs, out):
            calls.append(("post_kw", kwargs["scale"]))
            return out * 10

        def post(mod_, args, out):
            calls.append(("post", float(args[0].sum())))

        m.register_forward_pre_hook(pre)
        m.register_forward_pre_hook(pre_kw, with_kwargs=True, prepend=True)
        m.register_forward_hook(post)
        m.register_forward_hook(post_kw, with_kwargs=True, prepend=True)
        out = m(mod.tensor([1.0, 2.0]), scale=3.0)
        return calls, _np(out)

    (tp_calls, tp_out), (torch_calls, torch_out) = run("tp"), run("torch")
    assert tp_calls == torch_calls
    np.testing.assert_allclose(tp_out, torch_out)
