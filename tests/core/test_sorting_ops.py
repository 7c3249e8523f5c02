"""The sorting family against PyTorch: sort, argsort, topk, tril/triu, repeat, flip, roll,
nonzero, argwhere and unique, on the same values in both, comparing values, indices, return
types, errors and gradients; edge cases (NaN, ties, 0-d, empty, every dtype torch takes).

Each test that needs torch skips alone when it is missing (``_torch()``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.overrides import TensorPlayFunctionMode

INF, NAN = math.inf, math.nan
INTS = ["uint8", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
REAL = ["bool", *INTS, *FLOATS]


def _torch():
    return pytest.importorskip("torch", reason="torch is the oracle of the sorting ops")


def _pair(values, dtype="float64", device="cpu"):
    """The same tensor in tensorplay (on ``device``) and torch (on the CPU)."""
    torch = _torch()
    a = np.asarray(values)
    if dtype == "bfloat16":  # exact: both round the float32 values to bfloat16
        return (
            tp.tensor(a.astype(np.float32)).to(tp.bfloat16).to(device),
            torch.tensor(a.astype(np.float32)).to(torch.bfloat16),
        )
    a = a.astype(dtype)
    return tp.tensor(a).to(device), torch.from_numpy(a.copy())


def _np(t) -> np.ndarray:
    """A tensor of either framework as numpy (bfloat16 as float32, which holds it exactly)."""
    if isinstance(t, tp.Tensor):
        t = t.detach().cpu()
        return np.asarray(t.to(tp.float32) if t.dtype is tp.bfloat16 else t)
    t = t.detach()
    return (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()


def same(got, want):
    """Equal values (NaN equals NaN), shapes and dtype names."""
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    np.testing.assert_array_equal(_np(got), _np(want))


def _values(dtype, shape, rng, special=True):
    """Values with many ties; for floats also NaN, +-inf and signed zeros."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        return rng.integers(0 if dtype == "uint8" else -3, 4, shape)
    v = rng.integers(-3, 4, shape) + rng.choice([0.0, 0.5], shape)
    if special:
        flat = v.reshape(-1)
        picks = rng.choice(flat.size, size=min(5, flat.size), replace=False)
        flat[picks] = [NAN, INF, -INF, -0.0, NAN][: len(picks)]
    return v


# ---- sort, argsort ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL)
def test_stable_sort_matches_torch_exactly(dtype, device):
    """Values and indices, ties in input order, NaN last ascending and first descending."""
    torch = _torch()
    rng = np.random.default_rng(0)
    x, t = _pair(_values(dtype, (4, 7), rng), dtype, device)
    for dim in (0, 1, -1, -2):
        for descending in (False, True):
            got = tp.sort(x, dim, descending, stable=True)
            want = torch.sort(t, dim=dim, descending=descending, stable=True)
            same(got.values, want.values)
            same(got.indices, want.indices)
            same(tp.argsort(x, dim, descending, stable=True), want.indices)
            same(x.argsort(dim=dim, descending=descending, stable=True), want.indices)


@pytest.mark.parametrize("dtype", REAL)
def test_unstable_sort_values_match_and_indices_point_at_them(dtype, device):
    torch = _torch()
    x, t = _pair(_values(dtype, (3, 9), np.random.default_rng(1)), dtype, device)
    for descending in (False, True):
        values, indices = x.sort(descending=descending)
        same(values, torch.sort(t, descending=descending).values)
        assert indices.dtype is tp.int64
        same(x.gather(-1, indices), values)
        assert (np.sort(_np(indices), axis=-1) == np.arange(9)).all()  # a permutation


def test_sort_nan_and_signed_zero_order_matches_torch():
    torch = _torch()
    vals = [2.0, NAN, 1.0, -0.0, NAN, -INF, 0.0, INF]
    x, t = _pair(vals, "float32")
    for descending in (False, True):
        got = tp.sort(x, descending=descending)
        want = torch.sort(t, descending=descending, stable=True)
        same(got.indices, want.indices)
        same(got.values, want.values)
    assert tp.sort(x).indices.tolist() == [5, 3, 6, 2, 0, 7, 1, 4]
    assert tp.sort(x, descending=True).indices.tolist() == [1, 4, 7, 0, 2, 3, 6, 5]


