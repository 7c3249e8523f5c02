"""Schemas: ``infer_schema`` writes one from a Python signature, ``parse_schema`` reads one.

``def f(x: Tensor, n: int, out: Tensor) -> Tensor`` with ``mutates_args=("out",)``
gives ``"f(Tensor, SymInt, Tensor(a!)) -> Tensor"``. A schema given by the user is
parsed (PyTorch's grammar, the subset custom operators use) and checked against the
function and ``mutates_args``; the text is kept verbatim for introspection, and the
parsed ``Schema`` is what ``tp.ops.ns.op.default._schema`` returns (``str()`` writes it
back in PyTorch's spelling).

``parse_schema``, ``Schema`` and ``Argument`` are also tensorplay-oplib's (internal, like
``tensorplay._extension`` for core): an op library's schemas are read by this grammar, with
its own restrictions on top, so a schema means the same to both. Change them together.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import json
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any

from tensorplay.library._names import check_mutates_args

__all__ = [
    "infer_schema",
    "signature_schema",
    "Argument",
    "Schema",
    "parse_schema",
    "check_schema",
    "check_signature",
    "mutated_names",
]

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
    arguments = _arguments(prototype_function, mutates_args, name, named=False)
    returns = _returns(prototype_function, name)
    return str(Schema(name, arguments, returns))


def signature_schema(fn: Callable[..., Any], mutates_args: Sequence[str], name: str) -> Schema:
    """The schema of an operator defined from ``fn`` without one, as PyTorch's
    ``custom_op`` infers it: names, keyword-only arguments and defaults included
    (``(Tensor x, float factor=2.0) -> Tensor``). ``ValueError`` for an annotation or a
    default that has no schema spelling."""
    return Schema(None, _arguments(fn, mutates_args, name, named=True), _returns(fn, name))


def _arguments(
    fn: Callable[..., Any], mutates_args: Sequence[str], name: str, *, named: bool
) -> tuple[Argument, ...]:
    """One ``Argument`` per parameter of ``fn`` (``*args``/``**kwargs`` skipped); with
    ``named``, parameter names, defaults and keyword-only-ness too."""
    mutated = check_mutates_args(name, mutates_args)
    sig = inspect.signature(fn)
    hints = _hints(fn)
    known = set(sig.parameters)
    for m in mutated:
        if m not in known:
            raise ValueError(
                f"infer_schema({name}): mutates_args names {m!r}, which is not a parameter "
                f"(parameters: {sorted(known)})"
            )
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    arguments = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        where = f"parameter {p.name!r} of {name}"
        text = _type_text(hints.get(p.name, p.annotation), where)
        alias = next(letters) if p.name in mutated else None
        if not named:
            arguments.append(Argument(text, alias=alias, is_write=alias is not None))
            continue
        default = None if p.default is p.empty else _default_text(p.default, where)
        arguments.append(
            Argument(text, p.name, alias, alias is not None, default, p.kind is p.KEYWORD_ONLY)
        )
    return tuple(arguments)


def _returns(fn: Callable[..., Any], name: str) -> tuple[Argument, ...]:
    ann = _hints(fn).get("return", inspect.signature(fn).return_annotation)
    if ann is None or ann is type(None) or ann == "None":
        return ()
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is tuple and args:
        return tuple(Argument(_type_text(a, f"the return of {name}")) for a in args)
    return (Argument(_type_text(ann, f"the return of {name}")),)


def _default_text(value: Any, where: str) -> str:
    """A Python default as a schema writes it (``None``, ``True``, ``2.0``, ``"mean"``,
    ``[1, 2]``)."""
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a schema quotes strings with '"', as PyTorch writes them
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    raise ValueError(
        f"the default {value!r} of {where} has no schema spelling (None, bool, int, float, "
        "str or a list of numbers); pass the operator's schema explicitly with schema=..."
    )


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


# ---- parsing ------------------------------------------------------------------------------------

# The types a schema may name: PyTorch's, as custom operators use them.
_SCHEMA_TYPES = frozenset(
    {
        "Tensor",
        "int",
        "SymInt",
        "float",
        "bool",
        "str",
        "complex",
        "Scalar",
        "ScalarType",
        "Layout",
        "Device",
        "MemoryFormat",
        "Generator",
        "Dimname",
        "Storage",
        "Stream",
        "Any",
    }
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"\d+")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


@dataclasses.dataclass(frozen=True)
class Argument:
    """One argument or return of a schema, e.g. ``Tensor(a!) out`` or ``float eps=1e-05``.

    ``str()`` writes it back as a schema does (``Tensor(a!)? out``)."""

    type: str  # with its suffixes, without the alias annotation: "Tensor?", "int[2]"
    name: str | None = None  # None where the schema gives none (infer_schema's style)
    alias: str | None = None  # the alias set: "a" in "Tensor(a)" and "Tensor(a!)"
    is_write: bool = False  # "Tensor(a!)": the operator writes to it
    default: str | None = None  # the default's text, verbatim
    kwarg_only: bool = False  # after "*"

    def __str__(self) -> str:
        base = _IDENT.match(self.type)
        end = base.end() if base else len(self.type)
        text = self.type[:end]
        if self.alias is not None:  # the annotation sits between the type and its suffixes
            text += f"({self.alias}{'!' if self.is_write else ''})"
        text += self.type[end:]
        if self.name is not None:
            text += f" {self.name}"
            if self.default is not None:
                text += f"={self.default}"
        return text


@dataclasses.dataclass(frozen=True)
class Schema:
    """A parsed schema: ``[name[.overload_name]](arguments) -> returns``.

    ``str()`` writes it back in canonical spacing: ``str(parse_schema(s)) == s`` for a
    schema written as PyTorch prints one (defaults keep their text verbatim, where
    PyTorch would rewrite ``1.0`` as ``1.``)."""

    name: str | None  # the head ("ns::op" or "op"), None when it starts with "("
    arguments: tuple[Argument, ...]
    returns: tuple[Argument, ...]
    overload_name: str = ""  # "Tensor" in "ns::op.Tensor(...)"; "" for the default overload

    def signature(self) -> Schema:
        """The schema without its head, to compare two definitions of one operator."""
        return dataclasses.replace(self, name=None, overload_name="")

    def head(self) -> str | None:
        """``"ns::op.overload"`` (``"ns::op"`` for the default overload; None: no head)."""
        if self.name is None:
            return None
        return f"{self.name}.{self.overload_name}" if self.overload_name else self.name

    def __str__(self) -> str:
        args = []
        for i, arg in enumerate(self.arguments):
            if arg.kwarg_only and (i == 0 or not self.arguments[i - 1].kwarg_only):
                args.append("*")
            args.append(str(arg))
        if len(self.returns) == 1:
            returns = str(self.returns[0])
        else:
            returns = "(" + ", ".join(map(str, self.returns)) + ")"
        return f"{self.head() or ''}({', '.join(args)}) -> {returns}"


def parse_schema(schema: str, *, where: str = "schema") -> Schema:
    """Parse ``"[ns::op](Tensor x, *, float a=1.0) -> Tensor"`` (PyTorch's grammar).

    Raises ``ValueError`` naming ``where``, the position and what was expected there;
    ``parse_schema("y(Tensor x -> Tensor")`` says "expected ',' or ')' at position 11,
    found '->'" and marks the position under the text.
    """
    parsed = _parsed.get(schema)
    if parsed is None:
        parsed = _Parser(schema, where).schema()
        if len(_parsed) < _PARSED_KEPT:
            _parsed[schema] = parsed
    return parsed


# Schema text -> its parse. A schema is parsed where an operator is defined and again where
# its definition is checked, and many operators share one signature; a Schema is immutable,
# so they can share the object. Bounded: the texts come from user code.
_parsed: dict[str, Schema] = {}
_PARSED_KEPT = 4096


class _Parser:
    """Recursive descent over the characters of one schema; ``pos`` is the cursor."""

    def __init__(self, text: str, where: str):
        self.text, self.where, self.pos = text, where, 0

    def schema(self) -> Schema:
        name, overload = None, ""
        if not self.peek("("):
            name = self.ident("an operator name or '('")
            if self.accept("::"):
                name += "::" + self.ident("the operator name after '::'")
            if self.accept("."):
                overload = self.ident("an overload name after '.'")
        self.expect("(", "'(' opening the arguments")
        arguments = self.arguments()
        self.expect("->", "'->' and the return type")
        returns = self.returns()
        self.skip()
        if self.pos != len(self.text):
            self.fail("the end of the schema")
        return Schema(name, arguments, returns, overload)

    def arguments(self) -> tuple[Argument, ...]:
        args: list[Argument] = []
        kwarg_only = False
        if self.accept(")"):
            return ()
        while True:
            if not kwarg_only and self.accept("*"):
                kwarg_only = True  # the arguments after "*" are keyword-only
            else:
                args.append(self.argument(kwarg_only, with_default=True))
            if self.accept(")"):
                return tuple(args)
            self.expect(",", "',' or ')'")

    def returns(self) -> tuple[Argument, ...]:
        if not self.accept("("):
            return (self.argument(False, with_default=False),)
        if self.accept(")"):
            return ()
        rets = []
        while True:
            rets.append(self.argument(False, with_default=False))
            if self.accept(")"):
                return tuple(rets)
            self.expect(",", "',' or ')'")

    def argument(self, kwarg_only: bool, with_default: bool) -> Argument:
        self.skip()
        start = self.pos
        base = self.ident("a type such as 'Tensor'")
        if base not in _SCHEMA_TYPES:
            self.pos = start
            self.fail(f"a type ({', '.join(sorted(_SCHEMA_TYPES))})")
        alias, is_write = None, False
        if self.accept("("):
            alias = self.ident("an alias set such as 'a' in 'Tensor(a!)'")
            is_write = self.accept("!")
            self.expect(")", "')' closing the alias annotation")
        suffix = ""
        while True:
            if self.accept("?"):
                suffix += "?"
            elif self.accept("["):
                self.skip()
                digits = _DIGITS.match(self.text, self.pos)
                size = digits.group() if digits else ""
                self.pos += len(size)
                self.expect("]", "']' closing the list type")
                suffix += f"[{size}]"
            else:
                break
        name = default = None
        self.skip()
        if _IDENT.match(self.text, self.pos):
            name = self.ident("an argument name")
            if with_default and self.accept("="):
                default = self.default()
        return Argument(base + suffix, name, alias, is_write, default, kwarg_only)

    def default(self) -> str:
        """The default's text: up to the next ',' or ')' outside brackets and quotes."""
        self.skip()
        start, depth, quote = self.pos, [], None
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if quote:
                quote = None if c == quote else quote
            elif c in "'\"":
                quote = c
            elif c in _CLOSERS:
                depth.append(_CLOSERS[c])
            elif depth and c == depth[-1]:
                depth.pop()
            elif not depth and c in ",)":
                break
            self.pos += 1
        text = self.text[start : self.pos].strip()
        if not text or quote or depth:
            self.pos = start
            self.fail("a default value")
        return text

    # ---- tokens ----
    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.skip()
        return self.text.startswith(token, self.pos)

    def accept(self, token: str) -> bool:
        if self.peek(token):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str, what: str) -> None:
        if not self.accept(token):
            self.fail(what)

    def ident(self, what: str) -> str:
        self.skip()
        m = _IDENT.match(self.text, self.pos)
        if m is None:
            self.fail(what)
        self.pos = m.end()
        return m.group()

    def fail(self, expected: str) -> typing.NoReturn:
        self.skip()
        rest = self.text[self.pos :]
        m = _IDENT.match(rest)
        found = (
            "the end of the schema"
            if not rest
            else repr(m.group() if m else rest[:2] if rest[:2] in ("->", "::") else rest[0])
        )
        raise ValueError(
            f"{self.where}: malformed schema {self.text!r}: expected {expected} at position "
            f"{self.pos}, found {found}\n    {self.text}\n    {' ' * self.pos}^"
        )


