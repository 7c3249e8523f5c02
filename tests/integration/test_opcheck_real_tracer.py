"""opcheck's test_aot_dispatch_dynamic with tensorplay-compile's real Tracer (tests/library
checks it with a stand-in tracer, and that it is an explicit skip without tensorplay-compile).

Cross-component: tensorplay-library + tensorplay-compile."""

from __future__ import annotations

import itertools
import warnings

import tensorplay as tp
from tensorplay import graph, library
from tensorplay.library import _opcheck

_names = itertools.count()


def _good():
    op = library.custom_op(f"opcheck_real_tracer{next(_names)}::op", lambda x, w: x * w)
    op.register_fake(lambda x, w: x.new_empty(x.shape))

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, g * x

    op.register_autograd(backward, setup_context=lambda ctx, i, o: ctx.save_for_backward(*i))
    # a batching rule too, so that test_vmap runs instead of reporting a skip
    op.register_vmap(lambda info, in_dims, x, w: (op(x, w), 0 if 0 in in_dims else None))
    return op


def test_opcheck_captures_with_the_real_tracer():
    assert _opcheck._tracer_class() is graph.Tracer


def test_aot_dispatch_dynamic_with_the_real_tracer():
    op = _good()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a skipped check would warn
        assert library.opcheck(op, (tp.randn(4), tp.randn(4)), test_utils="all") == {}