def test_sort_returns_a_named_pair_like_torch():
    x = tp.tensor([[3.0, 1.0, 2.0]])
    r = tp.sort(x)
    assert isinstance(r, tuple) and r._fields == ("values", "indices")
    values, indices = r
    assert values is r.values and indices is r.indices
    assert r.values.tolist() == [[1.0, 2.0, 3.0]] and r.indices.tolist() == [[1, 2, 0]]
    assert x.sort(dim=0).values.tolist() == [[3.0, 1.0, 2.0]]
    assert type(x.topk(2)).__name__ == "TopK" and x.topk(2).values.tolist() == [[3.0, 2.0]]


def test_sort_signature_follows_torch():
    torch = _torch()
    x, t = _pair([[3.0, 1.0], [0.0, 2.0]])
    same(tp.sort(x, 0, True).values, torch.sort(t, 0, True).values)
    same(tp.sort(x, stable=None).values, torch.sort(t, stable=None).values)
    for fn in (tp.sort, tp.argsort):
        with pytest.raises(TypeError):  # stable is keyword-only, as in torch
            fn(x, 0, False, True)
    with pytest.raises(TypeError):
        torch.sort(t, 0, False, True)
    with pytest.raises(TypeError, match="descending"):
        tp.sort(x, descending=1)
    with pytest.raises(TypeError, match="dim"):
        tp.sort(x, None)


def test_sort_0d_and_empty_match_torch():
    torch = _torch()
    for vals, dim in (
        (3.5, 0),
        (3.5, -1),
        (np.zeros((0, 3)), 1),
        (np.zeros((0, 3)), 0),
        (np.zeros((2, 0)), -1),
    ):
        x, t = _pair(vals)
        got, want = tp.sort(x, dim), torch.sort(t, dim)
        same(got.values, want.values)
        same(got.indices, want.indices)
    x, t = _pair(3.5)
    for bad in (1, -2):
        with pytest.raises(IndexError, match="out of range"):
            tp.sort(x, bad)
        with pytest.raises(IndexError):
            torch.sort(t, bad)


def test_sort_refuses_complex_like_torch():
    torch = _torch()
    with pytest.raises(RuntimeError):
        torch.sort(torch.tensor([1 + 1j]))
    for fn in (tp.sort, tp.argsort, lambda x: tp.topk(x, 1), tp.unique):
        with pytest.raises(RuntimeError, match="complex64"):
            fn(tp.tensor([1 + 1j, 2j]))


# ---- topk ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [*INTS, *FLOATS])
def test_topk_values_match_torch_and_indices_are_valid(dtype, device):
    """Ties may pick other (equal) elements than torch; the indices must point at them."""
    torch = _torch()
    x, t = _pair(_values(dtype, (5, 6), np.random.default_rng(2)), dtype, device)
    for dim in (0, -1):
        for k in (0, 1, 3, x.shape[dim]):
            for largest in (True, False):
                got = tp.topk(x, k, dim, largest)
                want = torch.topk(t, k, dim, largest)
                same(got.values, want.values)
                same(x.gather(dim, got.indices), got.values)
                idx = np.moveaxis(_np(got.indices), dim, -1)
                idx = idx.reshape(math.prod(idx.shape[:-1]), k)
                assert all(len(set(r)) == k for r in idx.tolist())  # no element twice


def test_topk_nan_is_the_largest_like_torch():
    torch = _torch()
    x, t = _pair([2.0, NAN, 1.0, NAN, -INF, 5.0], "float32")
    for largest in (True, False):
        same(tp.topk(x, 3, largest=largest).values, torch.topk(t, 3, largest=largest).values)
    assert tp.topk(x, 3).indices.tolist() == [1, 3, 5]
    assert tp.topk(x, 2, largest=False).indices.tolist() == [4, 2]


