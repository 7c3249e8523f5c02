"""Numeric helpers for the kernels tests (numpy in float64 is the oracle)."""

from __future__ import annotations

import numpy as np

import tensorplay as tp


def rand(*shape: int, dtype: tp.dtype = tp.float32, device: str = "cpu", seed: int = 0):
    """A tensor of normal values and its float64 numpy copy (the oracle's input)."""
    values = np.random.default_rng(seed).standard_normal(shape)
    t = tp.tensor(values, dtype=tp.float64).to(dtype).to(device)
    return t, to_numpy(t)  # the values as rounded to ``dtype``


def to_numpy(t: tp.Tensor) -> np.ndarray:
    return t.cpu().to(tp.float64).numpy()


# tolerances by dtype for results compared with a float64 numpy oracle
TOL = {
    tp.float64: {"rtol": 1e-10, "atol": 1e-12},
    tp.float32: {"rtol": 1e-5, "atol": 1e-6},
    tp.float16: {"rtol": 2e-3, "atol": 2e-3},
    tp.bfloat16: {"rtol": 1.6e-2, "atol": 1.6e-2},
}
