"""Derivatives of every op-table row, generated from the table.

For each row whose float64 samples (``optable_samples.py``) have floating outputs:
reverse mode (``vjp``) against central finite differences, second order (the ``vjp``
differentiated again with ``create_graph=True``), and forward mode (``jvp``) against the
same Jacobian. A row that has floating outputs but no ``vjp``/``jvp`` fails the coverage
test: adding a differentiable row means adding its derivatives.
"""

from __future__ import annotations

import numpy as np
import pytest
from optable_samples import samples

import tensorplay as tp
from tensorplay._optable import ROWS
from tensorplay.autograd._record import _Ctx
from tensorplay.autograd.forward_ad import _Ctx as _ForwardCtx

EPS = 1e-6
RTOL = ATOL = 1e-5
ROW_IDS = [r.name for r in ROWS]

# samples that sit exactly where the op is not differentiable
_AT_A_KINK = {("round", "halves"): "exactly at round's jumps (x.5)"}
# rows whose gradient picks among equal elements: not differentiable where values repeat
_TIES = {"amax", "amin", "_max_all", "_min_all", "max_dim", "min_dim"}
# derivatives refused on purpose (with NotImplementedError naming the op)
_REFUSED = {("scatter", "multiply"): "scatter(reduce='multiply') has no derivative (as in torch)"}
# rows with no derivative at any input (as in torch): their vjp and jvp raise
# NotImplementedError, checked in tests/core/test_sorting_ops.py
_NO_DERIVATIVE = {"unique"}


# ---- a sample's tensor inputs --------------------------------------------------------------


def _slots(row, args) -> list:
    """Where each tensor input of ``row`` sits in ``args``, in the order vjp returns grads."""
    if row.n_inputs == "seq":
        return [(0, k) for k in range(len(args[0]))]
    if row.n_inputs == "star":
        return [(i,) for i in range(1, len(args))]
    return [(i,) for i in range(row.n_inputs)]


def _get(args, slot):
    if len(slot) == 2:
        return args[0][slot[1]]
    return args[slot[0]] if slot[0] < len(args) else None


def _put(args, slot, value) -> tuple:
    args = list(args)
    if len(slot) == 2:
        seq = list(args[0])
        seq[slot[1]] = value
        args[0] = seq
    else:
        args[slot[0]] = value
    return tuple(args)


def _is_float(x) -> bool:
    return isinstance(x, tp.Tensor) and (x.dtype.is_floating_point or x.dtype.is_complex)


def _float_outputs(result) -> list:
    outs = result if isinstance(result, tuple) else (result,)
    return [o for o in outs if _is_float(o)]


def _flat(tensors) -> np.ndarray:
    parts = [np.asarray(t.detach()).reshape(-1) for t in tensors]
    return np.concatenate(parts) if parts else np.zeros(0)


class Case:
    """One sample of one row, with its float inputs made leaves that require grad."""

    def __init__(self, row, s):
        self.row, self.sample = row, s
        self.slots = [sl for sl in _slots(row, s.args) if _is_float(_get(s.args, sl))]
        self.args = s.args
        self.leaves = []
        for sl in self.slots:
            leaf = _get(s.args, sl).detach()  # keeps the sample's layout (strided, expanded)
            leaf.requires_grad = True
            self.args = _put(self.args, sl, leaf)
            self.leaves.append(leaf)
        self.base = [np.array(np.asarray(x.detach())) for x in self.leaves]

    def run(self, args):
        return self.row.fn(*args, **self.sample.kwargs)

    def at(self, values) -> tuple:
        """The sample's args with its float inputs replaced by (contiguous) ``values``."""
        args = self.args
        for sl, v in zip(self.slots, values):
            args = _put(args, sl, tp.tensor(v, dtype=tp.float64))
        return args

    def f(self, values) -> np.ndarray:
        with tp.no_grad():
            return _flat(_float_outputs(self.run(self.at(values))))

    def jacobian(self, fn=None) -> list:
        """Central differences: one (outputs x elements) matrix per float input."""
        fn = fn or self.f
        jac = []
        for j, x in enumerate(self.base):
            cols = []
            for k in range(x.size):
                hi, lo = [v.copy() for v in self.base], [v.copy() for v in self.base]
                hi[j].reshape(-1)[k] += EPS
                lo[j].reshape(-1)[k] -= EPS
                with np.errstate(all="ignore"):  # inf - inf where the op is not finite
                    cols.append((fn(hi) - fn(lo)) / (2 * EPS))
            jac.append(np.stack(cols, axis=1) if cols else np.zeros((fn(self.base).size, 0)))
        return jac