def test_topk_unsorted_still_returns_the_k_largest():
    torch = _torch()
    x, t = _pair([[3.0, 1.0, 4.0, 1.5, 9.0, 2.6]])
    got = tp.topk(x, 3, sorted=False)
    want = torch.topk(t, 3, sorted=False)
    assert sorted(_np(got.values)[0].tolist()) == sorted(_np(want.values)[0].tolist())
    same(x.gather(1, got.indices), got.values)


def test_topk_0d_and_empty_match_torch():
    torch = _torch()
    for vals, k, dim in (
        (3.5, 1, -1),
        (3.5, 0, 0),
        (np.zeros((0, 3)), 2, -1),
        (np.zeros((3, 0)), 0, 1),
    ):
        x, t = _pair(vals)
        got, want = tp.topk(x, k, dim), torch.topk(t, k, dim)
        same(got.values, want.values)
        same(got.indices, want.indices)


def test_topk_errors_match_torch():
    torch = _torch()
    x, t = _pair(np.arange(12.0).reshape(3, 4))
    for k, dim in ((5, -1), (-1, -1), (4, 0)):
        with pytest.raises(RuntimeError, match="selected index k out of range"):
            tp.topk(x, k, dim)
        with pytest.raises(RuntimeError, match="selected index k out of range"):
            torch.topk(t, k, dim)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        tp.topk(tp.tensor(1.0), 2)
    with pytest.raises(IndexError, match="out of range"):
        tp.topk(x, 1, 2)
    for k in (1.5, True):
        with pytest.raises(TypeError, match="'k' must be int"):
            tp.topk(x, k)
        with pytest.raises(TypeError):
            torch.topk(t, k)
    assert tp.topk(x, tp.tensor(2)).values.tolist() == [[3.0, 2.0], [7.0, 6.0], [11.0, 10.0]]
    # bool: torch has no topk kernel for it
    with pytest.raises(RuntimeError):
        torch.topk(torch.tensor([True, False]), 1)
    with pytest.raises(RuntimeError, match="bool"):
        tp.topk(tp.tensor([True, False]), 1)


def test_topk_on_meta_gives_torch_shapes():
    torch = _torch()
    for shape, k, dim in (((3, 5), 2, -1), ((3, 5), 3, 0), ((), 1, 0), ((0, 4), 4, 1)):
        got = tp.topk(tp.empty(shape, device="meta"), k, dim)
        want = torch.topk(torch.empty(shape, device="meta"), k, dim)
        assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
        assert got.values.device.type == "meta" and got.indices.dtype is tp.int64
        got = tp.sort(tp.empty(shape, device="meta", dtype=tp.float16), dim)
        want = torch.sort(torch.empty(shape, device="meta", dtype=torch.float16), dim)
        assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
        assert got.values.dtype is tp.float16
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        tp.topk(tp.empty(3, device="meta"), 4)


# ---- tril, triu ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("dtype", [*REAL, "complex64"])
def test_triangles_match_torch(name, dtype, device):
    torch = _torch()
    rng = np.random.default_rng(3)
    vals = (
        _values(dtype, (2, 3, 4), rng, special=False)
        if dtype != "complex64"
        else (rng.standard_normal((2, 3, 4)) + 1j * rng.standard_normal((2, 3, 4)))
    )
    x, t = _pair(vals, dtype, device)
    for diagonal in (-5, -1, 0, 1, 2, 5):
        same(getattr(tp, name)(x, diagonal), getattr(torch, name)(t, diagonal))
        same(getattr(x.transpose(1, 2), name)(diagonal), getattr(t.transpose(1, 2), name)(diagonal))
    y, u = x.clone(), t.clone()
    assert getattr(y, name + "_")(1) is y
    same(y, getattr(u, name + "_")(1))


