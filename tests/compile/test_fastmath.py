"""The float32 fast-math formulas against numpy (float64) over their whole range."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorplay.compiler._fastmath import FastMath


def _kernel(tvm, formula):
    te = tvm.te
    n = te.var("n", "int64")
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: formula(x[i]), name="y")
    mod = tvm.IRModule({"main": te.create_prim_func([x, y])})
    f = tvm.compile(mod, target="llvm")["main"]

    def run(values: np.ndarray) -> np.ndarray:
        out = np.empty_like(values)
        f(values, out)
        return out

    return run


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Error in float32 ulps of the reference (relative error for normal numbers)."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


X = np.concatenate(
    [
        np.linspace(-100, 100, 200_001, dtype=np.float32),
        np.float32(10.0) ** np.arange(-30, 1, dtype=np.float32),
        -(np.float32(10.0) ** np.arange(-30, 1, dtype=np.float32)),
    ]
)


def test_exp_accuracy(tvm):
    run = _kernel(tvm, FastMath(tvm).exp)
    want = np.exp(X.astype(np.float64))
    got = run(X)
    normal = (want > 1.2e-38) & (want < 3.4e38)
    assert _ulps(got[normal], want[normal]).max() <= 4
    assert np.all(got[X > 88.8] == np.inf)  # overflow is inf, as in libm
    assert np.all(got[X < -104] == 0)


def test_tanh_accuracy(tvm):
    run = _kernel(tvm, FastMath(tvm).tanh)
    want = np.tanh(X.astype(np.float64))
    got = run(X)
    assert _ulps(got, want).max() <= 8
    assert np.abs(got).max() <= 1.0


def test_erf_accuracy(tvm):
    run = _kernel(tvm, FastMath(tvm).erf)
    want = np.array([math.erf(v) for v in X.astype(np.float64)])
    got = run(X)
    assert np.abs(got - want).max() < 2e-6


def test_sigmoid_accuracy(tvm):
    run = _kernel(tvm, FastMath(tvm).sigmoid)
    want = 1 / (1 + np.exp(-X.astype(np.float64)))
    got = run(X)
    assert np.abs(got - want).max() < 2e-7
    assert np.all(np.abs(got - want) <= 1e-6 * want + 1e-37)


@pytest.mark.parametrize("name", ["exp", "tanh", "erf", "sigmoid"])
def test_nan_and_infinities_propagate(tvm, name):
    run = _kernel(tvm, getattr(FastMath(tvm), name))
    got = run(np.array([np.nan, np.inf, -np.inf], dtype=np.float32))
    assert np.isnan(got[0])
    expected = {
        "exp": [np.inf, 0.0],
        "tanh": [1.0, -1.0],
        "erf": [1.0, -1.0],
        "sigmoid": [1.0, 0.0],
    }[name]
    np.testing.assert_allclose(got[1:], expected, atol=1e-7)
