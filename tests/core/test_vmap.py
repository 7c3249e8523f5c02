"""``tp.vmap`` (issue 19, first part): every op-table row batched agrees with the loop over
the batch (``stack([f(x_i) for x_i in x])``), for every choice of which tensor argument is
batched, nested, and with ``out_dims``; per-sample gradients; randomness; custom ops'
``register_vmap`` rules; argument errors. Rows without a batching rule run as a loop
(with a PerformanceWarning): the values must be right either way."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from optable_samples import TOL, samples

import tensorplay as tp
from tensorplay._optable import ROWS
from tensorplay._vmap import PerformanceWarning

pytestmark = pytest.mark.filterwarnings("ignore::tensorplay._vmap.PerformanceWarning")

B = 3
# data-dependent result shapes: one sample's shape is not another's (torch refuses too)
_SKIP = {"nonzero", "argwhere", "unique", "masked_select", "repeat_interleave", "as_strided"}
PUBLIC = [r for r in ROWS if r.name[0] != "_" and r.name not in _SKIP]


def _same_structure(a, b) -> bool:
    if isinstance(a, tp.Tensor) or isinstance(b, tp.Tensor):
        return (
            isinstance(a, tp.Tensor) and isinstance(b, tp.Tensor) and a.shape == b.shape
            and a.dtype is b.dtype
        )  # fmt: skip
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same_structure, a, b))
    return type(a) is type(b) and (a == b if not isinstance(a, float) else True)


def _close(got, want, dt):
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, dt)
        return
    assert isinstance(got, tp.Tensor), type(got)
    assert got.shape == want.shape and got.dtype is want.dtype, (got.shape, want.shape)
    rtol, atol = TOL.get(want.dtype, (0, 0))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol, equal_nan=True)


def _stack_results(results):
    first = results[0]
    if isinstance(first, (tuple, list)):
        return tuple(_stack_results([r[i] for r in results]) for i in range(len(first)))
    return tp.stack(results)


def _batches(row, dt):
    """(call, positions of tensor args, per-sample args) for the row's first samples that
    run: B samples of the same structure, from different seeds."""
    out = []
    for k, base in enumerate(samples(row, dt, seed=0)[:4]):
        group = [base]
        for seed in range(1, B):
            more = samples(row, dt, seed=seed)
            if len(more) <= k or not _same_structure(base.args, more[k].args):
                break
            group.append(more[k])
        if len(group) < B or base.kwargs != group[-1].kwargs:
            continue
        try:
            for s in group:
                row.fn(*s.args, **s.kwargs)
        except Exception:  # noqa: BLE001 - samples that must raise are test_optable's
            continue
        slots = _tensor_slots(base.args)
        if slots:
            out.append((base.kwargs, slots, [s.args for s in group]))
    return out


def _tensor_slots(args) -> list:
    """Where the tensor arguments are: ``(i,)``, or ``(i, j)`` for element j of a list
    argument (cat's and stack's tensors)."""
    slots = []
    for i, a in enumerate(args):
        if isinstance(a, tp.Tensor):
            slots.append((i,))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(t, tp.Tensor) for t in a):
            slots.extend((i, j) for j in range(len(a)))
    return slots


_KEEP = object()


def _replace(args, pick, rest=_KEEP):
    """``args`` with the value at each tensor slot replaced by ``pick(slot)`` (and the other
    arguments by ``rest``, if given)."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, tp.Tensor):
            out.append(pick((i,)))
        elif isinstance(a, (list, tuple)) and a and all(isinstance(t, tp.Tensor) for t in a):
            out.append(type(a)(pick((i, j)) for j in range(len(a))))
        else:
            out.append(a if rest is _KEEP else rest)
    return out


def _get(args, slot):
    return args[slot[0]][slot[1]] if len(slot) == 2 else args[slot[0]]