def test_triangle_errors_and_empty_match_torch():
    torch = _torch()
    for name in ("tril", "triu"):
        for vals in (3.0, [1.0, 2.0]):
            x, t = _pair(vals)
            with pytest.raises(RuntimeError, match="at least 2 dimensions"):
                getattr(tp, name)(x)
            with pytest.raises(RuntimeError, match="at least 2 dimensions"):
                getattr(torch, name)(t)
        x, t = _pair(np.zeros((0, 3)))
        same(getattr(tp, name)(x), getattr(torch, name)(t))
        with pytest.raises(TypeError, match="'diagonal' must be int"):
            getattr(tp, name)(tp.ones(2, 2), 1.5)


# ---- repeat, flip, roll ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bool", "int32", "float16", "bfloat16", "float64", "complex64"])
def test_repeat_matches_torch(dtype, device):
    torch = _torch()
    x, t = _pair(np.arange(6).reshape(2, 3) % 4, dtype, device)
    for reps in ((1, 1), (2, 1), (1, 3), (2, 1, 2), (0, 2), (3, 2, 0, 1)):
        same(x.repeat(*reps), t.repeat(*reps))
        same(x.repeat(reps), t.repeat(reps))
        same(x.repeat(list(reps)), t.repeat(list(reps)))
    s, u = _pair(7.0, dtype, device)
    for reps in ((), (2,), (2, 3)):
        same(s.repeat(reps), u.repeat(reps))
    e, f = _pair(np.zeros((0, 2)), dtype, device)
    same(e.repeat(3, 2), f.repeat(3, 2))
    same(x.repeat(tp.Size([2, 2])), t.repeat(torch.Size([2, 2])))


def test_repeat_copies_and_refuses_like_torch():
    torch = _torch()
    x, t = _pair(np.arange(6.0).reshape(2, 3))
    r = x.repeat(1, 1)
    r[0, 0] = 100.0
    assert x[0, 0].item() == 0.0  # a copy, unlike expand
    for reps in ((2,), ()):
        with pytest.raises(RuntimeError, match="can not be smaller than number of dimensions"):
            x.repeat(reps)
        with pytest.raises(RuntimeError):
            t.repeat(reps)
    with pytest.raises(RuntimeError, match="negative dimension -2"):
        x.repeat(-1, 2)
    with pytest.raises(RuntimeError, match="negative dimension -2"):
        t.repeat(-1, 2)
    with pytest.raises(TypeError):
        x.repeat()
    with pytest.raises(TypeError):
        t.repeat()
    with pytest.raises(TypeError, match="must be a tuple of ints"):
        x.repeat(2.0, 2)
    assert not hasattr(torch, "repeat")  # method only in torch (tp.repeat exists: see the row)
    assert tp.repeat(x, 2, 1).tolist() == x.repeat(2, 1).tolist()


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int64", "bfloat16", "float32", "complex64"])
def test_flip_matches_torch(dtype, device):
    torch = _torch()
    x, t = _pair(np.arange(24).reshape(2, 3, 4) % 5, dtype, device)
    for dims in ((0,), (2,), (-1,), (0, 2), (2, 0, 1), (), [1, -1]):
        same(tp.flip(x, dims), torch.flip(t, dims))
        same(x.flip(dims), t.flip(dims))
        same(x.transpose(0, 2).flip(dims), t.transpose(0, 2).flip(dims))
    s, u = _pair(4.0, dtype, device)
    for dims in ((), (0,), (-1,)):
        same(tp.flip(s, dims), torch.flip(u, dims))
    e, f = _pair(np.zeros((0, 3)), dtype, device)
    same(tp.flip(e, (0, 1)), torch.flip(f, (0, 1)))
    y = tp.flip(x, ())
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()  # a copy, as torch


