"""Expressions written in an op library's YAML: derivative formulas and shape rules.

An expression is Python syntax, parsed with ``ast`` and held to a whitelist before it is
ever compiled: arithmetic, comparisons, ``a if c else b``, calls, subscripts, tuples and
lists, literals; names only from the context (``grad``, ``result``, the operator's
arguments, the library's other operators, ``tp``, a few builtins such as ``len``); attributes
only from ``tp`` (its operators, factories and dtypes) and from tensors (their methods and
``shape``/``dtype``/``ndim``). Nothing else (no underscores, no lambdas, no comprehensions,
no ``**kwargs``) gets through, so no string from a YAML file runs as anything but such an
expression.

A checked expression is compiled once into a function of the names it uses
(``Expression.fn``), with the YAML file and line as its code location, so a traceback
through a formula points at ``ops.yaml:23``.
"""

from __future__ import annotations

import ast
import builtins
import functools
from collections.abc import Iterable, Mapping
from typing import Any

import tensorplay as tp
from tensorplay._extension import OPS
from tensorplay.oplib._errors import OplibError, Where

__all__ = ["Expression", "BUILTINS", "tp_names"]

BUILTINS = frozenset(
    {
        "len",
        "min",
        "max",
        "abs",
        "int",
        "float",
        "bool",
        "tuple",
        "list",
        "range",
        "sum",
        "all",
        "any",
    }
)
# beyond the op table: factories, shape/dtype helpers and dtypes under tp.
_TP_EXTRA = (
    "empty",
    "empty_like",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "broadcast_shapes",
    "broadcast_to",
    "promote_types",
    "result_type",
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
# Tensor attributes beyond the op table's methods.
_TENSOR_EXTRA = frozenset(
    {
        "shape",
        "dtype",
        "ndim",
        "device",
        "size",
        "dim",
        "numel",
        "contiguous",
        "to",
        "float",
        "double",
        "half",
        "type_as",
        "expand_as",
        "is_floating_point",
        "is_complex",
        "itemsize",
        "T",
        "mT",
        "conj",
    }
)
_OPERATORS = (
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.MatMult,
    ast.USub,
    ast.UAdd,
    ast.Not,
    ast.And,
    ast.Or,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Is,
    ast.IsNot,
    ast.Load,
)
_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.keyword,
    ast.Attribute,
    ast.Name,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Subscript,
    ast.Slice,
    *_OPERATORS,
)


@functools.lru_cache(maxsize=1)
def tp_names() -> frozenset[str]:
    """What ``tp.<name>`` may name in an expression (public op-table ops, factories, dtypes)."""
    names = {n for n in OPS if not n.startswith("_")} | set(_TP_EXTRA)
    return frozenset(n for n in names if hasattr(tp, n))


@functools.lru_cache(maxsize=1)
def _tensor_names() -> frozenset[str]:
    return frozenset(n for n in OPS if not n.startswith("_")) | _TENSOR_EXTRA


class Expression:
    """One checked expression; ``fn(*values)`` evaluates it for the names in ``names``.

    Args:
        text: the expression as written.
        where: its place (``file:line: op``), for errors and tracebacks.
        what: what it is, for errors ("the derivative for 'x'").
        variables: the names given per evaluation (the op's arguments, ``grad``, ...).
        constants: names bound once (``tp``, the library's operators, builtins); their
            values are given to ``bind``.

    Raises ``OplibError`` naming the offending name, attribute or syntax.
    """

    def __init__(
        self,
        text: Any,
        where: Where,
        what: str,
        variables: Iterable[str],
        constants: Iterable[str],
    ):
        if not isinstance(text, (str, int, float)) or isinstance(text, bool):
            raise OplibError(where, f"{what} must be an expression (a string), got {text!r}")
        self.text, self.where, self.what = str(text).strip(), where, what
        variables, constants = list(variables), set(constants)
        try:
            tree = ast.parse(self.text, mode="eval")
        except SyntaxError as exc:
            raise OplibError(
                where, f"{what}: {exc.msg} in {self.text!r} (column {exc.offset})"
            ) from None
        allowed = set(variables) | constants | BUILTINS | {"tp"}
        used: set[str] = set()
        for node in ast.walk(tree):
            self._check(node, allowed, used)
        self.names = tuple(v for v in variables if v in used)  # the parameters of fn
        self.constants = frozenset(used - set(self.names))
        self._tree = tree
        self.fn: Any = None

    def _fail(self, message: str) -> None:
        raise OplibError(self.where, f"{self.what}: {message} in {self.text!r}")

    def _check(self, node: ast.AST, allowed: set[str], used: set[str]) -> None:
        if not isinstance(node, _NODES):
            self._fail(
                f"{type(node).__name__} is not allowed (an expression may use arithmetic, "
                "comparisons, 'a if c else b', calls, subscripts, tuples and literals)"
            )
        if isinstance(node, ast.Name):
            if node.id not in allowed:
                self._fail(
                    f"unknown name {node.id!r}; the names here are "
                    f"{sorted(allowed - BUILTINS - {'tp'})}, tp, and {sorted(BUILTINS)}"
                )
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                self._fail(f"attribute {node.attr!r} is private")
            on_tp = isinstance(node.value, ast.Name) and node.value.id == "tp"
            if on_tp and node.attr not in tp_names():
                self._fail(
                    f"tp.{node.attr} is not available in expressions (tp's operators, "
                    "factories such as tp.zeros_like, and dtypes such as tp.float32 are)"
                )
            if not on_tp and node.attr not in _tensor_names():
                self._fail(
                    f"attribute {node.attr!r} is not a Tensor method or property an expression "
                    "may use (its operators, shape, dtype, ndim, size(), ...)"
                )
        elif isinstance(node, ast.keyword) and node.arg is None:
            self._fail("'**' arguments are not allowed")
        elif isinstance(node, ast.Constant) and not isinstance(
            node.value, (int, float, complex, str, bool, type(None))
        ):
            self._fail(f"the constant {node.value!r} is not allowed")

    def bind(self, constants: Mapping[str, Any]) -> Expression:
        """Compile against ``constants`` (values of the constant names); sets ``fn``."""
        args = ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg=n) for n in self.names],
            kwonlyargs=[],
            kw_defaults=[],
            defaults=[],
        )
        body = ast.Lambda(args=args, body=self._tree.body)
        tree = ast.Expression(body=body)
        line = self.where.line or 1
        for node in ast.walk(tree):
            node.lineno = node.end_lineno = line  # type: ignore[attr-defined]
            node.col_offset = node.end_col_offset = 0  # type: ignore[attr-defined]
        code = compile(tree, self.where.file, "eval")
        env: dict[str, Any] = {"__builtins__": {}, "tp": tp}
        env.update({n: getattr(builtins, n) for n in BUILTINS})
        env.update({k: v for k, v in constants.items() if k in self.constants})
        self.fn = eval(code, env)  # noqa: S307 - a lambda over a whitelisted expression
        return self