@pytest.mark.parametrize("row", PUBLIC, ids=lambda r: r.name)
def test_every_row_batched_matches_the_loop(row):
    dt = tp.float64 if "f" in row.allow else tp.int64 if "i" in row.allow else tp.bool
    cases = _batches(row, dt)
    if not cases:
        pytest.skip(f"{row.name}: no deterministic sample of one structure to batch")
    for kwargs, slots, group in cases:
        choices = [tuple(slots)] + [(k,) for k in slots if len(slots) > 1]
        for batched in choices:
            args = _replace(
                group[0],
                lambda k, b=batched: (
                    tp.stack([_get(g, k) for g in group]) if k in b else _get(group[0], k)
                ),
            )
            in_dims = tuple(
                _replace(group[0], lambda k, b=batched: 0 if k in b else None, rest=None)
            )

            def f(*a, kwargs=kwargs):
                return row.fn(*a, **kwargs)

            per_sample = [
                f(*_replace(g, lambda k, b=batched, g=g: _get(g if k in b else group[0], k)))
                for g in group
            ]
            want = _stack_results(per_sample)
            got = tp.vmap(f, in_dims=in_dims)(*args)
            _close(got, want, dt)
            # nested: an outer batch of two, the samples in order and reversed
            rev = group[::-1]
            outer = _replace(
                group[0],
                lambda k, b=batched: (
                    tp.stack([tp.stack([_get(g, k) for g in grp]) for grp in (group, rev)])
                    if k in b
                    else _get(group[0], k)
                ),
            )
            nested = tp.vmap(tp.vmap(f, in_dims=in_dims), in_dims=in_dims)(*outer)
            _close(nested, _stack_results([want, _stack_results(per_sample[::-1])]), dt)


def test_nested_vmap_and_out_dims():
    x = tp.randn(2, 3, 4, dtype=tp.float64)
    w = tp.randn(4, 5, dtype=tp.float64)
    f = lambda v: (v @ w).tanh().sum(-1)  # noqa: E731
    got = tp.vmap(tp.vmap(f))(x)
    np.testing.assert_allclose(got.numpy(), np.tanh(x.numpy() @ w.numpy()).sum(-1))
    moved = tp.vmap(lambda v: v * 2, in_dims=1, out_dims=1)(x)
    np.testing.assert_allclose(moved.numpy(), x.numpy() * 2)
    inner_out = tp.vmap(tp.vmap(lambda v: v.exp(), out_dims=1))(x)  # (2, 4, 3)
    np.testing.assert_allclose(inner_out.numpy(), np.exp(x.numpy()).transpose(0, 2, 1))
    # pytrees in and out, in_dims=None, negative dims
    w2 = tp.randn(3, 5, dtype=tp.float64)
    d = {"a": x, "b": (w2,)}
    r = tp.vmap(
        lambda t: {"s": t["a"] @ t["b"][0], "c": t["b"][0]}, in_dims=({"a": -1, "b": None},)
    )(d)
    np.testing.assert_allclose(r["s"].numpy(), np.moveaxis(x.numpy(), -1, 0) @ w2.numpy())
    assert r["c"].shape == (4, 3, 5)  # an output that does not depend on the batch: expanded
    with pytest.raises(RuntimeError, match="as_strided inside vmap"):
        tp.vmap(lambda v: v.as_strided((2,), (1,)))(x)


def test_chunk_size_gives_the_same_result():
    x = tp.randn(10, 3, dtype=tp.float64)
    f = lambda v: (v.softmax(0) * v).sum()  # noqa: E731
    np.testing.assert_allclose(
        tp.vmap(f, chunk_size=3)(x).numpy(), tp.vmap(f)(x).numpy(), rtol=1e-12
    )


def test_per_sample_gradients_match_the_loop():
    tp.manual_seed(0)
    w = tp.randn(3, 2, dtype=tp.float64)
    xs, ys = tp.randn(6, 3, dtype=tp.float64), tp.randn(6, 2, dtype=tp.float64)

    def grad_of_loss(w, x, y):
        w = w.detach().requires_grad_()
        loss = ((x @ w - y) ** 2).mean()
        (g,) = tp.autograd.grad(loss, w)
        return g

    got = tp.vmap(grad_of_loss, in_dims=(None, 0, 0))(w, xs, ys)
    want = tp.stack([grad_of_loss(w, xs[i], ys[i]) for i in range(6)])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    torch = pytest.importorskip("torch")
    tw = torch.from_numpy(w.numpy())

    def tloss(w, x, y):
        return ((x @ w - y) ** 2).mean()

    tg = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(
        tw, torch.from_numpy(xs.numpy()), torch.from_numpy(ys.numpy())
    )
    np.testing.assert_allclose(got.numpy(), tg.numpy(), rtol=1e-12)