def test_flip_errors_match_torch():
    torch = _torch()
    x, t = _pair(np.zeros((2, 3)))
    for dims, err, text in (
        ((0, 0), RuntimeError, "appears multiple times"),
        ((1, -1), RuntimeError, "appears multiple times"),
        ((2,), IndexError, "out of range"),
    ):
        with pytest.raises(err, match=text):
            tp.flip(x, dims)
        with pytest.raises(err, match=text):
            torch.flip(t, dims)
    with pytest.raises(TypeError, match="must be a tuple of ints"):
        tp.flip(x, (0.5,))
    with pytest.raises(TypeError):
        torch.flip(t, (0.5,))


@pytest.mark.parametrize("dtype", ["bool", "int8", "float16", "float64", "complex64"])
def test_roll_matches_torch(dtype, device):
    torch = _torch()
    x, t = _pair(np.arange(24).reshape(2, 3, 4) % 7, dtype, device)
    cases = [
        (1, None),
        (-7, None),
        (25, None),
        ((3,), None),
        (5, ()),
        (1, 0),
        (-4, 2),
        (2, -1),
        ((1, -2), (0, 2)),
        ((1, 2), (1, 1)),
        ((1, 1, 5), (0, 1, 2)),
    ]
    for shifts, dims in cases:
        same(tp.roll(x, shifts, dims), torch.roll(t, shifts, dims))
        same(x.transpose(0, 2).roll(shifts, dims), t.transpose(0, 2).roll(shifts, dims))
    s, u = _pair(4.0, dtype, device)
    same(tp.roll(s, 3), torch.roll(u, 3))
    e, f = _pair(np.zeros((0, 3)), dtype, device)
    same(tp.roll(e, 1), torch.roll(f, 1))
    same(tp.roll(e, 1, 0), torch.roll(f, 1, 0))


def test_roll_errors_match_torch():
    torch = _torch()
    x, t = _pair(np.zeros((2, 3)))
    for args, err, text in (
        (((1, 2), 0), RuntimeError, "shifts and dimensions must align. shifts: 2, dims:1"),
        (((1, 2), None), RuntimeError, "shifts and dimensions must align. shifts: 2, dims:0"),
        (((), ()), RuntimeError, "`shifts` required"),
        ((1, 2), IndexError, "out of range"),
    ):
        with pytest.raises(err, match=text):
            tp.roll(x, *args)
        with pytest.raises(err, match=text):
            torch.roll(t, *args)
    s, u = _pair(1.0)
    with pytest.raises(IndexError, match="no dimensions"):
        tp.roll(s, 1, 0)
    with pytest.raises(IndexError, match="no dimensions"):
        torch.roll(u, 1, 0)
    with pytest.raises(TypeError, match="'shifts' must be int"):
        tp.roll(x, 1.5)


# ---- nonzero, argwhere -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [*REAL, "complex64"])
def test_nonzero_and_argwhere_match_torch(dtype, device):
    torch = _torch()
    rng = np.random.default_rng(4)
    vals = rng.integers(-1, 2, (3, 4, 2))
    if dtype in FLOATS:
        vals = vals.astype(np.float64)
        vals.reshape(-1)[:4] = [NAN, -0.0, INF, 0.0]
    x, t = _pair(vals, dtype, device)
    same(tp.nonzero(x), torch.nonzero(t))
    same(x.nonzero(), t.nonzero())
    same(tp.argwhere(x), torch.argwhere(t))
    got, want = x.nonzero(as_tuple=True), t.nonzero(as_tuple=True)
    assert isinstance(got, tuple) and len(got) == len(want) == 3
    for g, w in zip(got, want):
        same(g, w)
        assert g.is_contiguous()
    same(x[x.nonzero(as_tuple=True)], t[t.nonzero(as_tuple=True)])


def test_nonzero_0d_and_empty_match_torch():
    torch = _torch()
    for vals in (3.0, 0.0, NAN, np.zeros((2, 0)), np.zeros((0,)), np.zeros((3, 2))):
        x, t = _pair(vals)
        same(tp.nonzero(x), torch.nonzero(t))
        same(tp.argwhere(x), torch.argwhere(t))
        got, want = tp.nonzero(x, as_tuple=True), torch.nonzero(t, as_tuple=True)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)


