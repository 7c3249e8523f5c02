"""Ops extension code calls, against PyTorch: clamp_min/clamp_max, addcmul/addcdiv, lerp,
real/imag, diag_embed/diag, ger, repeat_interleave, cummax/cummin, masked_select,
index_add/index_copy and scatter_reduce. The same values go to both; results (values, dtype,
shape), errors (their kind) and gradients are compared, across dtypes where torch's integer
and bool rules matter. The generated tests (test_optable*.py, test_autograd_ops.py) cover
the rows from their samples; this file holds what is particular to each op.

Each test that needs torch skips alone when it is missing (``_torch()``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tensorplay as tp

NAN, INF = math.nan, math.inf
INTS = ["uint8", "int8", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
ALL = ["bool", *INTS, *FLOATS, *COMPLEX]
TOL = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-5, "complex64": 1e-5}


def _torch():
    return pytest.importorskip("torch", reason="torch is the oracle of these ops")


def _values(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        return rng.integers(0 if dtype == "uint8" else -4, 6, shape)
    v = rng.uniform(-3, 3, shape)
    return v + 1j * rng.uniform(-2, 2, shape) if dtype in COMPLEX else v


def _pair(values, dtype="float64", device="cpu", grad=False):
    """The same tensor in tensorplay (on ``device``) and torch (on the CPU)."""
    torch = _torch()
    a = np.asarray(values)
    if dtype == "bfloat16":  # exact: both round the float32 values to bfloat16
        x, t = tp.tensor(a.astype(np.float32)).to(tp.bfloat16), torch.tensor(a.astype(np.float32))
        x, t = x.to(device), t.to(torch.bfloat16)
    else:
        x, t = tp.tensor(a.astype(dtype)).to(device), torch.from_numpy(a.astype(dtype))
    if grad:
        x.requires_grad, t.requires_grad = True, True
    return x, t


def _np(t) -> np.ndarray:
    """A tensor of either framework as numpy (bfloat16 as float32, which holds it exactly)."""
    if isinstance(t, tp.Tensor):
        t = t.detach().cpu()
        return np.asarray(t.to(tp.float32) if t.dtype is tp.bfloat16 else t)
    t = t.detach()
    return (t.float() if str(t.dtype) == "torch.bfloat16" else t).resolve_conj().numpy()


def same(got, want):
    """Equal dtype names and shapes; values equal, or close for float16/bfloat16/32 results."""
    name = str(want.dtype).split(".")[-1]
    assert str(got.dtype).split(".")[-1] == name, (got.dtype, want.dtype)
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    tol = TOL.get(name, 1e-12)
    np.testing.assert_allclose(_np(got), _np(want), rtol=tol, atol=tol, equal_nan=True)


def _kind(e: BaseException) -> str:
    """torch's error kinds: IndexError, TypeError, or RuntimeError (NotImplementedError is one)."""
    for kind in (IndexError, TypeError, RuntimeError):
        if isinstance(e, kind):
            return kind.__name__
    return type(e).__name__


def _outcome(call):
    try:
        return call()
    except Exception as e:  # noqa: BLE001 - the kind is what is compared
        return _kind(e)


def same_outcome(tp_call, torch_call, what=""):
    """Both calls give the same result, or both raise the same kind of error."""
    got, want = _outcome(tp_call), _outcome(torch_call)
    if isinstance(got, str) or isinstance(want, str):
        assert got == want, f"{what}: tensorplay {got!r}, torch {want!r}"
        return
    for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
        same(g, w)


def _grads(tp_out, torch_out, tp_inputs, torch_inputs, seed=0):
    """Gradients of <out, v> for one random v, in both."""
    torch = _torch()
    v = _values(str(torch_out.dtype).split(".")[-1], tuple(torch_out.shape), seed)
    got = tp.autograd.grad(
        [tp_out], tp_inputs, [tp.tensor(v, device=tp_out.device)], allow_unused=True
    )
    want = torch.autograd.grad([torch_out], torch_inputs, [torch.from_numpy(v)], allow_unused=True)
    for g, w, x in zip(got, want, tp_inputs):
        g = np.zeros(tuple(x.shape)) if g is None else _np(g)
        w = np.zeros(tuple(x.shape)) if w is None else _np(w)
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


# ---- the surface -------------------------------------------------------------------------

NAMES = [
    "clamp_min",
    "clamp_max",
    "addcmul",
    "addcdiv",
    "lerp",
    "real",
    "imag",
    "diag_embed",
    "diag",
    "ger",
    "repeat_interleave",
    "cummax",
    "cummin",
    "masked_select",
    "index_add",
    "index_copy",
    "scatter_reduce",
]


@pytest.mark.parametrize("name", NAMES)
def test_functions_methods_and_inplace_variants_are_torchs(name):
    torch = _torch()
    assert callable(getattr(tp, name))
    assert hasattr(tp.Tensor, name) == hasattr(torch.Tensor, name)
    assert hasattr(tp.Tensor, name + "_") == hasattr(torch.Tensor, name + "_")