# ---- checks -------------------------------------------------------------------------------------


def check_schema(name: str, schema: Any) -> Schema | None:
    """Parse the ``schema`` given for operator ``name``; a head, if any, must be ``name``."""
    if schema is None:
        return None
    if not isinstance(schema, str):
        raise ValueError(
            f"{name}: schema must be None or a str like '(Tensor x) -> Tensor', "
            f"got {type(schema).__name__}"
        )
    parsed = parse_schema(schema, where=name)
    if parsed.name is not None and parsed.head() != name:
        raise ValueError(
            f"{name}: schema {schema!r} names the operator {parsed.head()!r}; start the schema "
            f"with '(' or with {name!r}, e.g. '{name}(Tensor x) -> Tensor'"
        )
    return parsed


def mutated_names(name: str, parsed: Schema) -> tuple[str, ...]:
    """The arguments ``parsed`` marks as written (``Tensor(a!) out``), by name."""
    mutated = []
    for i, arg in enumerate(parsed.arguments):
        if arg.is_write:
            if arg.name is None:
                raise ValueError(
                    f"{name}: the schema marks argument {i} as mutated but gives it no "
                    f"name; name it (e.g. '{arg.type}({arg.alias}!) out') so kernels and "
                    "mutates_args can refer to it"
                )
            mutated.append(arg.name)
    return tuple(mutated)


