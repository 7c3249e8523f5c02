"""Tests generated from the op table: every row × dtype × sample against the numpy oracle,
meta execution, out=, in-place variants and PyTorch's result dtypes.

A new row in ``tensorplay._optable.ROWS`` is picked up automatically; it must get
samples and a reference in ``optable_samples.py`` (``test_every_row_is_covered``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from optable_samples import (
    ALL_DTYPES,
    DTYPES,
    REF,
    Sample,
    allowed,
    assert_close,
    reference,
    sample_fn,
    samples,
    to_device,
    to_meta,
)

import tensorplay as tp
from tensorplay import _dtype as D
from tensorplay._optable import ROWS

ROW_IDS = [r.name for r in ROWS]


def _call(row, s: Sample):
    return row.fn(*s.args, **s.kwargs)


def _promoted(row, s: Sample):
    """The dtype the row's allow-list is checked against (the call's promoted dtype)."""
    if row.name == "where":
        xs = list(s.args[1:])
    elif row.n_inputs == "seq":
        xs = list(s.args[0])
    elif row.name == "einsum":
        xs = list(s.args[1:])
    elif row.promote == "first" or row.cast == (0,):
        return s.args[0].dtype
    elif row.name == "clamp":
        xs = [s.args[0]] + list(s.args[1:]) + [v for v in s.kwargs.values()]
    else:
        n = row.n_inputs if isinstance(row.n_inputs, int) else len(s.args)
        xs = list(s.args[:n])
    dims, zeros, scalars = [], [], []
    for x in xs:
        if isinstance(x, tp.Tensor):
            (dims if x.dim() else zeros).append(x.dtype)
        elif x is not None:
            scalars.append(D.scalar_dtype(x))
    return D.result_type_of(dims, zeros, scalars)


def _is_bool(x):
    return isinstance(x, bool) or getattr(x, "dtype", None) is tp.bool


# calls PyTorch refuses although promotion alone would allow them
_REFUSED = {
    "sub": lambda s: any(_is_bool(x) for x in s.args),  # bool - anything
    "pow": lambda s: all(isinstance(x, tp.Tensor) and x.dtype is tp.bool for x in s.args),
}


def _expect_ok(row, s):
    """True when the call must succeed (its promoted dtype is in the row's allow-list and
    the row's dtype rule accepts it)."""
    if _REFUSED.get(row.name, lambda s: False)(s):
        return False
    p = _promoted(row, s)
    if not allowed(row, p):
        return False
    # einsum's dtype rule reads its equation (the first positional argument)
    params = dict(s.kwargs, equation=s.args[0]) if row.name == "einsum" else s.kwargs
    try:
        row.dtype(p, params)
    except RuntimeError:
        return False
    return True


# ---- coverage: no row without samples and a reference -----------------------------------


@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_every_row_is_covered(row):
    assert sample_fn(row) is not None, (
        f"op-table row {row.name!r} has no sample inputs: add them in tests/core/optable_samples.py"
    )
    assert row.name in REF, f"op-table row {row.name!r} has no numpy reference"
    n = sum(len(samples(row, dt)) for dt in DTYPES)
    assert n > 0
    assert any(allowed(row, dt) and samples(row, dt) for dt in DTYPES), (
        f"{row.name}: no sample runs with an allowed dtype"
    )


# ---- values against numpy -------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_values_match_numpy(row, dt, device):
    checked = 0
    for s in samples(row, dt):
        on_dev = (
            s
            if device == "cpu"
            else Sample(to_device(s.args, device), to_device(s.kwargs, device), s.name, s.meta)
        )
        if not _expect_ok(row, s):
            with pytest.raises((TypeError, RuntimeError)):
                _call(row, on_dev)
            checked += 1
            continue
        got = _call(row, on_dev)
        assert all(g.device.type == device for g in (got if isinstance(got, tuple) else [got]))
        want = reference(row, s)
        if row.multi or isinstance(want, tuple):
            assert isinstance(got, tuple) and len(got) == len(want), s
            for g, w in zip(got, want):
                assert_close(g, w, msg=f"{row.name} {s}")
        else:
            assert isinstance(got, tp.Tensor), s
            assert_close(got, want, msg=f"{row.name} {s}")
        checked += 1
    assert checked, f"{row.name}: no sample for {dt}"


def test_pointwise_results_are_fresh_contiguous_tensors():
    x = tp.arange(12.0).view(3, 4).t()
    for y in (tp.exp(x), x + 1, tp.add(x, x), x.sum(0)):
        assert y.is_contiguous()
        assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert y.untyped_storage().data_ptr() % 64 == 0


# ---- meta device: the meta rule agrees with the kernel ---------------------------------


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_meta_agrees_with_cpu(row, dt):
    checked = 0
    for s in samples(row, dt):
        if not s.meta:
            continue
        margs = tuple(to_meta(a) for a in s.args)
        mkw = {k: to_meta(v) for k, v in s.kwargs.items()}
        try:
            cpu = _call(row, s)
        except (TypeError, RuntimeError) as e:
            with pytest.raises(type(e)):
                row.fn(*margs, **mkw)
            checked += 1
            continue
        meta = row.fn(*margs, **mkw)
        cpus = cpu if isinstance(cpu, tuple) else (cpu,)
        metas = meta if isinstance(meta, tuple) else (meta,)
        assert len(cpus) == len(metas)
        for c, m in zip(cpus, metas):
            assert m.device.type == "meta", (row.name, s)
            assert tuple(m.shape) == tuple(c.shape), (row.name, s)
            assert m.dtype is c.dtype, (row.name, s)
        checked += 1
    assert checked, f"{row.name}: no sample ran on meta for {dt}"


def test_meta_empty_factory():
    x = tp.empty(2, 3, device="meta")
    assert x.device.type == "meta" and tuple(x.shape) == (2, 3) and x.dtype is tp.float32
    y = tp.exp(x) + tp.ones(3, device="meta")
    assert y.device.type == "meta" and tuple(y.shape) == (2, 3)
    with pytest.raises(NotImplementedError):
        x.numpy()


# ---- out= -------------------------------------------------------------------------------

OUT_ROWS = [r for r in ROWS if r.out]


def _first_ok_sample(row, dts=(tp.float32, tp.int64, tp.bool)):
    for dt in dts:
        for s in samples(row, dt):
            if _expect_ok(row, s) and s.meta:
                return s
    pytest.fail(f"{row.name}: no sample usable for out=")


@pytest.mark.parametrize("row", OUT_ROWS, ids=[r.name for r in OUT_ROWS])
def test_out(row):
    s = _first_ok_sample(row)
    want = _call(row, s)
    out = tp.empty(want.shape, dtype=want.dtype)
    v = out._version
    got = row.fn(*s.args, **s.kwargs, out=out)
    assert got is out
    assert out._version > v
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    # an empty out= is resized
    out2 = tp.empty(0, dtype=want.dtype)
    row.fn(*s.args, **s.kwargs, out=out2)
    assert tuple(out2.shape) == tuple(want.shape)
    np.testing.assert_array_equal(np.asarray(out2), np.asarray(want))
    # a wider out dtype of the same category is fine
    wide = {0: tp.bool, 1: tp.int64, 2: tp.float64, 3: tp.complex128}[want.dtype.category]
    out3 = tp.empty(want.shape, dtype=wide)
    row.fn(*s.args, **s.kwargs, out=out3)
    np.testing.assert_array_equal(np.asarray(out3), np.asarray(want).astype(wide.np))


@pytest.mark.parametrize("row", OUT_ROWS, ids=[r.name for r in OUT_ROWS])
def test_out_wrong_dtype_raises(row):
    for dt in (tp.float32, tp.complex64, tp.int64):
        for s in samples(row, dt):
            if not _expect_ok(row, s):
                continue
            want = _call(row, s)
            if want.dtype.category == 0:
                continue  # nothing is narrower than bool
            narrow = {1: tp.bool, 2: tp.int64, 3: tp.float32}[want.dtype.category]
            out = tp.empty(want.shape, dtype=narrow)
            v = out._version
            with pytest.raises(RuntimeError, match="can't be cast"):
                row.fn(*s.args, **s.kwargs, out=out)
            assert out._version == v
            return
    pytest.skip(f"{row.name} only produces bool results: no narrower out= dtype exists")


def test_out_wrong_shape_raises():
    with pytest.raises(RuntimeError, match="shape"):
        tp.add(tp.ones(2, 3), 1, out=tp.empty(3, 2))


def test_out_readonly_raises():
    arr = np.zeros(3, np.float32)
    arr.flags.writeable = False
    with pytest.raises(RuntimeError, match="read-only"):
        tp.add(tp.ones(3), 1, out=tp.from_numpy(arr))


# ---- in-place variants --------------------------------------------------------------------

INPLACE_ROWS = [r for r in ROWS if r.inplace_fn is not None]


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("row", INPLACE_ROWS, ids=[r.name for r in INPLACE_ROWS])
def test_inplace_matches_out_of_place(row, dt):
    checked = 0
    for s in samples(row, dt):
        x = s.args[0]
        if not isinstance(x, tp.Tensor) or any(st == 0 for st in x.stride()):
            continue  # expanded tensors cannot be written (tested below)
        try:
            want = _call(row, s)
        except (TypeError, RuntimeError):
            continue
        target = x.clone()
        args = (target,) + s.args[1:]
        refused = isinstance(row.inplace, str) and "bifc"[x.dtype.category] not in row.inplace
        if tuple(want.shape) != tuple(x.shape) or not tp.can_cast(want.dtype, x.dtype) or refused:
            with pytest.raises(RuntimeError):
                row.inplace_fn(*args, **s.kwargs)
            assert target._version == 0
            checked += 1
            continue
        v = target._version
        got = row.inplace_fn(*args, **s.kwargs)
        assert got is target
        assert target._version > v
        assert target.dtype is x.dtype
        # equal up to the last bit's rounding (numpy's 0-d and n-d loops may differ by an ulp)
        assert_close(target, np.asarray(want.to(x.dtype)), msg=f"{row.name}_ {s}")
        checked += 1
    if allowed(row, dt) and row.name not in ("masked_fill", "scatter"):
        assert checked, f"{row.name}_: no in-place sample ran for {dt}"


def test_inplace_basics():
    x = tp.tensor([1.0, 2.0, 3.0])
    v = x._version
    assert x.add_(tp.tensor([1.0, 1.0, 1.0])) is x
    assert x._version == v + 1
    assert x.tolist() == [2.0, 3.0, 4.0]
    x += 1
    assert x._version == v + 2 and x.tolist() == [3.0, 4.0, 5.0]
    view = x[1:]
    view.mul_(2)
    assert x.tolist() == [3.0, 8.0, 10.0] and x._version == view._version == v + 3


def test_inplace_broadcast_the_wrong_way_raises():
    x = tp.ones(1, 4)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x.add_(tp.ones(3, 4))
    assert x.tolist() == [[1.0] * 4]


def test_inplace_int_add_float_raises():
    x = tp.tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.add_(tp.tensor([0.5, 0.5]))
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.add_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        x.exp_()
    assert x.tolist() == [1, 2] and x._version == 0


def test_inplace_on_expanded_raises():
    x = tp.zeros(1, 3).expand(2, 3)
    with pytest.raises(RuntimeError, match="single memory location"):
        x.add_(1)


# ---- result dtypes equal PyTorch's ------------------------------------------------------

_SCALARS = {"int": 2, "float": 2.5, "complex": 1 + 1j, "bool": True}
BINARY = [
    r
    for r in ROWS
    if r.kind == "pointwise"
    and r.n_inputs == 2
    and r.name in REF
    and r.name not in ("matmul", "mm", "bmm", "dot", "outer")
]
UNARY = [
    r
    for r in ROWS
    if r.kind == "pointwise"
    and r.n_inputs == 1
    and r.name not in ("cumsum", "cumprod", "softmax", "log_softmax", "contiguous_copy")
]


def _torch():
    return pytest.importorskip(
        "torch", reason="torch is not installed: PyTorch dtype parity cannot be checked"
    )


def _both(tfn, tpfn):
    """(torch outcome, tensorplay outcome): a dtype name or 'raises'."""
    out = []
    for fn in (tfn, tpfn):
        try:
            out.append(str(fn().dtype).split(".")[-1])
        except (TypeError, RuntimeError, NotImplementedError, ValueError) as e:
            if "must be Tensor, not" in str(e):
                return None  # torch's function takes no Python scalar there: nothing to compare
            out.append("raises")
    return tuple(out)


def _vals(dt):
    return np.array([[1, 2, 3], [4, 5, 6]])


def _pair(torch, name_t, name_tp, vals):
    return (torch.tensor(vals).to(getattr(torch, name_t)), tp.tensor(vals).to(getattr(tp, name_tp)))


def _torch_fn(torch, row):
    if row.name == "_threshold_backward":  # an aten op of torch's own relu backward

        def threshold_backward(g, x, threshold=0):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"threshold_backward(): self must be Tensor, not {type(x)}")
            return torch.ops.aten.threshold_backward(g, x, threshold)

        return threshold_backward
    if row.name == "_gelu_backward":  # torch's own gelu backward

        def gelu_backward(g, x, approximate="none"):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"gelu_backward(): self must be Tensor, not {type(x)}")
            # mixed dtypes promote as any pointwise op's (torch's CPU kernel for this aten op
            # raises for some pairs from oneDNN, a path no user call reaches)
            rt = torch.result_type(g, x)
            return torch.ops.aten.gelu_backward(g.to(rt), x.to(rt), approximate=approximate)

        return gelu_backward
    fn = getattr(torch, row.name, None)
    if fn is None:
        fn = getattr(torch.nn.functional, row.name)
    return fn