# ---- clamp_min, clamp_max ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["clamp_min", "clamp_max"])
@pytest.mark.parametrize("dtype", ALL)
def test_one_sided_clamps_match_torch_across_dtypes(name, dtype, device):
    torch = _torch()
    x, t = _pair(_values(dtype, (3, 4)), dtype, device)
    for bound in (2, -1.5, True, 1j):
        same_outcome(
            lambda: getattr(tp, name)(x, bound),
            lambda: getattr(torch, name)(t, bound),
            f"{name}({dtype}, {bound!r})",
        )
    for other in ("bool", "int64", "float64", dtype):
        b, tb = _pair(_values(other, (1, 4), seed=1), other, device)
        same_outcome(lambda: getattr(x, name)(b), lambda: getattr(t, name)(tb), f"{other} bound")


def test_clamp_min_nan_bound_and_inplace_match_torch():
    torch = _torch()
    x, t = _pair([1.0, NAN, -2.0, 0.5])
    same(tp.clamp_min(x, NAN), torch.clamp_min(t, NAN))
    same(
        tp.clamp_max(x, tp.tensor([0.0, 0.0, NAN, 1.0], dtype=tp.float64)),
        torch.clamp_max(t, torch.tensor([0.0, 0.0, NAN, 1.0], dtype=torch.float64)),
    )
    v = x._version
    assert x.clamp_min_(0.0) is x and x._version == v + 1
    same(x, t.clamp_min_(0.0))


@pytest.mark.parametrize("name", ["clamp_min", "clamp_max"])
def test_one_sided_clamp_gradients_at_ties_match_torch(name):
    torch = _torch()
    x, t = _pair([1.0, 2.0, 3.0, 2.0], grad=True)
    b, tb = _pair([2.0, 2.0, 2.0, 1.0], grad=True)
    _grads(getattr(tp, name)(x, b), getattr(torch, name)(t, tb), [x, b], [t, tb])


# ---- addcmul, addcdiv ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("dtype", ALL)
def test_addcmul_addcdiv_match_torch_across_dtypes(name, dtype, device):
    torch = _torch()
    a, ta = _pair(_values(dtype, (2, 3)), dtype, device)
    b, tb = _pair(_values(dtype, (1, 3), seed=1), dtype, device)
    c, tc = _pair(np.abs(_values(dtype, (2, 1), seed=2)) + 1, dtype, device)
    for value in (1, 2, -2.7, 0.5, True, 1j, 300, 1e300):
        same_outcome(
            lambda: getattr(tp, name)(a, b, c, value=value),
            lambda: getattr(torch, name)(ta, tb, tc, value=value),
            f"{name}({dtype}, value={value!r})",
        )
    for other in ("int64", "float64", "complex128"):
        f, tf = _pair(_values(other, (2, 3), seed=3), other, device)
        same_outcome(lambda: getattr(tp, name)(a, f, c), lambda: getattr(torch, name)(ta, tf, tc))
        same_outcome(lambda: getattr(tp, name)(f, a, c), lambda: getattr(torch, name)(tf, ta, tc))


def test_addcdiv_of_integers_is_refused_with_the_way_out():
    a = tp.tensor([1, 2])
    with pytest.raises(RuntimeError, match="integer division"):
        tp.addcdiv(a, a, a)
    with pytest.raises(RuntimeError, match="integer division"):
        tp.addcdiv(a.float(), a, a)  # tensor1 and tensor2 decide, as in torch
    assert tp.addcdiv(a, a.float(), a).tolist() == [2.0, 3.0]


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addc_tensor_arguments_must_be_tensors(name):
    x = tp.ones(2)
    with pytest.raises(TypeError, match="tensor2"):
        getattr(tp, name)(x, x, 2)
    with pytest.raises(TypeError, match="tensor1"):
        getattr(tp, name)(x, 2.0, x)


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addc_gradients_and_inplace_match_torch(name):
    torch = _torch()
    a, ta = _pair(_values("complex128", (2, 3)), "complex128", grad=True)
    b, tb = _pair(_values("complex128", (1, 3), seed=1), "complex128", grad=True)
    c, tc = _pair(_values("complex128", (2, 1), seed=2) + 4, "complex128", grad=True)
    args, targs = (a, b, c), (ta, tb, tc)
    _grads(
        getattr(tp, name)(*args, value=0.5 - 2j),
        getattr(torch, name)(*targs, value=0.5 - 2j),
        list(args),
        list(targs),
    )
    x, tx = _pair(_values("float64", (2, 3)), "float64")
    same(getattr(x, name + "_")(x, x + 4, value=3), getattr(tx, name + "_")(tx, tx + 4, value=3))


