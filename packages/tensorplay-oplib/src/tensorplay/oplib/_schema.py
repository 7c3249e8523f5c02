"""Operator schemas as an op library writes them, and what each type is for a kernel.

``(Tensor x, Tensor b, *, float alpha=1.0) -> Tensor`` is PyTorch's schema grammar, the
subset whose types have a kernel argument (``KERNEL_TYPES``). The library parses it here to
check the definition against the kernels before anything is compiled; when the library is
loaded, ``tensorplay.library.custom_op`` parses it again and holds the operator to it.
"""

from __future__ import annotations

import ast
import re
from typing import Any

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
_TOKEN = re.compile(r"\s*(->|::|[A-Za-z_][A-Za-z0-9_]*|-?[0-9][0-9.eE+-]*|\"[^\"]*\"|'[^']*'|.)")


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
    takes it (``"(...) -> ..."``), ``args`` and ``returns``."""

    __slots__ = ("name", "text", "args", "returns")

    def __init__(self, name: str, text: str, args: tuple[Arg, ...], returns: tuple[Arg, ...]):
        self.name, self.text, self.args, self.returns = name, text, args, returns

    @property
    def mutated(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.is_write and a.name is not None)


def kernel_type(text: str) -> str:
    base = re.match(r"[A-Za-z]+", text)
    head = base.group() if base else text
    rest = re.sub(r"\[\d+\]", "[]", text[len(head) :])
    return _ALIASES.get(head, head) + rest


def parse(text: Any, namespace: str, where: Where) -> OpSchema:
    """Parse ``[namespace::]op(args) -> returns``.

    Raises ``OplibError`` naming the position for anything malformed, another namespace, a
    type without a kernel argument, an unnamed argument or a default that is not a literal.
    """
    if not isinstance(text, str):
        raise OplibError(
            where, f"schema must be a string like 'my_op(Tensor x) -> Tensor', got {text!r}"
        )
    return _Parser(text, namespace, where).schema()


class _Parser:
    def __init__(self, text: str, namespace: str, where: Where):
        self.text, self.namespace, self.where = text, namespace, where
        self.tokens = [(m.group(1), m.start(1)) for m in _TOKEN.finditer(text) if m.group(1)]
        self.i = 0

    # ---- tokens ----
    def peek(self) -> str:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else ""

    def take(self) -> str:
        tok = self.peek()
        self.i += 1
        return tok

    def accept(self, tok: str) -> bool:
        if self.peek() == tok:
            self.i += 1
            return True
        return False

    def fail(self, expected: str) -> Any:
        pos = self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)
        found = repr(self.peek()) if self.peek() else "the end"
        raise OplibError(
            self.where,
            f"malformed schema {self.text!r}: expected {expected} at position {pos}, found "
            f"{found}\n    {self.text}\n    {' ' * pos}^",
        )

    def expect(self, tok: str, what: str) -> None:
        if not self.accept(tok):
            self.fail(what)

    def ident(self, what: str) -> str:
        tok = self.peek()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok or "-"):
            self.fail(what)
        return self.take()

    # ---- grammar ----
    def schema(self) -> OpSchema:
        name = self.ident("the operator's name, e.g. 'my_op(Tensor x) -> Tensor'")
        if self.accept("::"):
            if name != self.namespace:
                raise OplibError(
                    self.where,
                    f"the schema {self.text!r} is in namespace {name!r}, but this library "
                    f"defines namespace {self.namespace!r}; write '{self.namespace}::...' or "
                    "leave the namespace out",
                )
            name = self.ident("the operator name after '::'")
        if self.peek() == ".":
            self.fail("'(' (op libraries define no overloads: give the operator its own name)")
        start = self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)
        self.expect("(", "'(' opening the arguments")
        args: list[Arg] = []
        kwarg_only = False
        if not self.accept(")"):
            while True:
                if not kwarg_only and self.accept("*"):
                    kwarg_only = True
                else:
                    args.append(self.argument(kwarg_only, named=True))
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.expect("->", "'->' and the return type")
        returns: list[Arg] = []
        if self.accept("("):
            if not self.accept(")"):
                while True:
                    returns.append(self.argument(False, named=False))
                    if self.accept(")"):
                        break
                    self.expect(",", "',' or ')'")
        else:
            returns.append(self.argument(False, named=False))
        if self.peek():
            self.fail("the end of the schema")
        self._check(args, returns)
        return OpSchema(name, self.text[start:].strip(), tuple(args), tuple(returns))

    def argument(self, kwarg_only: bool, named: bool) -> Arg:
        base = self.ident("a type such as 'Tensor' or 'float'")
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
                size = self.take() if self.peek().isdigit() else ""
                self.expect("]", "']' closing the list type")
                suffix += f"[{size}]"
            else:
                break
        name, default, has_default = None, None, False
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.peek() or "-"):
            name = self.take()
            if named and self.accept("="):
                default, has_default = self.default(name), True
        return Arg(base + suffix, name, alias, is_write, default, has_default, kwarg_only)

    def default(self, name: str) -> Any:
        start = self.i
        depth = 0
        while self.peek() and not (depth == 0 and self.peek() in (",", ")")):
            depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(self.peek(), 0)
            self.i += 1
        if self.i == start:
            self.fail(f"a default value for {name!r}")
        begin = self.tokens[start][1]
        end = self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)
        text = self.text[begin:end].strip()
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise OplibError(
                self.where,
                f"schema {self.text!r}: the default of {name!r} is {text!r}, which is not a "
                'literal (a number, True/False, None, a "string" or a list of numbers)',
            ) from None

    def _check(self, args: list[Arg], returns: list[Arg]) -> None:
        seen: set[str] = set()
        for i, a in enumerate(args):
            if a.name is None:
                raise OplibError(
                    self.where,
                    f"schema {self.text!r}: argument {i} ({a.type}) has no name; kernels, fake "
                    "rules and derivatives refer to arguments by name",
                )
            if a.name in seen:
                raise OplibError(self.where, f"schema {self.text!r}: argument {a.name!r} twice")
            seen.add(a.name)
            if a.kernel_type not in KERNEL_TYPES:
                raise OplibError(
                    self.where,
                    f"argument {a.name!r} has type {a.type}, which has no kernel argument; "
                    f"op library kernels take {', '.join(KERNEL_TYPES)}",
                )
            if a.alias is not None and not (a.is_write and a.type == "Tensor"):
                raise OplibError(
                    self.where,
                    f"argument {a.name!r} is annotated {a.type}({a.alias}): only 'Tensor(a!)' "
                    "(the kernel writes the tensor in place) is supported",
                )
        for i, r in enumerate(returns):
            if r.type != "Tensor" or r.name is not None:
                raise OplibError(
                    self.where,
                    f"return {i} is {r.type}{' ' + r.name if r.name else ''}: an op library "
                    "operator returns new tensors ('-> Tensor', '-> (Tensor, Tensor)') or "
                    "nothing ('-> ()')",
                )
            if r.alias is not None:
                raise OplibError(
                    self.where,
                    f"return {i} is annotated Tensor({r.alias}{'!' if r.is_write else ''}), an "
                    "alias of an input; operators return new tensors (a custom op's outputs "
                    "may not alias its inputs). For an in-place operator mark the argument "
                    "'Tensor(a!)' and return '()'",
                )