def test_randomness():
    x = tp.zeros(4, 3)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        tp.vmap(lambda v: v + tp.rand(3))(x)
    same = tp.vmap(lambda v: v + tp.rand(3), randomness="same")(x)
    assert all((same[i] == same[0]).all() for i in range(4))
    different = tp.vmap(lambda v: v + tp.rand(3), randomness="different")(x)
    assert not (different[1] == different[0]).all()
    with pytest.raises(ValueError, match="randomness"):
        tp.vmap(lambda v: v, randomness="sometimes")


def test_a_row_without_a_rule_warns_once_and_is_right():
    from tensorplay import _vmap

    _vmap._warned.discard("sort")
    x = tp.randn(4, 5, dtype=tp.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = tp.vmap(lambda v: tp.sort(v, dim=0).values.cumsum(0))(x)
        tp.vmap(lambda v: tp.sort(v, dim=0).values)(x)
    perf = [w for w in caught if issubclass(w.category, PerformanceWarning)]
    assert len(perf) <= 1  # sort has a rule now; a loop would warn once, naming the op
    np.testing.assert_allclose(got.numpy(), np.sort(x.numpy(), axis=1).cumsum(1))


def test_custom_op_rule_and_loop():
    library = pytest.importorskip("tensorplay.library")
    seen = []
    with library._scoped_library("vmaptest", "FRAGMENT") as lib:
        lib.define("scale(Tensor x, float s) -> Tensor")
        lib.impl("scale", lambda x, s: x * s)
        op = tp.ops.vmaptest.scale
        x = tp.randn(4, 3, dtype=tp.float64)
        looped = tp.vmap(lambda v: op(v, 2.0))(x)  # no rule: a loop
        np.testing.assert_allclose(looped.numpy(), x.numpy() * 2)

        @library.register_vmap(op, lib=lib)
        def rule(info, in_dims, x, s):
            seen.append((info.batch_size, info.randomness, in_dims))
            return op(x, s), in_dims[0]

        got = tp.vmap(lambda v: op(v, 3.0), in_dims=1)(x.t())
        np.testing.assert_allclose(got.numpy(), x.numpy() * 3)
    assert seen == [(4, "error", (0, None))]


def test_bad_arguments_are_clear_errors():
    x = tp.ones(3, 2)
    with pytest.raises(ValueError, match="different batch sizes"):
        tp.vmap(lambda a, b: a + b)(x, tp.ones(4, 2))
    with pytest.raises(ValueError, match="at least one argument must be batched"):
        tp.vmap(lambda a: a, in_dims=None)(x)
    with pytest.raises(ValueError, match="out of range"):
        tp.vmap(lambda a: a, in_dims=2)(x)
    with pytest.raises(ValueError, match="not a tensor"):
        tp.vmap(lambda a, n: a * n)(x, 3)
    with pytest.raises(ValueError, match="must return tensors"):
        tp.vmap(lambda a: "nope")(x)
    with pytest.raises(TypeError, match="func must be callable"):
        tp.vmap(3)
    with pytest.raises(RuntimeError, match="not batched"):
        tp.vmap(lambda a, b: b.add_(a), in_dims=(0, None))(x, tp.zeros(2))
    assert tp.func.vmap is tp.vmap


def test_grad_of_a_vmapped_function_reaches_batched_and_captured_tensors():
    tp.manual_seed(1)
    x = tp.randn(5, 3, dtype=tp.float64, requires_grad=True)
    w = tp.randn(3, 4, dtype=tp.float64, requires_grad=True)
    y = tp.vmap(lambda v: tp.tanh(v @ w).sum(), in_dims=0)(x)
    y.sum().backward()
    xx, ww = x.detach().requires_grad_(), w.detach().requires_grad_()
    tp.tanh(xx @ ww).sum().backward()
    assert type(x.grad) is tp.Tensor and type(w.grad) is tp.Tensor  # the batch summed out
    np.testing.assert_allclose(x.grad.numpy(), xx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), ww.grad.numpy(), rtol=1e-12)
    gx, gw = tp.autograd.grad(
        tp.vmap(lambda v: (v @ w).exp().sum(), in_dims=1)(x.t()).sum(), (x, w)
    )
    gx2, gw2 = tp.autograd.grad((xx @ ww).exp().sum(), (xx, ww))
    np.testing.assert_allclose(gx.numpy(), gx2.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), gw2.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="backward\\(\\) inside vmap"):
        tp.vmap(lambda v: (v * w.sum()).sum().backward() or v)(x.detach())