# ---- lerp -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64"])
def test_lerp_matches_torch(dtype, device):
    torch = _torch()
    a, ta = _pair(_values(dtype, (3, 4)), dtype, device)
    b, tb = _pair(_values(dtype, (1, 4), seed=1), dtype, device)
    for w in (0.0, 0.3, 0.5, 0.7, 1.0, 1.5, -0.5, 2):
        same(tp.lerp(a, b, w), torch.lerp(ta, tb, w))
    w, tw = _pair(np.linspace(-0.5, 1.5, 12).reshape(3, 4), dtype, device)
    same(a.lerp(b, w), ta.lerp(tb, tw))
    w0, tw0 = _pair(0.25, "float64", device)  # a 0-d weight of another dtype is fine
    same(tp.lerp(a, b, w0), torch.lerp(ta, tb, tw0))


def test_lerp_at_weight_one_is_exactly_end():
    start, end = tp.tensor([1e30, 0.1, -3.0]), tp.tensor([-1e30, 0.7, 1e-8])
    assert tp.lerp(start, end, 1.0).tolist() == end.tolist()
    assert tp.lerp(start, end, 0.0).tolist() == start.tolist()


def test_lerp_dtype_rules_match_torch():
    torch = _torch()
    f, tf = _pair([1.0, 2.0], "float32")
    d, td = _pair([1.0, 2.0], "float64")
    i, ti = _pair([1, 2], "int64")
    for call, tcall in [
        (lambda: tp.lerp(f, d, 0.5), lambda: torch.lerp(tf, td, 0.5)),  # end's dtype
        (lambda: tp.lerp(f, f, d), lambda: torch.lerp(tf, tf, td)),  # weight's dtype
        (lambda: tp.lerp(i, i, 0.5), lambda: torch.lerp(ti, ti, 0.5)),  # integers
        (lambda: tp.lerp(f, f, 1j), lambda: torch.lerp(tf, tf, 1j)),  # a complex weight
        (lambda: tp.lerp(f, f, 1e300), lambda: torch.lerp(tf, tf, 1e300)),  # overflow
        (lambda: tp.lerp(f, 3.0, 0.5), lambda: torch.lerp(tf, 3.0, 0.5)),  # a number end
    ]:
        same_outcome(call, tcall)
    with pytest.raises(RuntimeError, match="`end`"):
        tp.lerp(f, d, 0.5)


def test_lerp_gradients_match_torch():
    torch = _torch()
    a, ta = _pair(_values("float64", (3, 1)), grad=True)
    b, tb = _pair(_values("float64", (1, 4), seed=1), grad=True)
    w, tw = _pair(np.linspace(-0.5, 1.5, 12).reshape(3, 4), grad=True)
    _grads(tp.lerp(a, b, w), torch.lerp(ta, tb, tw), [a, b, w], [ta, tb, tw])
    _grads(tp.lerp(a, b, 0.7), torch.lerp(ta, tb, 0.7), [a, b], [ta, tb])


# ---- real, imag -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL)
def test_real_and_imag_match_torch_across_dtypes(dtype, device):
    torch = _torch()
    z, tz = _pair(_values(dtype, (2, 3)), dtype, device)
    same_outcome(lambda: z.real, lambda: tz.real)
    same_outcome(lambda: z.imag, lambda: tz.imag)
    same_outcome(lambda: tp.real(z.t()), lambda: torch.real(tz.t()))
    same_outcome(lambda: tp.imag(z[:, ::2]), lambda: torch.imag(tz[:, ::2]))


def test_imag_of_a_real_tensor_raises_like_torch():
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex"):
        tp.ones(2).imag  # noqa: B018 - the attribute read raises
    with pytest.raises(RuntimeError, match="non-complex"):
        tp.imag(tp.tensor([1, 2]))
    with pytest.raises(RuntimeError, match="non-complex"):
        tp.imag(tp.ones(2, device="meta"))


def test_real_of_a_real_tensor_shares_its_memory():
    # torch returns the tensor itself; here a view of it: same memory, same version counter
    x = tp.arange(6.0).reshape(2, 3).t()
    r = x.real
    assert r.untyped_storage() is x.untyped_storage() and r.stride() == x.stride()
    r.add_(1)
    assert x.tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]] and x._version == r._version


def test_real_and_imag_of_complex_tensors_are_copies():
    # NOTE: torch's are views (a float32 view of complex64 memory); TensorPlay's views keep
    # their base's dtype, so these are copies: write through z.real = v instead
    z = tp.tensor([1 + 2j, 3 - 1j])
    r = z.real
    r.add_(10)
    assert z.tolist() == [1 + 2j, 3 - 1j]


