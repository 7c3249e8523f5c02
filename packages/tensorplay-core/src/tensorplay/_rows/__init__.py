"""The rows of the op table, one module per family.

Each family module lists its rows in ``ROWS``, in the order it defines them, next to their
kernels, meta rules and derivative formulas: one op is defined in one place. Defining a row
registers nothing; ``tensorplay._optable`` registers the families' rows in its fixed order.
The combinators that build ``vjp``/``jvp`` columns live in ``tensorplay.autograd._derivatives``.
"""

from __future__ import annotations

from tensorplay._dispatch import OpDef


def row_maker(rows: list):
    """The ``op(name, params, **columns)`` of one family: a new row, appended to ``rows``."""

    def op(name, params, **kw) -> OpDef:
        row = OpDef(name, params, **kw)
        rows.append(row)
        return row

    return op
