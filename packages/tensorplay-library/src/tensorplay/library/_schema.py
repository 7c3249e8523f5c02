"""``infer_schema``: a PyTorch-style schema string from a Python signature.

``def f(x: Tensor, n: int, out: Tensor) -> Tensor`` with ``mutates_args=("out",)``
gives ``"f(Tensor, SymInt, Tensor(a!)) -> Tensor"``. TensorPlay keeps schemas for
introspection and opcheck only; no schema grammar is enforced.
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from collections.abc import Callable, Sequence
from typing import Any

from tensorplay.library._names import check_mutates_args

__all__ = ["infer_schema"]

_SCALARS = {int: "SymInt", float: "float", bool: "bool", str: "str"}
_SCALAR_NAMES = {"int": "SymInt", "float": "float", "bool": "bool", "str": "str"}
_SEQUENCES = (list, tuple, collections.abc.Sequence)


def infer_schema(
    prototype_function: Callable[..., Any],
    /,
    *,
    mutates_args: Sequence[str],
    op_name: str | None = None,
    tags: Any = (),
) -> str:
    """The schema of ``prototype_function`` (types only, no parameter names).

    Unannotated and ``Tensor`` parameters are ``Tensor``; ``int`` is ``SymInt``;
    ``float``/``bool``/``str`` stay; ``Optional[X]`` is ``X?``; lists/sequences are
    ``X[]``; mutated parameters get ``(a!)``, ``(b!)``, ... in order; ``*args`` and
    ``**kwargs`` are skipped. ``op_name`` (default: the function's ``__name__``) heads it::

        >>> def weighted(x, n: int, out):
        ...     ...
        >>> infer_schema(weighted, mutates_args=("out",), op_name="mylib::weighted")
        'mylib::weighted(Tensor, SymInt, Tensor(a!)) -> Tensor'
    """
    name = op_name if op_name is not None else getattr(prototype_function, "__name__", "op")
    mutated = check_mutates_args(name, mutates_args)
    sig = inspect.signature(prototype_function)
    hints = _hints(prototype_function)
    known = set(sig.parameters)
    for m in mutated:
        if m not in known:
            raise ValueError(
                f"infer_schema({name}): mutates_args names {m!r}, which is not a parameter "
                f"(parameters: {sorted(known)})"
            )
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    types = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        text = _type_text(hints.get(p.name, p.annotation), f"parameter {p.name!r} of {name}")
        if p.name in mutated:
            optional = text.endswith("?")
            base = text[:-1] if optional else text
            text = f"{base}({next(letters)}!)" + ("?" if optional else "")
        types.append(text)
    returns = _return_text(hints.get("return", sig.return_annotation), name)
    return f"{name}({', '.join(types)}) -> {returns}"


def _hints(fn: Callable[..., Any]) -> dict:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable string annotations: read them raw below
        return {}


def _type_text(ann: Any, where: str) -> str:
    if ann is inspect.Parameter.empty or ann is None:
        return "Tensor"
    if isinstance(ann, str):
        return _string_type(ann, where)
    if ann in _SCALARS:
        return _SCALARS[ann]
    if getattr(ann, "__name__", None) == "Tensor":
        return "Tensor"
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Union or type(ann).__name__ == "UnionType":
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return _type_text(rest[0], where) + "?"
    if origin in _SEQUENCES and args:
        return _type_text(args[0], where) + "[]"
    if ann in _SEQUENCES:
        return "Tensor[]"
    if getattr(ann, "__name__", None) == "dtype":
        return "ScalarType"
    raise ValueError(
        f"infer_schema: unsupported annotation {ann!r} for {where}; use Tensor, int, float, "
        "bool, str, Optional[...] or list[...]"
    )


def _string_type(ann: str, where: str) -> str:
    text = ann.replace(" ", "")
    if text.startswith("Optional[") and text.endswith("]"):
        return _string_type(text[9:-1], where) + "?"
    if text.endswith("|None"):
        return _string_type(text[:-5], where) + "?"
    for prefix in ("list[", "List[", "Sequence[", "tuple[", "Tuple["):
        if text.startswith(prefix) and text.endswith("]"):
            return _string_type(text[len(prefix) : -1].split(",")[0], where) + "[]"
    last = text.rsplit(".", 1)[-1]
    if last == "Tensor":
        return "Tensor"
    if last in _SCALAR_NAMES:
        return _SCALAR_NAMES[last]
    raise ValueError(
        f"infer_schema: unsupported annotation {ann!r} for {where}; use Tensor, int, float, "
        "bool, str, Optional[...] or list[...]"
    )


def _return_text(ann: Any, name: str) -> str:
    if ann is None or ann is type(None) or ann == "None":
        return "()"
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is tuple and args:
        return "(" + ", ".join(_type_text(a, f"the return of {name}") for a in args) + ")"
    return _type_text(ann, f"the return of {name}")