def test_setting_real_and_imag_writes_those_parts():
    torch = _torch()
    z, tz = _pair([1 + 2j, 3 - 1j], "complex64")
    # NOTE: Tensor.real/imag are attached on first read (tensorplay._bind's _Lazy, which has
    # no __set__): until then an assignment would only set an attribute of z
    _ = z.real, z.imag
    z.real = tp.tensor([5.0, 6.0])
    tz.real = torch.tensor([5.0, 6.0])
    z.imag = 0.5
    tz.imag = torch.tensor(0.5)
    same(z, tz)
    x = tp.ones(2)
    x.real = tp.tensor([3.0, 4.0])
    assert x.tolist() == [3.0, 4.0]
    with pytest.raises(RuntimeError, match="non-complex"):
        x.imag = tp.zeros(2)


def test_real_and_imag_gradients_match_torch():
    _torch()
    z, tz = _pair(_values("complex128", (2, 3)), "complex128", grad=True)
    _grads(z.real * 2 + z.imag * 3, tz.real * 2 + tz.imag * 3, [z], [tz])
    x, tx = _pair(_values("float64", (3,)), grad=True)
    _grads(x.real * 2, tx.real * 2, [x], [tx])


def test_real_and_imag_forward_mode():
    from tensorplay.autograd import forward_ad as fwAD

    z = tp.tensor([1 + 2j, 3 - 1j], dtype=tp.complex128)
    t = tp.tensor([0.5 - 1j, 2 + 3j], dtype=tp.complex128)
    with fwAD.dual_level():
        dual = fwAD.make_dual(z, t)
        assert fwAD.unpack_dual(dual.real).tangent.tolist() == [0.5, 2.0]
        assert fwAD.unpack_dual(tp.imag(dual)).tangent.tolist() == [-1.0, 3.0]


def test_real_honours_tensorplay_function():
    class Wrapped:
        def __tensorplay_function__(self, func, types, args, kwargs):
            return ("handled", func)

    assert tp.real(Wrapped()) == ("handled", tp.real)
    assert tp.imag(Wrapped()) == ("handled", tp.imag)


# ---- diag_embed, diag, ger -----------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, args",
    [
        ((4,), ()),
        ((2, 3), (1,)),
        ((2, 3), (-2, 0, 2)),
        ((2, 3), (-1, 2, 0)),
        ((2, 3, 2), (1, 0, -1)),
        ((0, 3), ()),
        ((2, 0), (2,)),
    ],
)
def test_diag_embed_matches_torch(shape, args):
    torch = _torch()
    x, t = _pair(_values("float64", shape), grad=True)
    same(tp.diag_embed(x, *args), torch.diag_embed(t, *args))
    _grads(x.diag_embed(*args), t.diag_embed(*args), [x], [t])


@pytest.mark.parametrize("dtype", ["bool", "int32", "float64", "complex128"])
@pytest.mark.parametrize("shape", [(3,), (3, 4), (4, 3), (0,)])
@pytest.mark.parametrize("k", [0, 1, -2, 5])
def test_diag_matches_torch(dtype, shape, k, device):
    torch = _torch()
    x, t = _pair(_values(dtype, shape), dtype, device)
    same(tp.diag(x, k), torch.diag(t, k))
    if dtype == "float64":
        x.requires_grad, t.requires_grad = True, True
        _grads(x.diag(k), t.diag(k), [x], [t])


def test_diag_and_diag_embed_errors_match_torch():
    torch = _torch()
    for shape in [(), (2, 2, 2)]:
        x, t = _pair(np.ones(shape))
        same_outcome(lambda: tp.diag(x), lambda: torch.diag(t))
    x, t = _pair(np.ones((2, 3)))
    for args in [(0, 1, 1), (0, 1, 5), (1.5,)]:
        same_outcome(lambda: tp.diag_embed(x, *args), lambda: torch.diag_embed(t, *args))
    same_outcome(lambda: tp.diag(x, 1.5), lambda: torch.diag(t, 1.5))
    same_outcome(lambda: tp.diag_embed(x[0, 0]), lambda: torch.diag_embed(t[0, 0]))


def test_ger_is_outer():
    a, b = tp.tensor([1.0, 2.0]), tp.tensor([3.0, 4.0, 5.0])
    assert tp.ger(a, b).tolist() == tp.outer(a, b).tolist() == a.ger(b).tolist()
    with pytest.raises(RuntimeError, match="1D"):
        tp.ger(tp.ones(2, 2), b)


# ---- repeat_interleave -----------------------------------------------------------------------


def _interleave_cases(torch):
    x = _values("float64", (2, 3))
    return [
        (x, 2, {}),
        (x, 2, {"dim": 0}),
        (x, 3, {"dim": -1, "output_size": 9}),
        (x, [1, 2], {"dim": 0}),
        (x, [1, 0, 2], {"dim": 1}),
        (x, [0, 1, 2, 0, 1, 3], {}),
        (x, [2], {"dim": 1}),
        (x, 2, {"dim": 0, "output_size": 4}),
        (x, [1, 2], {"dim": 0, "output_size": 3}),
        (np.float64(5.0), 3, {}),
        (np.zeros((0, 3)), 2, {"dim": 0}),
    ]