def _cases(row):
    for s in samples(row, tp.float64):
        case = Case(row, s)
        if not case.leaves:
            continue  # integer-only inputs: nothing to differentiate
        if (row.name, s.name) in _AT_A_KINK:
            continue
        if row.name == "std" and bool((row.fn(*s.args, **s.kwargs).abs() < 1e-8).any()):
            continue  # sqrt at a zero variance
        if row.name in _TIES or (row.name == "norm" and abs(s.kwargs.get("p", 2)) == np.inf):
            if any(np.unique(b).size < b.size for b in case.base):
                continue  # repeated values: a tie for the extreme
        yield case


def _differentiable(row) -> bool:
    for s in samples(row, tp.float64):
        try:
            out = row.fn(*s.args, **s.kwargs)
        except (RuntimeError, TypeError, NotImplementedError):
            continue
        if _float_outputs(out):
            return True
    return False


DIFFERENTIABLE = [r for r in ROWS if r.name not in _NO_DERIVATIVE and _differentiable(r)]
DIFF_IDS = [r.name for r in DIFFERENTIABLE]


def _close(got, want, what):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    finite = np.isfinite(want)  # finite differences across a nan/inf say nothing
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL, atol=ATOL, err_msg=what)


def _refused(case):
    reason = _REFUSED.get((case.row.name, case.sample.name))
    if reason is not None:
        with pytest.raises(NotImplementedError):
            out = _float_outputs(case.run(case.args))
            tp.autograd.grad(out, case.leaves, [tp.ones_like(o) for o in out], allow_unused=True)
    return reason is not None


def _random_like(tensors, rng) -> list:
    return [tp.tensor(rng.standard_normal(tuple(t.shape)), dtype=t.dtype) for t in tensors]


# ---- coverage ------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_every_differentiable_row_has_vjp_and_jvp(row):
    if row not in DIFFERENTIABLE:
        pytest.skip(f"{row.name} has no floating-point output: nothing to differentiate")
    assert row.vjp is not None, f"op-table row {row.name!r} has floating outputs but no vjp"
    assert row.jvp is not None, f"op-table row {row.name!r} has floating outputs but no jvp"


# ---- reverse mode against finite differences ---------------------------------------------


@pytest.mark.parametrize("row", DIFFERENTIABLE, ids=DIFF_IDS)
def test_vjp_matches_finite_differences(row):
    rng = np.random.default_rng(0)
    checked = 0
    for case in _cases(row):
        if _refused(case):
            continue
        outs = _float_outputs(case.run(case.args))
        v = _random_like(outs, rng)
        grads = tp.autograd.grad(outs, case.leaves, v, allow_unused=True)
        vflat = _flat(v)
        for leaf, g, jac in zip(case.leaves, grads, case.jacobian()):
            want = (vflat @ jac).reshape(tuple(leaf.shape))
            got = np.zeros(want.shape) if g is None else np.asarray(g)
            _close(got, want, f"{row.name} {case.sample}: vjp")
        checked += 1
    assert checked, f"{row.name}: no float64 sample to check"


@pytest.mark.parametrize("row", DIFFERENTIABLE, ids=DIFF_IDS)
def test_gradcheck_passes(row):
    """The shared ``tp.autograd.gradcheck`` (full Jacobians, one-hot backward passes) on
    contiguous copies of the inputs: it perturbs them in place, which an expanded input
    forbids. Samples with non-finite outputs say nothing there and are left out."""
    checked = 0
    for case in _cases(row):
        if (row.name, case.sample.name) in _REFUSED:
            continue
        with tp.no_grad():
            outs = _float_outputs(case.run(case.args))
        if not all(np.isfinite(np.asarray(o)).all() for o in outs):
            continue
        leaves = tuple(tp.tensor(b, dtype=tp.float64, requires_grad=True) for b in case.base)

        def fn(*xs, case=case):
            args = case.args
            for sl, x in zip(case.slots, xs):
                args = _put(args, sl, x)
            return tuple(_float_outputs(case.run(args)))

        assert tp.autograd.gradcheck(fn, leaves, eps=EPS, atol=ATOL, rtol=1e-3)
        checked += 1
    assert checked, f"{row.name}: no float64 sample with finite outputs"


