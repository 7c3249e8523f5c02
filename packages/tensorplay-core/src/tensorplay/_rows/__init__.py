"""The rows of the op table, one module per family.

Each family module lists its rows in ``ROWS``, in the order it defines them, next to their
kernels, meta rules and derivative formulas: one op is defined in one place. Defining a row
registers nothing; ``tensorplay._optable`` registers the families' rows in its fixed order.
The combinators that build ``vjp``/``jvp`` columns live in ``tensorplay.autograd._derivatives``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tensorplay._dispatch import OpDef, call
from tensorplay.overrides import overridable


def row_maker(rows: list):
    """The ``op(name, params, **columns)`` of one family: a new row, appended to ``rows``."""

    def op(name, params, **kw) -> OpDef:
        row = OpDef(name, params, **kw)
        rows.append(row)
        return row

    return op


# ---- rows whose public function reshapes the dispatcher's result -----------------------------


@dataclasses.dataclass(eq=False)
class Finished(OpDef):
    """A row whose public function returns ``finish(result, **arguments)`` of the dispatcher's
    ``result`` (torch's named ``(values, indices)`` pairs, ``nonzero(as_tuple=True)``). The
    function is overridable itself, so a ``__tensorplay_function__`` handler or a function
    mode sees it (``func is tp.sort``) and its result is returned as it is."""

    finish: Callable | None = None

    @property
    def fn(self) -> Callable:
        if self._fn is None:
            self._fn = _finished_function(self)
        return self._fn


def _finished_function(row: Finished) -> Callable:
    """``tp.<name>``: the row's own signature (one tensor input first), generated as the
    dispatcher generates the others, so argument parsing is Python's."""
    names = [p.split("=")[0].strip() for p in row.params.split(",")]
    names = [n for n in names if n not in ("", "*")]
    params = "{" + ", ".join(f"{n!r}: {n}" for n in names[1:]) + "}"
    args = ", ".join(f"{n}={n}" for n in names)
    sig = row.params + (", out=None" if row.out else "")
    src = (
        f"def {row.name}({sig}):\n"
        f"    result = _call(_row, ({names[0]},), {params}, {'out' if row.out else 'None'})\n"
        f"    return _finish(result, {args})\n"
    )
    env = {"_call": call, "_row": row, "_finish": row.finish}
    exec(compile(src, f"<tensorplay op {row.name}>", "exec"), env)  # noqa: S102 - generated binding
    fn = env[row.name]
    fn.__doc__ = row.doc or f"tensorplay.{row.name}({sig})"
    fn.__module__ = "tensorplay"
    return overridable(fn)


def finished_maker(rows: list):
    """The ``finished(name, params, finish, **columns)`` of one family (see ``Finished``)."""

    def finished(name, params, finish, **kw) -> Finished:
        row = Finished(name, params, finish=finish, **kw)
        rows.append(row)
        return row

    return finished


def values_jvp(ctx, t):
    """Forward mode of a (values, indices) row whose values are the input's elements at
    ``indices`` along ``dim`` (sort, topk, cummax, ...): the tangent at the same places."""
    if t is None:
        return None
    if ctx.inputs[0].dim() == 0:
        return (t,)
    return (t.gather(ctx.params["dim"], ctx.out[1]),)  # forward mode sees every output