@pytest.mark.parametrize("row", BINARY, ids=[r.name for r in BINARY])
def test_binary_result_dtype_matches_torch(row):
    torch = _torch()
    tfn = _torch_fn(torch, row)
    mismatches = []
    for a, b in itertools.product(ALL_DTYPES, ALL_DTYPES + list(_SCALARS) + ["0d"]):
        ta, xa = _pair(torch, a.name, a.name, _vals(a))
        if isinstance(b, D.dtype):
            tb, xb = _pair(torch, b.name, b.name, _vals(b))
        elif b == "0d":
            tb, xb = _pair(torch, "float64", "float64", 3)
        else:
            tb = xb = _SCALARS[b]
        if torch.result_type(ta, tb) == torch.complex32:
            continue  # TensorPlay has no complex32: complex64 is its narrowest complex dtype
        r = _both(lambda: tfn(ta, tb), lambda: row.fn(xa, xb))
        if r is None:
            continue
        if r[0] != r[1]:
            mismatches.append((a.name, getattr(b, "name", b), r))
    assert not mismatches, mismatches


@pytest.mark.parametrize("row", UNARY, ids=[r.name for r in UNARY])
def test_unary_result_dtype_matches_torch(row):
    torch = _torch()
    tfn = _torch_fn(torch, row)
    mismatches = []
    for a in ALL_DTYPES:
        ta, xa = _pair(torch, a.name, a.name, _vals(a))
        args = {"clamp": (0, 2), "where": ()}.get(row.name, ())
        if row.name == "where":
            continue  # three inputs: covered by test_where_result_dtype_matches_torch
        r = _both(lambda: tfn(ta, *args), lambda: row.fn(xa, *args))
        if r is not None and r[0] != r[1]:
            mismatches.append((a.name, r))
    assert not mismatches, mismatches