def test_jacrev_matches_the_loop_and_torch():
    tp.manual_seed(2)
    w = tp.randn(6, 4, dtype=tp.float64)

    def f(x, scale):
        return tp.tanh(w @ x) * scale

    x = tp.randn(4, dtype=tp.float64)
    got = tp.func.jacrev(f)(x, 2.0)
    want = tp.autograd.functional.jacobian(lambda v: f(v, 2.0), x)
    assert got.shape == (6, 4)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    m = tp.randn(3, 2, dtype=tp.float64)
    j = tp.func.jacrev(lambda a: (a * a).sum(0))(m)  # (2,) output, (3, 2) input
    want2 = np.zeros((2, 3, 2))
    for o in range(2):  # d/dm[i, k] of sum_i m[i, o]^2 is 2 m[i, o] where k == o
        want2[o, :, o] = 2 * m.numpy()[:, o]
    np.testing.assert_allclose(j.numpy(), want2)
    with pytest.raises(TypeError, match=r"argument 0 \(in argnums\) must be a Tensor"):
        tp.func.jacrev(f)(3.0, 1.0)
    torch = pytest.importorskip("torch")
    tw = torch.from_numpy(w.numpy())
    tj = torch.func.jacrev(lambda v: torch.tanh(tw @ v) * 2.0)(torch.from_numpy(x.numpy()))
    np.testing.assert_allclose(got.numpy(), tj.numpy(), rtol=1e-12)


def test_autograd_function_vmap_rules():
    class Cube(tp.autograd.Function):
        generate_vmap_rule = True  # its forward batches itself

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x * x * g

    x = tp.randn(4, 3, dtype=tp.float64, requires_grad=True)
    y = tp.vmap(lambda v: Cube.apply(v).sum())(x)
    np.testing.assert_allclose(y.detach().numpy(), (x.detach().numpy() ** 3).sum(1))
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * x.detach().numpy() ** 2)

    seen = []

    class Double(tp.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return tp.from_numpy(x.numpy() * 2)  # not batchable by itself

        @staticmethod
        def vmap(info, in_dims, x):
            seen.append((info.batch_size, in_dims))
            return x * 2, in_dims[0]

    z = tp.randn(5, 2, dtype=tp.float64)
    np.testing.assert_allclose(tp.vmap(Double.apply)(z).numpy(), z.numpy() * 2)
    assert seen == [(5, (0,))]

    class Neither(tp.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x + 1

    with pytest.raises(RuntimeError, match="generate_vmap_rule = True"):
        tp.vmap(Neither.apply)(z)
    assert Neither.apply(z[0]).tolist() == (z[0] + 1).tolist()  # outside vmap: as always


@pytest.mark.parametrize("name", ["log_softmax", "softmax", "relu"])
def test_per_sample_gradients_through_backward_ops_do_not_loop(name):
    # their backward passes are ops of their own (_log_softmax_backward_data, ...): those
    # need batching rules too, or per-sample gradients fall back to the loop
    w, x = tp.randn(5, 3), tp.randn(4, 5)

    def loss(w, x):
        return getattr(x @ w, name)(**({} if name == "relu" else {"dim": -1}))[0]

    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = tp.func.vmap(tp.func.grad(loss), in_dims=(None, 0))(w, x)
    want = tp.stack([tp.func.grad(loss)(w, x[i]) for i in range(4)])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
