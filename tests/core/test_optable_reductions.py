"""Property tests (hypothesis) of the reduction rows against numpy, with the references
(var/std correction, norm p, logsumexp) written out in optable_samples.REF."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra.numpy import array_shapes, arrays
from optable_samples import REF, allowed, assert_close, to_ref

import tensorplay as tp
from tensorplay._optable import ROWS

REDUCTIONS = [r for r in ROWS if r.kind == "reduction"]
_DTYPES = [
    tp.bool,
    tp.uint8,
    tp.int32,
    tp.int64,
    tp.float16,
    tp.bfloat16,
    tp.float32,
    tp.float64,
    tp.complex64,
]
_EXTRA = {
    "var": st.sampled_from([{}, {"unbiased": False}, {"correction": 0}, {"correction": 2}]),
    "std": st.sampled_from([{}, {"unbiased": False}, {"correction": 3}]),
    "norm": st.sampled_from(
        [{}, {"p": 1}, {"p": 2}, {"p": 3}, {"p": 0.5}, {"p": 0}, {"p": math.inf}, {"p": -math.inf}]
    ),
    "sum": st.sampled_from([{}, {"dtype": tp.float64}]),
}


def _values(dt):
    if dt is tp.bool:
        return st.booleans()
    if dt.category == 1:
        return st.integers(0 if dt is tp.uint8 else -9, 9)
    f = st.floats(-5, 5, width=16 if dt is tp.float16 else 32, allow_subnormal=False)
    return st.builds(complex, f, f) if dt.category == 3 else f


@pytest.mark.parametrize("row", REDUCTIONS, ids=[r.name for r in REDUCTIONS])
@given(data=st.data())
def test_reduction_property(row, data):
    dt = data.draw(st.sampled_from(_DTYPES), label="dtype")
    shape = data.draw(array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4), label="shape")
    np_dt = np.float32 if dt is tp.bfloat16 else dt.np
    x = tp.tensor(data.draw(arrays(np_dt, shape, elements=_values(dt))), dtype=dt)
    if x.dim() >= 2 and data.draw(st.booleans(), label="transposed"):
        x = x.transpose(0, -1)
    ndim = x.dim()
    needs_dim = "dim=None" not in row.params
    multi_dim_ok = row.name not in ("argmax", "argmin", "all", "any", "max_dim", "min_dim")
    choices = [] if needs_dim else [None]
    choices += list(range(-max(ndim, 1), max(ndim, 1)))
    if multi_dim_ok and ndim >= 2:
        choices.append((0, ndim - 1))
    dim = data.draw(st.sampled_from(choices), label="dim")
    kw = {"keepdim": data.draw(st.booleans(), label="keepdim")}
    if dim is not None:
        kw["dim"] = dim
    kw.update(data.draw(_EXTRA.get(row.name, st.just({})), label="params"))
    try:
        got = row.fn(x, **kw)
    except (TypeError, RuntimeError) as e:
        assert not allowed(row, dt) or "floating point" in str(e), f"{row.name}({dt}) {e!r}"
        return
    with np.errstate(all="ignore"):
        want = REF[row.name](to_ref(x), **kw)
    if isinstance(want, tuple):
        for g, w in zip(got, want):
            assert_close(g, w, msg=f"{row.name} {kw}")
    else:
        assert_close(got, want, msg=f"{row.name} {kw}")


def test_var_std_correction_explicit():
    x = [1.0, 2.0, 4.0, 7.0]
    m = sum(x) / 4
    ss = sum((v - m) ** 2 for v in x)
    t = tp.tensor(x, dtype=tp.float64)
    assert t.var().item() == pytest.approx(ss / 3)
    assert t.var(unbiased=False).item() == pytest.approx(ss / 4)
    assert t.var(correction=2).item() == pytest.approx(ss / 2)
    assert t.std(correction=0).item() == pytest.approx(math.sqrt(ss / 4))
    assert math.isnan(tp.tensor([3.0]).var().item())  # one sample, correction 1: 0/0
    with pytest.raises(RuntimeError, match="not supported"):
        tp.tensor([1, 2]).var()


def test_norm_p_explicit():
    x = tp.tensor([[3.0, -4.0], [0.0, 1.0]])
    assert x.norm().item() == pytest.approx(math.sqrt(26))
    assert x.norm(p=1).item() == pytest.approx(8.0)
    assert x.norm(p=0).item() == 3.0
    assert x.norm(p=math.inf).item() == 4.0
    assert x.norm(p=-math.inf).item() == 0.0
    assert x.norm(p=3).item() == pytest.approx((27 + 64 + 1) ** (1 / 3))
    np.testing.assert_allclose(x.norm(dim=1).numpy(), [5.0, 1.0])
    assert tp.tensor([3 + 4j]).norm().item() == pytest.approx(5.0)
    assert tp.tensor([3 + 4j]).norm().dtype is tp.float32


def test_logsumexp_is_stable_and_handles_inf():
    x = tp.tensor([1000.0, 1000.0], dtype=tp.float64)
    assert tp.logsumexp(x, 0).item() == pytest.approx(1000 + math.log(2))
    y = tp.tensor([-math.inf, -math.inf])
    assert tp.logsumexp(y, 0).item() == -math.inf
    assert tp.logsumexp(tp.tensor([1, 2]), 0).dtype is tp.float32
    np.testing.assert_array_equal(tp.logsumexp(tp.empty(0, 3), 0).numpy(), [-np.inf] * 3)


def test_empty_reductions():
    e = tp.empty(0, 3)
    assert e.sum().item() == 0.0 and e.prod().item() == 1.0
    assert math.isnan(e.mean().item())
    assert e.all().item() is True and e.any().item() is False
    assert tuple(e.amax(dim=1).shape) == (0,)
    with pytest.raises(RuntimeError, match="numel"):
        e.amax()
    with pytest.raises((RuntimeError, IndexError), match="numel"):
        e.argmax()
    with pytest.raises(RuntimeError, match="numel"):
        tp.max(e)


def test_max_min_overloads():
    x = tp.tensor([[1.0, 5.0, 3.0], [7.0, 2.0, 7.0]])
    v, i = tp.max(x, 1)
    assert v.tolist() == [5.0, 7.0] and i.tolist() == [1, 0] and i.dtype is tp.int64
    r = x.min(dim=0, keepdim=True)
    assert r.values.tolist() == [[1.0, 2.0, 3.0]] and r.indices.tolist() == [[0, 1, 0]]
    assert tp.max(x).item() == 7.0
    assert tp.max(x, tp.full((2, 3), 4.0)).tolist() == [[4.0, 5.0, 4.0], [7.0, 4.0, 7.0]]


def test_sum_dtype_and_int_accumulation():
    x = tp.tensor([100, 100], dtype=tp.int8)
    assert x.sum().dtype is tp.int64 and x.sum().item() == 200
    assert x.sum(dtype=tp.float64).dtype is tp.float64
    assert tp.tensor([True, True]).sum().item() == 2
    assert tp.cumsum(tp.tensor([1, 2, 3], dtype=tp.int32), 0).dtype is tp.int64
    with pytest.raises(RuntimeError, match="floating point"):
        tp.tensor([1, 2]).mean()
    assert tp.tensor([1, 2]).mean(dtype=tp.float32).item() == 1.5
