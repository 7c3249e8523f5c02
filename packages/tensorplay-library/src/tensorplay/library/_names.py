"""Validation of what users type: operator names, mutates_args, device keys (schemas:
``_schema``).

Every error names the bad value and says what would be accepted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tensorplay._extension import NO_TENSOR

__all__ = [
    "AGNOSTIC",
    "DEVICE_TYPES",
    "parse_qualname",
    "parse_opname",
    "check_mutates_args",
    "schema_qualname",
    "device_keys",
    "dispatch_key",
]

# The device-agnostic kernel slot (PyTorch's CompositeExplicitAutograd / "default"): the
# dispatcher's slot for calls without a tensor argument.
AGNOSTIC = NO_TENSOR
DEVICE_TYPES = ("cpu", "cuda")
_COMPOSITE = frozenset(
    {
        "default",
        "composite",
        "compositeexplicitautograd",
        "compositeimplicitautograd",
        "compositeexplicitautogradnonfunctional",
    }
)


def parse_qualname(name: Any, what: str = "operator name") -> tuple[str, str]:
    """``"ns::op"`` -> ``("ns", "op")``; exactly one ``::`` between two identifiers."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str like 'mylib::my_op', got {type(name).__name__}")
    parts = name.split("::")
    if len(parts) != 2 or not all(p.isidentifier() for p in parts):
        raise ValueError(
            f"{what} {name!r} must be 'namespace::name' with exactly one '::' and both parts "
            "Python identifiers, e.g. 'mylib::my_op'"
        )
    return parts[0], parts[1]


def parse_opname(name: Any, *, defining: bool = False) -> tuple[str, str, str]:
    """``"ns::op"`` -> ``("ns", "op", "")``; ``"ns::op.overload"`` -> ``("ns", "op",
    "overload")``. Looking an op up, ``"ns::op.default"`` names the default overload
    (``"ns::op"``); defining one, ``default`` is reserved (as in PyTorch)."""
    if not isinstance(name, str):
        raise TypeError(
            f"operator name must be a str like 'mylib::my_op', got {type(name).__name__}"
        )
    namespace, sep, rest = name.partition("::")
    opname, dot, overload = rest.partition(".")
    if not (sep and namespace.isidentifier() and opname.isidentifier()) or "::" in rest:
        raise ValueError(
            f"operator name {name!r} must be 'namespace::name' or 'namespace::name.overload' "
            "with exactly one '::' and Python identifiers, e.g. 'mylib::my_op' or "
            "'mylib::my_op.Tensor'"
        )
    if dot and not overload.isidentifier():
        raise ValueError(
            f"operator name {name!r}: the overload name after '.' must be a Python identifier, "
            f"e.g. '{namespace}::{opname}.Tensor'"
        )
    if overload == "default":
        if defining:
            raise ValueError(
                f"operator name {name!r}: 'default' is reserved for the overload without a "
                f"name; define it as '{namespace}::{opname}' (then reachable as "
                f"tp.ops.{namespace}.{opname}.default)"
            )
        overload = ""
    return namespace, opname, overload


def check_mutates_args(name: str, mutates_args: Any) -> tuple[str, ...]:
    """The argument names an op mutates, as a tuple (a bare str is a common slip)."""
    if isinstance(mutates_args, str):
        raise TypeError(
            f"{name}: mutates_args must be an iterable of argument names, got the str "
            f"{mutates_args!r}; write mutates_args=({mutates_args!r},)"
        )
    if not isinstance(mutates_args, Iterable):
        raise TypeError(
            f"{name}: mutates_args must be an iterable of argument names (e.g. () or ('out',)), "
            f"got {type(mutates_args).__name__}"
        )
    names = tuple(mutates_args)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(
                f"{name}: mutates_args entries must be argument names (str), got "
                f"{type(n).__name__} {n!r}"
            )
    return names


def schema_qualname(schema: str) -> tuple[str, str]:
    """``"ns::op(Tensor x) -> Tensor"`` -> ``("ns::op", "(Tensor x) -> Tensor")``."""
    head, paren, rest = schema.strip().partition("(")
    return head.strip(), (paren + rest) if paren else ""


def _one_device(name: str, device: Any) -> str:
    if not isinstance(device, str):
        raise TypeError(
            f"{name}: device types must be str like 'cpu' or 'cuda', got {type(device).__name__}"
        )
    d = device.lower()
    if d in _COMPOSITE:
        return AGNOSTIC
    if d in DEVICE_TYPES:
        return d
    if d == "meta":
        raise ValueError(
            f"{name}: 'meta' is not a kernel device type; register a fake (meta) kernel with "
            f"{name}.register_fake(fn)"
        )
    raise ValueError(
        f"{name}: unknown device type {device!r}; expected one of {list(DEVICE_TYPES)} or "
        "'CompositeExplicitAutograd'/'default' for the device-agnostic slot"
    )


def device_keys(name: str, device_types: Any) -> tuple[str, ...]:
    """Kernel slots for ``device_types``: None, an empty iterable or a composite spelling
    give the agnostic slot; device names are case-insensitive."""
    if device_types is None:
        return (AGNOSTIC,)
    if isinstance(device_types, str):
        return (_one_device(name, device_types),)
    if not isinstance(device_types, Iterable):
        raise TypeError(
            f"{name}: device_types must be None, a str or an iterable of str, "
            f"got {type(device_types).__name__}"
        )
    keys = tuple(dict.fromkeys(_one_device(name, d) for d in device_types))
    return keys or (AGNOSTIC,)


def dispatch_key(name: str, key: Any) -> str:
    """``get_kernel``'s key: ``"cpu"``/``"cuda"`` or a composite spelling (agnostic)."""
    return _one_device(name, key)