def test_where_result_dtype_matches_torch():
    torch = _torch()
    bad = []
    for a, b in itertools.product(ALL_DTYPES, ALL_DTYPES):
        ta, xa = _pair(torch, a.name, a.name, _vals(a))
        tb, xb = _pair(torch, b.name, b.name, _vals(b))
        r = _both(
            lambda: torch.where(ta > 2, ta, tb),
            lambda: tp.where(tp.tensor(np.asarray(ta > 2)), xa, xb),
        )
        if r[0] != r[1]:
            bad.append((a.name, b.name, r))
    assert not bad, bad


REDUCTIONS = [r for r in ROWS if r.kind == "reduction" and not r.name.endswith("_dim")] + [
    r for r in ROWS if r.name in ("cumsum", "cumprod", "softmax", "log_softmax")
]


@pytest.mark.parametrize("row", REDUCTIONS, ids=[r.name for r in REDUCTIONS])
def test_reduction_result_dtype_matches_torch(row):
    torch = _torch()
    tfn = _torch_fn(torch, row)
    needs_dim = row.name in ("logsumexp", "cumsum", "cumprod", "softmax", "log_softmax")
    kw = {"dim": 1} if needs_dim else {}
    bad = []
    for a in ALL_DTYPES:
        ta, xa = _pair(torch, a.name, a.name, _vals(a))
        r = _both(lambda: tfn(ta, **kw), lambda: row.fn(xa, **kw))
        if r is not None and r[0] != r[1]:
            bad.append((a.name, r))
    assert not bad, bad