def test_repeat_interleave_matches_torch():
    torch = _torch()
    for values, repeats, kw in _interleave_cases(torch):
        x, t = _pair(values, grad=True)
        if isinstance(repeats, list):
            r, tr = tp.tensor(repeats), torch.tensor(repeats)
        else:
            r = tr = repeats
        got, want = tp.repeat_interleave(x, r, **kw), torch.repeat_interleave(t, tr, **kw)
        same(got, want)
        _grads(got, want, [x], [t])
        same(x.repeat_interleave(r, **kw), t.repeat_interleave(tr, **kw))


def test_repeat_interleave_of_counts_matches_torch():
    torch = _torch()
    for dtype in ("int64", "int32"):
        c, tc = _pair([1, 3, 0, 2], dtype)
        same(tp.repeat_interleave(c), torch.repeat_interleave(tc))
    c, tc = _pair([1, 3, 0, 2], "int64")
    same(tp.repeat_interleave(c, output_size=6), torch.repeat_interleave(tc, output_size=6))


def test_repeat_interleave_errors_match_torch():
    torch = _torch()
    x, t = _pair(np.ones((2, 3)))
    cases = [
        ([1, -2], {"dim": 0}),
        ([1, 2], {"dim": 1}),
        ([1.0, 2.0], {"dim": 0}),
        ([[1, 2]], {"dim": 0}),
        ([True, False], {"dim": 0}),
        ([1, 2], {"dim": 0, "output_size": 4}),
        (-1, {"dim": 0}),
        (2.0, {}),
        (True, {}),
        (2, {"dim": 2}),
        (2, {"dim": 0, "output_size": 5}),
    ]
    for repeats, kw in cases:
        if isinstance(repeats, list):
            r, tr = tp.tensor(repeats), torch.tensor(repeats)
        else:
            r = tr = repeats
        same_outcome(
            lambda: tp.repeat_interleave(x, r, **kw),
            lambda: torch.repeat_interleave(t, tr, **kw),
            f"repeat_interleave({repeats!r}, {kw})",
        )
    for counts in ([1.0, 2.0], [[1, 2]], [1, -1]):
        c, tc = tp.tensor(counts), torch.tensor(counts)
        same_outcome(lambda: tp.repeat_interleave(c), lambda: torch.repeat_interleave(tc))


def test_repeat_interleave_on_meta_needs_output_size_for_tensor_repeats():
    x = tp.empty(2, 3, device="meta")
    counts = tp.tensor([1, 2]).to("meta")
    assert tp.repeat_interleave(x, 2, dim=1).shape == (2, 6)
    assert tp.repeat_interleave(x, counts, dim=0, output_size=3).shape == (3, 3)
    with pytest.raises(NotImplementedError, match="meta"):
        tp.repeat_interleave(x, counts, dim=0)


# ---- cummax, cummin --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("dtype", ALL)
def test_cummax_cummin_match_torch_across_dtypes(name, dtype, device):
    torch = _torch()
    values = _values(dtype, (3, 11))
    if dtype in FLOATS:
        values[0, [2, 5, 6]] = [NAN, NAN, INF]
        values[1, [1, 3, 4]] = [-INF, 1.0, 1.0]
        values[2, [0, 4]] = [-0.0, 0.0]
    x, t = _pair(values, dtype, device)
    for dim in (0, 1, -1):
        same_outcome(lambda: getattr(tp, name)(x, dim), lambda: getattr(torch, name)(t, dim))
    if dtype not in COMPLEX:  # torch returns a 0-d complex tensor as it is: unchecked
        same_outcome(lambda: getattr(x[0, 0], name)(0), lambda: getattr(t[0, 0], name)(0))
        same_outcome(lambda: getattr(x[0, 0], name)(1), lambda: getattr(t[0, 0], name)(1))


def test_cummax_returns_values_and_indices_by_name():
    r = tp.cummax(tp.tensor([1, 3, 3, 2]), 0)
    assert r.values.tolist() == [1, 3, 3, 3] and r.indices.tolist() == [0, 1, 2, 2]
    values, indices = tp.tensor([2.0, 1.0]).cummin(dim=0)
    assert type(r).__name__ == "cummax" and indices.tolist() == [0, 1]


@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_gradients_match_torch(name):
    _torch()
    x, t = _pair([[1.0, 3.0, 3.0, 2.0, 5.0], [4.0, 0.0, 4.0, -1.0, 4.0]], grad=True)
    for dim in (0, 1):
        _grads(getattr(x, name)(dim).values, getattr(t, name)(dim).values, [x], [t])


