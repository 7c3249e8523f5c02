"""``nn.Parameter`` and ``nn.Buffer``: tensors a module owns.

A parameter is a plain ``tensorplay.Tensor`` (same type: every fast path of core applies to
it) marked as one: ``Parameter(data)`` returns an alias of ``data``'s memory that requires
grad and carries the mark, and ``isinstance(t, nn.Parameter)`` reads the mark (as torch's
``nn.Buffer`` answers ``isinstance`` through its metaclass). Module attribute assignment
registers marked tensors as parameters.
"""

from __future__ import annotations

from tensorplay import Tensor, empty
from tensorplay._extension import alias_of

__all__ = ["Parameter", "Buffer", "is_parameter"]

_MARK = "_is_param"


def is_parameter(t) -> bool:
    return type(t) is Tensor and t.__dict__.get(_MARK, False)


class _ParameterMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return is_parameter(obj)


class Parameter(metaclass=_ParameterMeta):
    """``Parameter(data=None, requires_grad=True)``: a tensor a module trains.

    The result shares ``data``'s memory, has no autograd history (like ``data.detach()``)
    and requires grad unless ``requires_grad=False``. It is a ``tensorplay.Tensor``;
    ``isinstance(p, nn.Parameter)`` is True for it.
    """

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True) -> Tensor:  # type: ignore[misc]
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(
                f"Parameter(data=): expected a tensorplay Tensor, got {type(data).__name__}; "
                "wrap the values with tp.tensor(...) first"
            )
        if requires_grad and not (data.dtype.is_floating_point or data.dtype.is_complex):
            raise RuntimeError(
                f"Parameter(data=): only floating point and complex tensors can require "
                f"gradients, got {data.dtype}; pass requires_grad=False or convert with .float()"
            )
        t = alias_of(data)
        t.requires_grad = bool(requires_grad)
        t.__dict__[_MARK] = True
        return t


class _BufferMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return type(obj) is Tensor and "_buffer_persistent" in obj.__dict__


class Buffer(metaclass=_BufferMeta):
    """``Buffer(data, persistent=True)``: a tensor a module keeps but does not train
    (running statistics); assigning one to a module attribute registers it as a buffer,
    in the state dict unless ``persistent=False``."""

    def __new__(cls, data: Tensor, *, persistent: bool = True) -> Tensor:  # type: ignore[misc]
        if not isinstance(data, Tensor):
            raise TypeError(
                f"Buffer(data=): expected a tensorplay Tensor, got {type(data).__name__}"
            )
        t = alias_of(data)
        t.__dict__["_buffer_persistent"] = bool(persistent)
        return t