def check_signature(
    name: str,
    schema: str,
    parsed: Schema,
    fn: Callable[..., Any],
    params: Sequence[inspect.Parameter],
    mutates_args: Sequence[str],
) -> None:
    """The schema describes ``fn``: as many arguments as it has parameters, the same names
    where the schema names them, and ``Tensor(a!)`` exactly on ``mutates_args``."""
    fn_name = getattr(fn, "__name__", repr(fn))
    plain = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if len(plain) == len(params) and len(plain) != len(parsed.arguments):
        raise ValueError(
            f"{name}: schema {schema!r} has {len(parsed.arguments)} argument(s), but "
            f"{fn_name} has {len(plain)} parameter(s) ({', '.join(p.name for p in plain)}); "
            "write one schema argument per parameter"
        )
    for i, (arg, p) in enumerate(zip(parsed.arguments, plain)):
        if arg.name is not None and arg.name != p.name:
            raise ValueError(
                f"{name}: schema {schema!r} calls argument {i} {arg.name!r}, but parameter {i} "
                f"of {fn_name} is {p.name!r}; use the parameter's name in the schema"
            )
    marked = {
        arg.name or (plain[i].name if i < len(plain) else f"argument {i}")
        for i, arg in enumerate(parsed.arguments)
        if arg.is_write
    }
    if marked != set(mutates_args):
        raise ValueError(
            f"{name}: schema {schema!r} marks {sorted(marked)} as mutated (Tensor(a!)), but "
            f"mutates_args={tuple(mutates_args)!r}; make them agree, e.g. "
            f"mutates_args={tuple(sorted(marked))!r}"
        )
