"""Operator schemas as an op library writes them, and what each type is for a kernel.

``(Tensor x, Tensor b, *, float alpha=1.0) -> Tensor`` is PyTorch's schema grammar, parsed by
``tensorplay.library``'s parser (``tensorplay.library._schema.parse_schema``, the one
``custom_op`` uses: the text an op library registers is read by one grammar). An op library
allows the subset that fits its kernels, checked here before anything is compiled: types
with a kernel argument (``KERNEL_TYPES``), named arguments, literal defaults (evaluated:
they become the operator's Python defaults), no overloads, and new tensors as results.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from tensorplay.library._schema import Argument, parse_schema
from tensorplay.oplib._errors import OplibError, Where

__all__ = ["Arg", "OpSchema", "parse", "KERNEL_TYPES", "kernel_type", "OUTPUT_TYPES"]

_TENSORS = ("DLTensor*", "ffi.Tensor")
# schema type -> the tvm-ffi type schemas (``get_function_metadata``) a kernel parameter of
# that type may have, and the C++ spelling the docs and errors suggest
KERNEL_TYPES: dict[str, tuple[tuple[str, ...], str]] = {
    "Tensor": (_TENSORS, "tvm::ffi::TensorView"),
    "Tensor?": (
        tuple(f"Optional[{t}]" for t in _TENSORS),
        "tvm::ffi::Optional<tvm::ffi::TensorView>",
    ),
    "float": (("float",), "double"),
    "float?": (("Optional[float]",), "tvm::ffi::Optional<double>"),
    "int": (("int",), "int64_t"),
    "int?": (("Optional[int]",), "tvm::ffi::Optional<int64_t>"),
    "bool": (("bool",), "bool"),
    "str": (("std::string", "ffi.String"), "std::string"),
    "int[]": (("ffi.Array[int]", "ffi.Shape"), "tvm::ffi::Array<int64_t>"),
    "float[]": (("ffi.Array[float]",), "tvm::ffi::Array<double>"),
}
OUTPUT_TYPES = _TENSORS
_ALIASES = {"SymInt": "int"}  # schema spellings with the same kernel argument


class Arg:
    """One argument (or return) of a schema."""

    __slots__ = ("type", "name", "alias", "is_write", "default", "has_default", "kwarg_only")

    def __init__(
        self,
        type: str,  # as written, without the alias annotation: "Tensor", "int[]", "float?"
        name: str | None,
        alias: str | None = None,  # "a" in Tensor(a) / Tensor(a!)
        is_write: bool = False,
        default: Any = None,
        has_default: bool = False,
        kwarg_only: bool = False,
    ):
        self.type, self.name, self.alias, self.is_write = type, name, alias, is_write
        self.default, self.has_default, self.kwarg_only = default, has_default, kwarg_only

    @property
    def kernel_type(self) -> str:
        """The type's key in ``KERNEL_TYPES`` (``SymInt`` reads as ``int``, ``int[2]`` as
        ``int[]``)."""
        return kernel_type(self.type)

    @property
    def is_tensor(self) -> bool:
        return self.type.startswith("Tensor")


class OpSchema:
    """A parsed schema: the operator's ``name``, the signature ``text`` as ``custom_op``
    takes it (``"(...) -> ..."``), ``args`` and ``returns``; ``signature``: the operator's
    Python signature, once ``_kernels.signature`` made it."""

    __slots__ = ("name", "text", "args", "returns", "signature")

    def __init__(self, name: str, text: str, args: tuple[Arg, ...], returns: tuple[Arg, ...]):
        self.name, self.text, self.args, self.returns = name, text, args, returns
        self.signature: Any = None

    @property
    def mutated(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.is_write and a.name is not None)


def kernel_type(text: str) -> str:
    base = re.match(r"[A-Za-z]+", text)
    head = base.group() if base else text
    rest = re.sub(r"\[\d+\]", "[]", text[len(head) :])
    return _ALIASES.get(head, head) + rest


def parse(text: Any, namespace: str, where: Where, *, check: bool = True) -> OpSchema:
    """Parse ``[namespace::]op(args) -> returns``.

    Raises ``OplibError`` naming the position for anything malformed, another namespace, an
    overload, a type without a kernel argument, an unnamed argument or a default that is not
    a literal. ``check=False`` skips the op-library restrictions, for a definition the
    builder checked already (a built library's ``oplib.json``).
    """
    if not isinstance(text, str):
        raise OplibError(
            where, f"schema must be a string like 'my_op(Tensor x) -> Tensor', got {text!r}"
        )
    head, paren, rest = text.partition("(")
    signature = (paren + rest).strip()  # the text custom_op is given (and parses: once)
    try:
        parsed = parse_schema(signature, where="schema")
    except ValueError as exc:
        raise OplibError(where, str(exc)) from None
    name = head.strip()
    if check:
        name = _check_head(name, text, namespace, where)
        _check(parsed.arguments, parsed.returns, text, where)
    args = tuple(_arg(a, text, where) for a in parsed.arguments)
    returns = tuple(Arg(r.type, r.name, r.alias, r.is_write) for r in parsed.returns)
    return OpSchema(name.rpartition("::")[2], signature, args, returns)


def _check_head(name: str, text: str, namespace: str, where: Where) -> str:
    ns, sep, op = name.rpartition("::")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", op):
        raise OplibError(
            where,
            f"malformed schema {text!r}: it starts with {name!r}; write the operator's name "
            "first, e.g. 'my_op(Tensor x) -> Tensor'",
        )
    if sep and ns != namespace:
        raise OplibError(
            where,
            f"the schema {text!r} is in namespace {ns!r}, but this library defines namespace "
            f"{namespace!r}; write '{namespace}::...' or leave the namespace out",
        )
    if "." in op:
        raise OplibError(
            where,
            f"the schema {text!r} names the overload {op.partition('.')[2]!r}: op libraries "
            "define no overloads: give the operator its own name",
        )
    return op


def _arg(a: Argument, text: str, where: Where) -> Arg:
    if a.default is None:
        return Arg(a.type, a.name, a.alias, a.is_write, kwarg_only=a.kwarg_only)
    try:
        default = ast.literal_eval(a.default)
    except (ValueError, SyntaxError):
        raise OplibError(
            where,
            f"schema {text!r}: the default of {a.name!r} is {a.default!r}, which is not a "
            'literal (a number, True/False, None, a "string" or a list of numbers)',
        ) from None
    return Arg(a.type, a.name, a.alias, a.is_write, default, True, a.kwarg_only)


def _check(
    args: tuple[Argument, ...], returns: tuple[Argument, ...], text: str, where: Where
) -> None:
    seen: set[str] = set()
    for i, a in enumerate(args):
        if a.name is None:
            raise OplibError(
                where,
                f"schema {text!r}: argument {i} ({a.type}) has no name; kernels, fake "
                "rules and derivatives refer to arguments by name",
            )
        if a.name in seen:
            raise OplibError(where, f"schema {text!r}: argument {a.name!r} twice")
        seen.add(a.name)
        if kernel_type(a.type) not in KERNEL_TYPES:
            raise OplibError(
                where,
                f"argument {a.name!r} has type {a.type}, which has no kernel argument; "
                f"op library kernels take {', '.join(KERNEL_TYPES)}",
            )
        if a.alias is not None and not (a.is_write and a.type == "Tensor"):
            raise OplibError(
                where,
                f"argument {a.name!r} is annotated {a.type}({a.alias}): only 'Tensor(a!)' "
                "(the kernel writes the tensor in place) is supported",
            )
    for i, r in enumerate(returns):
        if r.type != "Tensor" or r.name is not None:
            raise OplibError(
                where,
                f"return {i} is {r.type}{' ' + r.name if r.name else ''}: an op library "
                "operator returns new tensors ('-> Tensor', '-> (Tensor, Tensor)') or "
                "nothing ('-> ()')",
            )
        if r.alias is not None:
            raise OplibError(
                where,
                f"return {i} is annotated Tensor({r.alias}{'!' if r.is_write else ''}), an "
                "alias of an input; operators return new tensors (a custom op's outputs "
                "may not alias its inputs). For an in-place operator mark the argument "
                "'Tensor(a!)' and return '()'",
            )