# ---- masked_select ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL)
def test_masked_select_matches_torch(dtype, device):
    torch = _torch()
    x, t = _pair(_values(dtype, (3, 4)), dtype, device)
    for shape in [(3, 4), (1, 4), (3, 1), (2, 3, 4), ()]:
        m, tm = _pair(_values("bool", shape, seed=1), "bool", device)
        same_outcome(lambda: tp.masked_select(x, m), lambda: torch.masked_select(t, tm))
        same_outcome(lambda: x[0].masked_select(m), lambda: t[0].masked_select(tm))


def test_masked_select_errors_match_torch():
    torch = _torch()
    x, t = _pair(np.ones((2, 3)))
    for mask in ([1, 0, 1], np.ones((3, 2), bool), np.ones(3, np.uint8)):
        m, tm = _pair(mask, np.asarray(mask).dtype.name)
        same_outcome(lambda: tp.masked_select(x, m), lambda: torch.masked_select(t, tm))
    same_outcome(lambda: tp.masked_select(x, True), lambda: torch.masked_select(t, True))


def test_masked_select_gradient_matches_torch():
    torch = _torch()
    x, t = _pair(_values("float64", (4,)), grad=True)  # broadcast to the mask's (3, 4)
    m, tm = _pair(_values("bool", (3, 4), seed=1), "bool")
    _grads(tp.masked_select(x, m), torch.masked_select(t, tm), [x], [t])


def test_masked_select_reads_the_mask_on_the_host():
    assert "host" in tp.masked_select.__doc__
    meta = tp.ones(2, 3, device="meta")
    with pytest.raises(NotImplementedError, match="values"):
        tp.masked_select(meta, meta > 0)
    empty = tp.empty(0, 3, device="meta")
    assert tp.masked_select(empty, tp.ones(3, dtype=tp.bool, device="meta")).shape == (0,)


# ---- index_add, index_copy -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL)
def test_index_add_matches_torch_across_dtypes(dtype, device):
    torch = _torch()
    x, t = _pair(_values(dtype, (3, 4)), dtype, device)
    s, ts = _pair(_values(dtype, (3, 4), seed=1), dtype, device)
    i, ti = _pair([2, 0, 2], "int64", device)
    for alpha in (1, 2, -1, 2.5, True, 1j):
        same_outcome(
            lambda: x.index_add(0, i, s, alpha=alpha),
            lambda: t.index_add(0, ti, ts, alpha=alpha),
            f"index_add({dtype}, alpha={alpha!r})",
        )
    i32, ti32 = _pair([3, 1, 1], "int32", device)
    s2, ts2 = _pair(_values(dtype, (3, 3), seed=2), dtype, device)
    same_outcome(lambda: tp.index_add(x, 1, i32, s2), lambda: torch.index_add(t, 1, ti32, ts2))


@pytest.mark.parametrize("dtype", ALL)
def test_index_copy_matches_torch_across_dtypes(dtype, device):
    torch = _torch()
    x, t = _pair(_values(dtype, (3, 4)), dtype, device)
    s, ts = _pair(_values(dtype, (3, 2), seed=1), dtype, device)
    i, ti = _pair([3, 0], "int64", device)
    same(x.index_copy(1, i, s), t.index_copy(1, ti, ts))
    same(tp.index_copy(x[0], 0, i, s[0]), torch.index_copy(t[0], 0, ti, ts[0]))


@pytest.mark.parametrize("name", ["index_add", "index_copy"])
def test_index_add_index_copy_errors_match_torch(name):
    _torch()
    x, t = _pair(np.zeros((3, 2)))

    def both(index, source, dim=0, self_=(x, t)):
        a, ta = self_
        i, ti = index if isinstance(index, tuple) else (index, index)
        s, ts = source if isinstance(source, tuple) else (source, source)
        same_outcome(
            lambda: getattr(a, name)(dim, i, s),
            lambda: getattr(ta, name)(dim, ti, ts),
            f"{name}(dim={dim}, {index!r}, {source!r})",
        )

    def index(values, dtype="int64"):
        return _pair(values, dtype)

    def source(values, dtype="float64"):
        return _pair(values, dtype)

    ones = source(np.ones((2, 2)))
    both(index([0, 1]), source(np.ones((2, 2)), "float32"))  # source dtype
    both(index([0.0, 1.0], "float64"), ones)  # a float index
    both(index([0, 1], "int32"), ones)  # int32: index_add takes it, index_copy does not
    both(index([[0, 1]]), ones)  # not a vector
    both(index([0, 1, 2]), ones)  # one slice per index
    both(index([0, 1]), source(np.ones(2)))  # slices of the wrong shape
    both(index([0, 1]), source(np.ones((2, 2, 1))))
    both(index([0, 1]), source(np.ones((2, 3))))
    both(index([0, 1]), ones, dim=2)  # dim out of range
    if name == "index_add":  # index_copy's kind differs (see the next test)
        both(index([0, 5]), ones)  # out of bounds
    both([0, 1], ones)  # a list index
    both(index([0, 1]), 2.0)  # a number source
    both(index(1), source(np.ones((1, 2))))  # a 0-d index is one index
    both(index(1), source(np.ones(2)))
    both(index([1]), source(5.0))  # a 0-d source
    both(index([0, 1]), source(5.0))
    both(index([0, 0]), source([1.0, 2.0]), self_=source(5.0))  # into a 0-d tensor
    both(index([1]), source(5.0), self_=source(np.zeros(3)))
    both(index(0), source(1.0), self_=source(5.0))


