"""``tp.ops.<namespace>.<op>`` resolves operators registered by tensorplay.library."""

from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay import library


@library.custom_op("nsops::twice", mutates_args=())
def twice(x):
    return x * 2


def test_tp_ops_returns_the_registered_op():
    assert tp.ops.nsops.twice is twice
    assert tp.ops.nsops.twice(tp.ones(2)).tolist() == [2.0, 2.0]
    assert "twice" in dir(tp.ops.nsops) and "nsops" in dir(tp.ops)


def test_unknown_namespace_names_the_fix():
    with pytest.raises(AttributeError, match=r"no namespace 'nosuchns'.*custom_op"):
        _ = tp.ops.nosuchns


def test_unknown_op_lists_the_registered_ones():
    with pytest.raises(AttributeError, match=r"tp.ops.nsops has no operator 'thrice'.*'twice'"):
        _ = tp.ops.nsops.thrice