def test_nonzero_out_and_meta():
    torch = _torch()
    x, t = _pair([[1, 0], [0, 2]], "int64")
    out = tp.empty(0, dtype=tp.int64)
    assert tp.nonzero(x, out=out) is out
    same(out, torch.nonzero(t))
    # the shape depends on the values: meta tensors are refused, as torch refuses them, unless
    # they are empty (then the shape is known)
    for fn in (tp.nonzero, tp.argwhere, tp.unique):
        with pytest.raises(NotImplementedError, match="depends on the tensor's values"):
            fn(tp.empty(2, 3, device="meta"))
    with pytest.raises(NotImplementedError):
        torch.nonzero(torch.empty(2, 3, device="meta"))
    m = tp.nonzero(tp.empty(0, 3, device="meta"))
    assert m.device.type == "meta" and tuple(m.shape) == (0, 2) and m.dtype is tp.int64
    parts = tp.nonzero(tp.empty(4, 0, device="meta"), as_tuple=True)
    assert [tuple(p.shape) for p in parts] == [(0,), (0,)]


# ---- unique ----------------------------------------------------------------------------------


def _same_inverse(x, values, got, want):
    """Inverse indices equal torch's, except that which NaN goes to which of the (equal, NaN)
    unique values is torch's sort's choice (not in input order): there each must name a NaN,
    every one once."""
    xs, vs, g, w = _np(x), _np(values), _np(got), _np(want)
    assert g.shape == w.shape and g.dtype == w.dtype
    nan = np.isnan(xs) if xs.dtype.kind == "f" else np.zeros(xs.shape, bool)
    np.testing.assert_array_equal(g[~nan], w[~nan])
    assert np.isnan(vs[g[nan]]).all() and len(set(g[nan].tolist())) == int(nan.sum())


@pytest.mark.parametrize("dtype", REAL)
def test_unique_matches_torch(dtype, device):
    torch = _torch()
    vals = _values(dtype, (4, 5), np.random.default_rng(5))
    x, t = _pair(vals, dtype, device)
    same(tp.unique(x), torch.unique(t))
    same(x.unique(), t.unique())
    for sorted_ in (True, False):
        for inverse in (False, True):
            for counts in (False, True):
                kw = {"sorted": sorted_, "return_inverse": inverse, "return_counts": counts}
                got, want = tp.unique(x, **kw), torch.unique(t, **kw)
                if isinstance(want, tuple):
                    assert type(got) is tuple and len(got) == len(want)
                    same(got[0], want[0])
                    if inverse:
                        _same_inverse(x, got[0], got[1], want[1])
                    if counts:
                        same(got[-1], want[-1])
                else:
                    same(got, want)
    if dtype in FLOATS:
        return  # torch's unique along a dim leaves NaN slices in an order of its own
    for dim in (0, 1, -1):
        got = tp.unique(x, return_inverse=True, return_counts=True, dim=dim)
        want = torch.unique(t, return_inverse=True, return_counts=True, dim=dim)
        for g, w in zip(got, want):
            same(g, w)