def test_index_copy_out_of_bounds_is_a_runtime_error():
    # NOTE: torch raises IndexError; bounds are checked where the values are read, by the
    # kernel, and the dispatcher reports kernel errors as RuntimeError
    with pytest.raises(RuntimeError, match="out of bounds"):
        tp.zeros(3).index_copy(0, tp.tensor([5]), tp.ones(1))


def test_index_add_index_copy_gradients_match_torch():
    _torch()
    x, t = _pair(_values("complex128", (3, 4)), "complex128", grad=True)
    s, ts = _pair(_values("complex128", (3, 2), seed=1), "complex128", grad=True)
    i, ti = _pair([3, 1], "int64")
    _grads(x.index_copy(1, i, s), t.index_copy(1, ti, ts), [x, s], [t, ts])
    _grads(x.index_add(1, i, s, alpha=2), t.index_add(1, ti, ts, alpha=2), [x, s], [t, ts])


def test_index_add_gradient_conjugates_a_complex_alpha():
    # NOTE: torch's index_add backward multiplies by alpha, not conj(alpha) (torch's own
    # gradcheck fails on it); this is add's rule, checked against torch with alpha folded in
    _torch()
    alpha = 0.5 + 1j
    x, t = _pair(_values("complex128", (3, 4)), "complex128", grad=True)
    s, ts = _pair(_values("complex128", (3, 2), seed=1), "complex128", grad=True)
    i, ti = _pair([3, 1], "int64")
    _grads(x.index_add(1, i, s, alpha=alpha), t.index_add(1, ti, ts * alpha), [x, s], [t, ts])


# ---- scatter_reduce --------------------------------------------------------------------------

REDUCTIONS = ["sum", "prod", "mean", "amax", "amin"]


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCTIONS)
@pytest.mark.parametrize("dtype", ALL)
def test_scatter_reduce_matches_torch_across_dtypes(dtype, reduce, include_self, device):
    torch = _torch()
    values = _values(dtype, (3, 4))
    if dtype in FLOATS and reduce in ("amax", "amin"):
        values[1, 2] = NAN
    x, t = _pair(values, dtype, device)
    s, ts = _pair(_values(dtype, (2, 5), seed=1), dtype, device)
    i, ti = _pair([[1, 1, 0], [2, 2, 2]], "int64", device)
    same_outcome(
        lambda: x.scatter_reduce(1, i, s, reduce, include_self=include_self),
        lambda: t.scatter_reduce(1, ti, ts, reduce, include_self=include_self),
        f"scatter_reduce({dtype}, {reduce}, include_self={include_self})",
    )
    i0, ti0 = _pair([[2, 0, 2, 0], [2, 1, 1, 1]], "int32", device)
    s0, ts0 = _pair(_values(dtype, (2, 4), seed=2), dtype, device)
    same_outcome(
        lambda: tp.scatter_reduce(x, 0, i0, s0, reduce, include_self=include_self),
        lambda: torch.scatter_reduce(t, 0, ti0, ts0, reduce, include_self=include_self),
    )


def test_scatter_reduce_errors_match_torch():
    _torch()
    x, t = _pair(np.ones((2, 3)))
    i, ti = _pair([[0]], "int64")
    s, ts = _pair(np.ones((1, 1)))
    cases = [
        (lambda a, i, s: a.scatter_reduce(1, i, s, "median")),
        (lambda a, i, s: a.scatter_reduce(1, i, s.float(), "sum")),
        (lambda a, i, s: a.scatter_reduce(1, i, 2.0, "sum")),
        (lambda a, i, s: a.scatter_reduce(1, i.double(), s, "sum")),
        (lambda a, i, s: a.scatter_reduce(1, i[0], s, "sum")),
        (lambda a, i, s: a.scatter_reduce(3, i, s, "sum")),
        (lambda a, i, s: a.scatter_reduce(1, i, s, "sum", include_self=1)),
        (lambda a, i, s: a.scatter_reduce(1, i + 5, s, "sum")),
        (lambda a, i, s: a.bool().scatter_reduce(1, i, s.bool(), "mean")),
        (lambda a, i, s: a.to(a.dtype).scatter_reduce(1, i, s, "sum")),
    ]
    for case in cases:
        same_outcome(lambda: case(x, i, s), lambda: case(t, ti, ts))
    z, tz = _pair(np.ones((2, 3)), "complex128")
    zs, tzs = _pair(np.ones((1, 1)), "complex128")
    same_outcome(
        lambda: z.scatter_reduce(1, i, zs, "amax"), lambda: tz.scatter_reduce(1, ti, tzs, "amax")
    )


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_scatter_reduce_gradients_match_torch(reduce, include_self):
    _torch()
    x, t = _pair(_values("float64", (3, 4)), grad=True)
    s, ts = _pair(_values("float64", (2, 3), seed=1), grad=True)
    i, ti = _pair([[1, 1, 0], [2, 2, 2]], "int64")
    kw = {"include_self": include_self}
    got, want = x.scatter_reduce(1, i, s, reduce, **kw), t.scatter_reduce(1, ti, ts, reduce, **kw)
    _grads(got, want, [x, s], [t, ts])


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean"])
def test_scatter_reduce_complex_gradients_pass_gradcheck(reduce, include_self):
    # torch has no complex derivative of scatter_reduce: finite differences are the oracle
    x = tp.tensor(_values("complex128", (3, 4)), requires_grad=True)
    s = tp.tensor(_values("complex128", (2, 3), seed=1), requires_grad=True)
    i = tp.tensor([[1, 1, 0], [2, 2, 2]])

    def f(x, s):
        return x.scatter_reduce(1, i, s, reduce, include_self=include_self)

    assert tp.autograd.gradcheck(f, (x, s), check_forward_ad=True)


