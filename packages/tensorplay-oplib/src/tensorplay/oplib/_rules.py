"""Shape/dtype rules: how the outputs of an operator look, without running it.

One rule per output. It is the operator's fake kernel (meta tensors, graph capture) and it
is how the generated wrapper allocates the outputs a kernel writes into. The common rules
have names; anything else is an expression over the arguments::

    fake: {same_as: x}                                 # x's shape and dtype
    fake: {broadcast: [x, b]}                          # broadcast shapes, promoted dtype
    fake: {reduce: {input: x, dim: dim, keepdim: keepdim}}
    fake: {shape: "x.shape[:-1] + (n,)", dtype: "x.dtype"}
    fake: [{same_as: x}, {same_as: x, dtype: tp.int64}]   # two outputs

``dim`` and ``keepdim`` are argument names or literals (``dim: 1``, ``dim: [0, 1]``,
``keepdim: true``); a ``dim`` of ``None`` reduces every dimension. ``dtype:`` (an expression,
e.g. ``tp.int64`` or ``x.dtype``) overrides the dtype of a named rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorplay as tp
from tensorplay.oplib._errors import OplibError, Where
from tensorplay.oplib._formula import Expression
from tensorplay.oplib._schema import OpSchema

__all__ = ["OutputRule", "parse_rules"]

_KINDS = ("same_as", "broadcast", "reduce", "shape")


class OutputRule:
    """The shape and dtype of one output: ``plan(values) -> (shape, dtype)`` from the call's
    argument values in schema order."""

    def __init__(self, spec: Any, schema: OpSchema, where: Where, index: int):
        self.where = where
        what = f"the shape rule of output {index}"
        if not isinstance(spec, Mapping):
            raise OplibError(
                where,
                f"{what} must be a mapping such as {{same_as: x}}, {{broadcast: [x, b]}}, "
                f"{{reduce: {{input: x, dim: dim}}}} or {{shape: '...', dtype: '...'}}; "
                f"got {spec!r}",
            )
        self.json = dict(spec)
        names = [a.name for a in schema.args]
        self._pos = {a.name: i for i, a in enumerate(schema.args)}
        self._tensors = {a.name for a in schema.args if a.type == "Tensor"}
        kinds = [k for k in _KINDS if k in spec]
        extra = sorted(set(spec) - set(_KINDS) - {"dtype"})
        if extra:
            raise OplibError(
                where, f"{what}: unknown key(s) {extra}; a rule is one of {list(_KINDS)} (+ dtype)"
            )
        if len(kinds) != 1:
            raise OplibError(where, f"{what} must use exactly one of {list(_KINDS)}, got {kinds}")
        self.kind = kinds[0]
        value = spec[self.kind]
        self._dtype: Expression | None = None
        if "dtype" in spec:
            self._dtype = Expression(spec["dtype"], where, f"{what}: dtype", names, ()).bind({})
        if self.kind == "same_as":
            self._inputs = [self._tensor(value, what)]
        elif self.kind == "broadcast":
            if not isinstance(value, Sequence) or isinstance(value, str) or not value:
                raise OplibError(where, f"{what}: broadcast takes a list of tensor arguments")
            self._inputs = [self._tensor(v, what) for v in value]
        elif self.kind == "reduce":
            if not isinstance(value, Mapping) or "input" not in value:
                raise OplibError(
                    where,
                    f"{what}: reduce takes {{input: <tensor argument>, dim: ..., keepdim: ...}}",
                )
            unknown = sorted(set(value) - {"input", "dim", "keepdim"})
            if unknown:
                raise OplibError(
                    where, f"{what}: reduce has no key(s) {unknown} (input, dim, keepdim)"
                )
            self._inputs = [self._tensor(value["input"], what)]
            self._dim = self._arg_or_literal(value.get("dim"), what, "dim", (int, list, type(None)))
            self._keepdim = self._arg_or_literal(
                value.get("keepdim", False), what, "keepdim", (bool,)
            )
        else:
            self._shape = Expression(value, where, f"{what}: shape", names, ()).bind({})
            self._inputs = [self._pos[n] for n in names if n in self._tensors][:1]
            if self._dtype is None and not self._inputs:
                raise OplibError(where, f"{what}: give a dtype (the op has no tensor argument)")
        self.plan = self._planner()

    def _tensor(self, name: Any, what: str) -> int:
        if name not in self._tensors:
            raise OplibError(
                self.where,
                f"{what} names {name!r}, which is not a Tensor argument of the schema "
                f"(Tensor arguments: {sorted(self._tensors)})",
            )
        return self._pos[name]

    def _arg_or_literal(self, value: Any, what: str, key: str, literal: tuple) -> tuple[bool, Any]:
        """(True, argument position) for an argument name, (False, value) for a literal."""
        if isinstance(value, str):
            if value not in self._pos:
                raise OplibError(
                    self.where, f"{what}: {key} names {value!r}, which is not an argument"
                )
            return True, self._pos[value]
        if not isinstance(value, literal) or (
            isinstance(value, list) and not all(type(d) is int for d in value)
        ):
            raise OplibError(
                self.where, f"{what}: {key} must be an argument name or a literal, got {value!r}"
            )
        return False, value

    def _planner(self) -> Any:
        """``plan(values) -> (shape, dtype)`` for this rule, specialised once: it runs on
        every call of the operator (it allocates the outputs)."""
        kind, inputs, pos = self.kind, self._inputs, self._pos
        if kind == "same_as":
            (i,) = inputs

            def plan(values: Sequence[Any]) -> tuple[Any, Any]:
                t = values[i]
                return t.shape, t.dtype

        elif kind == "broadcast":

            def plan(values: Sequence[Any]) -> tuple[Any, Any]:
                first = values[inputs[0]]
                shape, dtype = first.shape, first.dtype
                for k in inputs[1:]:
                    t = values[k]
                    if t.shape != shape:
                        shape = tp.broadcast_shapes(shape, t.shape)
                    if t.dtype is not dtype:
                        dtype = tp.promote_types(dtype, t.dtype)
                return shape, dtype

        elif kind == "reduce":
            (i,) = inputs
            dim_is_arg, dim = self._dim
            keep_is_arg, keep = self._keepdim

            def plan(values: Sequence[Any]) -> tuple[Any, Any]:
                t = values[i]
                d = values[dim] if dim_is_arg else dim
                k = bool(values[keep] if keep_is_arg else keep)
                return _reduced(tuple(t.shape), d, k), t.dtype

        else:
            shape_expr = self._shape
            first = inputs[0] if inputs else None

            def plan(values: Sequence[Any]) -> tuple[Any, Any]:
                shape = tuple(int(s) for s in shape_expr.fn(*_pick(shape_expr, values, pos)))
                return shape, values[first].dtype if first is not None else None

        dtype_expr = self._dtype
        if dtype_expr is None:
            return plan

        def with_dtype(values: Sequence[Any]) -> tuple[Any, Any]:
            shape, _ = plan(values)
            return shape, dtype_expr.fn(*_pick(dtype_expr, values, pos))

        return with_dtype


def _pick(expr: Expression, values: Sequence[Any], pos: Mapping[str, int]) -> list[Any]:
    return [values[pos[n]] for n in expr.names]


def _reduced(shape: tuple[int, ...], dim: Any, keepdim: bool) -> tuple[int, ...]:
    ndim = len(shape)
    dims = range(ndim) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    gone = set()
    for d in dims:
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise IndexError(
                f"dim {d} is out of range for a tensor of {ndim} dimension(s) "
                f"(expected {-max(ndim, 1)} to {max(ndim, 1) - 1})"
            )
        gone.add(d % ndim if ndim else 0)
    if keepdim:
        return tuple(1 if i in gone else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in gone)


def parse_rules(spec: Any, schema: OpSchema, where: Where) -> list[OutputRule]:
    """The rules of an operator: one per Tensor return (none for ``-> ()``)."""
    n = len(schema.returns)
    if spec is None:
        if n:
            raise OplibError(
                where,
                f"the operator returns {n} tensor(s) and has no 'fake' rule; add one, e.g. "
                "fake: {same_as: x}",
            )
        return []
    rules = list(spec) if isinstance(spec, list) else [spec]
    if len(rules) != n:
        raise OplibError(
            where, f"'fake' gives {len(rules)} rule(s), but the schema returns {n} tensor(s)"
        )
    lines = getattr(spec, "lines", None) if isinstance(spec, list) else None
    return [
        OutputRule(r, schema, where.at(lines[i] if lines else None), i) for i, r in enumerate(rules)
    ]