def test_unique_slices_nan_0d_and_empty_match_torch():
    torch = _torch()
    x, t = _pair([[3.0, 1.0], [1.0, 2.0], [3.0, 1.0], [1.0, 2.0], [0.0, 9.0]])
    for dim in (0, 1):
        for g, w in zip(
            tp.unique(x, sorted=False, return_inverse=True, return_counts=True, dim=dim),
            torch.unique(t, sorted=False, return_inverse=True, return_counts=True, dim=dim),
        ):
            same(g, w)
    x, t = _pair([2.0, NAN, 1.0, NAN, 2.0, -0.0, 0.0, -INF])
    got = tp.unique(x, return_inverse=True, return_counts=True)
    want = torch.unique(t, return_inverse=True, return_counts=True)
    same(got[0], want[0])  # every NaN is a value of its own
    same(got[2], want[2])
    _same_inverse(x, got[0], got[1], want[1])
    assert got[1].tolist() == [3, 4, 2, 5, 3, 1, 1, 0]  # NaNs in input order here
    x, t = _pair(3.0)
    for g, w in zip(tp.unique(x, return_inverse=True), torch.unique(t, return_inverse=True)):
        same(g, w)
    for shape, dim in (((2, 0, 3), None), ((0, 3), 0), ((0,), 0)):
        x, t = _pair(np.zeros(shape))
        kw = {"return_inverse": True, "return_counts": True, "dim": dim}
        for g, w in zip(tp.unique(x, **kw), torch.unique(t, **kw)):
            same(g, w)
        m = tp.unique(tp.empty(shape, device="meta"), **kw)
        assert [tuple(g.shape) for g in m] == [tuple(w.shape) for w in torch.unique(t, **kw)]


def test_unique_errors_match_torch():
    torch = _torch()
    for shape, dim, err, text in (
        ((), 0, IndexError, "Dimension specified as 0 but tensor has no dimensions"),
        ((2, 0), 0, RuntimeError, "There are 0 sized dimensions, and they aren't selected"),
        ((0, 3), 1, RuntimeError, "There are 0 sized dimensions, and they aren't selected"),
        ((2, 3), 2, IndexError, "out of range"),
    ):
        x, t = _pair(np.zeros(shape))
        with pytest.raises(err, match=text):
            tp.unique(x, dim=dim)
        with pytest.raises(err, match=text):
            torch.unique(t, dim=dim)
        with pytest.raises(err, match=text):
            tp.unique(tp.empty(shape, device="meta"), dim=dim)


def test_unique_has_no_derivative_like_torch():
    torch = _torch()
    from tensorplay.autograd import forward_ad as fwAD

    for kw in ({}, {"dim": 0}):
        x = tp.tensor([3.0, 1.0, 1.0], requires_grad=True)
        u = tp.unique(x, **kw)
        assert u.requires_grad and u.tolist() == [1.0, 3.0]
        with pytest.raises(NotImplementedError, match="derivative for 'unique'"):
            u.sum().backward()
        t = torch.tensor([3.0, 1.0, 1.0], requires_grad=True)
        with pytest.raises(NotImplementedError, match="derivative for"):
            torch.unique(t, **kw).sum().backward()
    with fwAD.dual_level():
        dual = fwAD.make_dual(tp.tensor([1.0, 2.0]), tp.ones(2))
        with pytest.raises(NotImplementedError, match="forward AD with unique"):
            tp.unique(dual)


# ---- gradients -------------------------------------------------------------------------------


def _grads(fn, values, seed=0, dtype="float64"):
    """x.grad in (tensorplay, torch) after backward of fn(L, x) with one random gradient."""
    torch = _torch()
    out = []
    for L in (tp, torch):
        x = L.tensor(np.asarray(values), dtype=getattr(L, dtype), requires_grad=True)
        y = fn(L, x)
        g = np.random.default_rng(seed).standard_normal(tuple(y.shape))
        y.backward(L.tensor(g, dtype=y.dtype))
        out.append(x.grad)
    return out


GRADIENT_CASES = {
    "sort": lambda L, x: L.sort(x, 1).values,
    "sort_dim0_descending": lambda L, x: L.sort(x, 0, True).values,
    "sort_stable_ties": lambda L, x: L.sort(x.round(), dim=-1, descending=True, stable=True).values,
    "topk": lambda L, x: L.topk(x, 2).values,
    "topk_smallest_dim0": lambda L, x: L.topk(x, 3, 0, False).values,
    "topk_k0": lambda L, x: L.topk(x, 0).values,
    "tril": lambda L, x: L.tril(x, -1),
    "triu": lambda L, x: L.triu(x, 1),
    "triu_": lambda L, x: (x * 1).triu_(),
    "repeat": lambda L, x: x.repeat(2, 1, 3),
    "repeat_zero": lambda L, x: x.repeat(0, 2),
    "flip": lambda L, x: L.flip(x, (0, 1)),
    "roll": lambda L, x: L.roll(x, (1, -2), (0, 1)),
    "roll_flat": lambda L, x: L.roll(x, 5),
}