# ---- forward mode against the same Jacobian ---------------------------------------------


def _jvp(case, tangents):
    """``row.jvp`` on a forward-mode ctx for the call: the inputs and params autograd
    recorded, and the call's result."""
    # the node keeps the inputs only when its vjp reads them: here it must keep them all
    row = case.row
    cached = row.__dict__.get("_saves")
    row._saves = (True, True)
    try:
        result = case.run(case.args)
    finally:
        if cached is None:
            del row._saves
        else:
            row._saves = cached
    outs = _float_outputs(result)
    recorded = _Ctx(outs[0].grad_fn)
    ctx = _ForwardCtx(tuple(recorded.inputs), recorded.params, result)
    n = len(_slots(case.row, case.args)) if case.row.n_inputs in ("seq", "star") else None
    aligned = [None] * (n if n is not None else len(ctx.inputs))
    for sl, t in zip(case.slots, tangents):
        aligned[sl[-1] - (1 if case.row.n_inputs == "star" else 0)] = t
    with tp.no_grad():
        res = case.row.jvp(ctx, *aligned)
    res = res if isinstance(res, tuple) else (res,)
    return [
        r.expand(*o.shape) if tuple(r.shape) != tuple(o.shape) else r for r, o in zip(res, outs)
    ]


@pytest.mark.parametrize("row", DIFFERENTIABLE, ids=DIFF_IDS)
def test_jvp_matches_finite_differences(row):
    rng = np.random.default_rng(1)
    checked = 0
    for case in _cases(row):
        if (row.name, case.sample.name) in _REFUSED:
            continue
        u = _random_like(case.leaves, rng)
        got = _flat(_jvp(case, u))
        want = sum(jac @ np.asarray(t).reshape(-1) for jac, t in zip(case.jacobian(), u))
        _close(got, want, f"{row.name} {case.sample}: jvp")
        checked += 1
    assert checked, f"{row.name}: no float64 sample to check"


# ---- second order: the vjp differentiated again -----------------------------------------


@pytest.mark.parametrize("row", DIFFERENTIABLE, ids=DIFF_IDS)
def test_vjp_of_vjp_matches_finite_differences(row):
    """d/dx of w . vjp(x, v): the backward formulas are themselves differentiable."""
    rng = np.random.default_rng(2)
    checked = 0
    for case in _cases(row):
        if (row.name, case.sample.name) in _REFUSED:
            continue
        outs = _float_outputs(case.run(case.args))
        v = _random_like(outs, rng)
        grads = tp.autograd.grad(outs, case.leaves, v, create_graph=True, allow_unused=True)
        w = _random_like(case.leaves, rng)
        live = [(g, wi) for g, wi in zip(grads, w) if g is not None and g.requires_grad]
        if live:
            second = tp.autograd.grad(
                [g for g, _ in live], case.leaves, [wi for _, wi in live], allow_unused=True
            )
        else:  # the gradient does not depend on the inputs (a linear op)
            second = [None] * len(case.leaves)

        def first(values, case=case, v=v, w=w):
            leaves = [tp.tensor(x, dtype=tp.float64, requires_grad=True) for x in values]
            args = case.args
            for sl, leaf in zip(case.slots, leaves):
                args = _put(args, sl, leaf)
            out = _float_outputs(case.run(args))
            gs = tp.autograd.grad(out, leaves, v, allow_unused=True)
            return np.array(
                [
                    sum(
                        float((np.asarray(g) * np.asarray(wi)).sum())
                        for g, wi in zip(gs, w)
                        if g is not None
                    )
                ]
            )

        for leaf, s2, jac in zip(case.leaves, second, case.jacobian(first)):
            want = jac.reshape(tuple(leaf.shape))
            got = np.zeros(want.shape) if s2 is None else np.asarray(s2)
            _close(got, want, f"{row.name} {case.sample}: second order")
        checked += 1
    assert checked, f"{row.name}: no float64 sample to check"


# ---- complex: PyTorch's convention (the conjugate Wirtinger derivative) ------------------

COMPLEX = [r for r in DIFFERENTIABLE if "c" in r.allow]


