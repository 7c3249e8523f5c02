"""Edge cases where TensorPlay used to differ from PyTorch (issue 13, found by the
differential suite): each asserts torch's values."""

from __future__ import annotations

import math

import pytest

import tensorplay as tp


@pytest.mark.parametrize(
    "value, soft, log_soft",
    [(1.0, 1.0, 0.0), (math.inf, math.nan, math.nan), (-math.inf, math.nan, math.nan)],
)
def test_softmax_of_a_0d_tensor_is_exp_of_x_minus_x(value, soft, log_soft):
    got = tp.softmax(tp.tensor(value), 0).item()
    got_log = tp.log_softmax(tp.tensor(value), 0).item()
    assert (math.isnan(got) and math.isnan(soft)) or got == soft
    assert (math.isnan(got_log) and math.isnan(log_soft)) or got_log == log_soft


def test_chunk_of_an_empty_dimension_gives_as_many_empty_chunks_as_asked():
    parts = tp.zeros(2, 0).chunk(3, 1)
    assert len(parts) == 3 and all(tuple(p.shape) == (2, 0) for p in parts)


def test_chunk_of_a_0d_tensor_raises():
    with pytest.raises(RuntimeError, match="at least a 1-dimensional tensor"):
        tp.tensor(1.0).chunk(2)


def test_squeeze_refuses_a_repeated_dim():
    with pytest.raises(RuntimeError, match="dim 1 appears multiple times"):
        tp.zeros(2, 1, 3).squeeze((1, -2))
    assert tuple(tp.zeros(2, 1, 1).squeeze((1, 2)).shape) == (2,)