@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_prod_gradients_with_zeros_match_torch(include_self):
    _torch()
    x, t = _pair([[0.0, 2.0, 3.0, 1.5], [1.0, 3.0, 2.0, 0.0], [2.0, 1.0, 0.0, 3.0]], grad=True)
    s, ts = _pair([[2.0, 0.0, 3.0], [1.5, 2.0, 0.0]], grad=True)
    i, ti = _pair([[1, 1, 0], [2, 2, 2]], "int64")
    kw = {"include_self": include_self}
    _grads(
        x.scatter_reduce(1, i, s, "prod", **kw),
        t.scatter_reduce(1, ti, ts, "prod", **kw),
        [x, s],
        [t, ts],
    )


def test_scatter_reduce_amax_ties_share_the_gradient_like_torch():
    _torch()
    x, t = _pair([[1.0, 5.0, 2.0]], grad=True)
    s, ts = _pair([[5.0, 5.0, 2.0]], grad=True)
    i, ti = _pair([[1, 1, 2]], "int64")
    _grads(x.scatter_reduce(1, i, s, "amax"), t.scatter_reduce(1, ti, ts, "amax"), [x, s], [t, ts])


def test_scatter_reduce_prod_double_backward_with_two_zeros_in_a_slot_raises():
    x = tp.tensor([1.0, 2.0], dtype=tp.float64, requires_grad=True)
    s = tp.tensor([0.0, 0.0], dtype=tp.float64, requires_grad=True)
    out = x.scatter_reduce(0, tp.tensor([0, 0]), s, "prod")
    (g,) = tp.autograd.grad(out.sum(), [s])  # first order: fine
    assert g.tolist() == [0.0, 0.0]
    out = x.scatter_reduce(0, tp.tensor([0, 0]), s, "prod")
    with pytest.raises(NotImplementedError, match="double backward"):
        tp.autograd.grad(out.sum(), [s], create_graph=True)


# ---- in place ------------------------------------------------------------------------------


def test_inplace_variants_write_into_the_tensor_like_torch():
    _torch()
    idx, tidx = _pair([2, 0], "int64")
    calls = [
        lambda a, idx: a.clamp_max_(0.5),
        lambda a, idx: a.addcdiv_(a, a + 4, value=2),
        lambda a, idx: a.lerp_(a * 2, 0.25),
        lambda a, idx: a.index_add_(0, idx, a[:2].clone(), alpha=3),
        lambda a, idx: a.index_copy_(0, idx, a[1:] * 2),
        lambda a, idx: a.scatter_reduce_(1, idx.reshape(1, 2), a[:1, :2] * 2, "prod"),
    ]
    for call in calls:
        x, t = _pair(_values("float64", (3, 4)))
        version = x._version
        assert call(x, idx) is x and x._version > version
        same(x, call(t, tidx))
    x = tp.ones(3)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x.lerp_(tp.ones(2, 3), 0.5)


def test_setting_a_part_first_thing_in_a_process_writes_it():
    """``z.real = v`` before any read of ``Tensor.real`` (the attribute is attached at
    import, not on first use, so the assignment cannot land in the instance dict)."""
    import subprocess
    import sys

    code = (
        "import tensorplay as tp\n"
        "z = tp.tensor([1 + 2j])\n"
        "z.imag = tp.tensor([7.0])\n"
        "z.real = tp.tensor([3.0])\n"
        "assert z.tolist() == [3 + 7j], z\n"
        "assert 'real' not in vars(z) and 'imag' not in vars(z)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