def _to_torch(x, torch, leaves):
    if isinstance(x, tp.Tensor):
        t = torch.from_numpy(np.array(np.asarray(x.detach())))
        if x.dtype.is_complex:
            t = t.to(torch.complex128).requires_grad_()
            leaves.append(t)
        return t
    if isinstance(x, (list, tuple)):
        return type(x)(_to_torch(y, torch, leaves) for y in x)
    return x


@pytest.mark.parametrize("row", COMPLEX, ids=[r.name for r in COMPLEX])
def test_complex_gradients_match_torch(row):
    torch = pytest.importorskip("torch", reason="torch is the oracle for complex gradients")
    tfn = getattr(torch, row.name, None)
    if tfn is None:
        pytest.skip(f"torch has no {row.name}()")
    rng = np.random.default_rng(3)
    checked = 0
    for s in samples(row, tp.complex64):
        case = Case(row, s)
        leaves = []
        try:
            want_out = tfn(*_to_torch(s.args, torch, leaves), **s.kwargs)
        except (RuntimeError, TypeError):
            continue  # torch refuses this call
        if not leaves or (row.name, s.name) in _REFUSED:
            continue
        want_out = want_out if isinstance(want_out, tuple) else (want_out,)
        if not all(torch.isfinite(o).all() for o in want_out if o.is_floating_point()):
            continue
        # the same call in complex128, so that both sides round alike
        args = case.args
        for sl, leaf in zip(case.slots, case.leaves):
            wide = leaf.detach().to(tp.complex128 if leaf.dtype.is_complex else tp.float64)
            wide.requires_grad = True
            args = _put(args, sl, wide)
        wide_leaves = [_get(args, sl) for sl in case.slots]
        outs = _float_outputs(case.run(args))
        v = [
            rng.standard_normal(tuple(o.shape)) + 1j * rng.standard_normal(tuple(o.shape))
            for o in outs
        ]
        v = [np.asarray(x if o.dtype.is_complex else x.real) for x, o in zip(v, outs)]
        try:
            want = torch.autograd.grad(
                [o for o in want_out if o.is_floating_point() or o.is_complex()],
                leaves,
                [torch.from_numpy(x) for x in v],
                allow_unused=True,
            )
        except RuntimeError:
            continue  # torch has no derivative here (scatter with a src larger than index)
        got = tp.autograd.grad(outs, wide_leaves, [tp.tensor(x) for x in v], allow_unused=True)
        for g, w, leaf in zip(got, want, wide_leaves):
            g = np.zeros(tuple(leaf.shape)) if g is None else np.asarray(g)
            w = np.zeros(tuple(leaf.shape)) if w is None else w.resolve_conj().numpy()
            np.testing.assert_allclose(g, w, rtol=1e-7, atol=1e-9, err_msg=f"{row.name} {s}")
        checked += 1
    if not checked:
        pytest.skip(f"torch runs none of {row.name}'s complex samples with a gradient")


# ---- forward mode through the dispatcher agrees with reverse mode ------------------------------


@pytest.mark.parametrize("row", DIFFERENTIABLE, ids=DIFF_IDS)
def test_forward_mode_agrees_with_reverse_mode(row):
    """The dot-product test <v, J u> == <J^T v, u>: forward mode (dual tensors through the
    dispatcher, ``row.jvp``) on the left, reverse mode (``row.vjp``) on the right."""
    from tensorplay.autograd import forward_ad as fwAD

    rng = np.random.default_rng(3)
    checked = 0
    for case in _cases(row):
        if (row.name, case.sample.name) in _REFUSED:
            continue
        u = _random_like(case.leaves, rng)
        outs = _float_outputs(case.run(case.args))
        v = _random_like(outs, rng)
        grads = tp.autograd.grad(outs, case.leaves, v, allow_unused=True)
        reverse = sum(
            float((g.detach() * t).sum().item()) for g, t in zip(grads, u) if g is not None
        )
        with fwAD.dual_level():
            args = case.args
            for sl, leaf, t in zip(case.slots, case.leaves, u):
                args = _put(args, sl, fwAD.make_dual(leaf.detach(), t))
            tangents = [fwAD.unpack_dual(o).tangent for o in _float_outputs(case.run(args))]
        forward = sum(
            float((vk * tk).sum().item()) for vk, tk in zip(v, tangents) if tk is not None
        )
        np.testing.assert_allclose(forward, reverse, rtol=1e-7, atol=1e-9, err_msg=str(case.sample))
        checked += 1
    assert checked, f"{row.name}: no float64 sample to check"
