"""The op table: every built-in op is one row, defined once, in the module of its family.

A row names the public signature, the kernel (numpy and CuPy share it: ``xp``
is the array module), the meta rules (shape, dtype) and flags. ``_dispatch``
turns each row into ``tp.<name>``, ``Tensor.<name>``, ``Tensor.<name>_`` and
operators; tests are generated from the same rows (``tests/core``). The
``vjp``/``jvp`` columns belong to autograd; the combinators that build them are in
``tensorplay.autograd._derivatives``.

The families, in ``tensorplay/_rows/``:

- ``pointwise``: arithmetic, transcendental, activations, clamp/where/rounding, comparisons
  and logic
- ``reductions``: reductions, scans (``cumsum``/``cumprod``) and ``softmax``/``log_softmax``
- ``linalg``: ``matmul``, ``mm``, ``bmm``, ``dot``, ``outer``, ``einsum``
- ``joins``: ``cat``, ``stack``
- ``indexing``: ``gather``, ``scatter``, ``index_select``, ``masked_fill``
- ``copies``: ``clone``, ``contiguous_copy``, ``_to_copy``
- ``advanced_indexing``: ``_index``, ``_index_put`` (``x[idx]``, ``x[idx] = v``)
- ``views``: ``view``, ``reshape``, ``permute``... (geometry only, no kernel)
- ``sorting``: ``sort``, ``argsort``, ``topk``, ``tril``/``triu``, ``repeat``, ``flip``...
- ``convolution``: ``conv1d``/``conv2d`` and transposes, pooling

This module assembles the table: it registers the rows of ``FAMILIES`` in that order, each
family's in the order it defines them. That order is the order of ``ROWS`` and ``OPS``, in
which ``Tensor`` gets its methods, ``overrides.get_overridable_functions`` lists them and
the generated tests run; a new row goes at the end of its family.
"""

from __future__ import annotations

from tensorplay._dispatch import OpDef, register
from tensorplay._rows import (
    advanced_indexing,
    convolution,
    copies,
    indexing,
    joins,
    linalg,
    pointwise,
    reductions,
    sorting,
    views,
)
from tensorplay._rows.reductions import MinMax

FAMILIES = (
    pointwise,
    reductions,
    linalg,
    joins,
    indexing,
    copies,
    advanced_indexing,
    views,
    sorting,
    convolution,
)

ROWS: list[OpDef] = [register(row) for family in FAMILIES for row in family.ROWS]

__all__ = ["FAMILIES", "MinMax", "ROWS"]