@pytest.mark.parametrize("case", sorted(GRADIENT_CASES))
def test_gradients_match_torch(case):
    values = np.random.default_rng(6).uniform(-3, 3, (4, 5))
    got, want = _grads(GRADIENT_CASES[case], values)
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-12, atol=1e-12)


def test_gradients_of_0d_and_float32_match_torch():
    for fn in (
        lambda L, x: L.sort(x).values,
        lambda L, x: L.topk(x, 1).values,
        lambda L, x: L.topk(x, 0).values,
        lambda L, x: L.roll(x, 2),
        lambda L, x: L.flip(x, (0,)),
        lambda L, x: x.repeat(2, 2),
    ):
        got, want = _grads(fn, 1.5)
        np.testing.assert_allclose(_np(got), _np(want))
    got, want = _grads(lambda L, x: L.sort(x, 0).values, [3.0, 1.0, 2.0], dtype="float32")
    same(got, want)


def test_topk_gradient_with_ties_goes_to_the_returned_indices():
    """Which of equal elements topk returns is unspecified (torch picks others): the
    gradient must reach exactly the elements whose indices came back."""
    x = tp.tensor([[1.0, 2.0, 2.0, 0.5, 2.0]], requires_grad=True)
    values, indices = x.topk(2)
    assert values.tolist() == [[2.0, 2.0]]
    values.backward(tp.tensor([[10.0, 20.0]]))
    want = np.zeros((1, 5))
    want[0, indices.tolist()[0]] = [10.0, 20.0]
    np.testing.assert_array_equal(x.grad.numpy(), want)
    assert not indices.requires_grad


def test_sort_forward_mode_gathers_the_tangent():
    from tensorplay.autograd import forward_ad as fwAD

    with fwAD.dual_level():
        x = fwAD.make_dual(tp.tensor([[3.0, 1.0, 2.0]]), tp.tensor([[30.0, 10.0, 20.0]]))
        values, _ = tp.sort(x, descending=True)
        assert fwAD.unpack_dual(values).tangent.tolist() == [[30.0, 20.0, 10.0]]
        top = tp.topk(x, 2, largest=False).values
        assert fwAD.unpack_dual(top).tangent.tolist() == [[10.0, 20.0]]


# ---- overrides: handlers see the public function and return what they like -------------------


class _Log(TensorPlayFunctionMode):
    def __init__(self):
        self.seen = []

    def __tensorplay_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


def test_function_modes_see_the_public_functions():
    x = tp.tensor([3.0, 1.0, 3.0])
    with _Log() as mode:
        r = x.sort(descending=True)
        u = tp.unique(x, return_counts=True)
        n = x.nonzero(as_tuple=True)
    assert mode.seen == [tp.sort, tp.unique, tp.nonzero]
    assert tp.Tensor.sort is tp.sort and tp.Tensor.unique is tp.unique
    assert r.values.tolist() == [3.0, 3.0, 1.0] and r.indices.tolist() == [0, 2, 1]
    assert [v.tolist() for v in u] == [[1.0, 3.0], [1, 2]]
    assert [v.tolist() for v in n] == [[0, 1, 2]]


def test_a_handlers_result_is_returned_unchanged():
    class Spy:
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            return ("spy", func, args, kwargs)

    s = Spy()
    assert tp.sort(s, 0) == ("spy", tp.sort, (s, 0), {})
    assert tp.unique(s, return_counts=True) == ("spy", tp.unique, (s,), {"return_counts": True})
    assert tp.topk(s, 2)[1] is tp.topk
