"""The calling convention between a generated operator and its compiled kernels.

A kernel is called with **every argument of the schema, in schema order** (keyword-only
ones too, positionally), **then one output tensor per return**, allocated by the operator
from its shape rule on the device of the first tensor argument; it writes the outputs and
returns nothing (``void``)::

    // fused_bias_gelu(Tensor x, Tensor b, *, float alpha=1.0) -> Tensor
    void fused_bias_gelu_cpu(tvm::ffi::TensorView x, tvm::ffi::TensorView b, double alpha,
                             tvm::ffi::TensorView out);

Schema types map to kernel parameters as ``_schema.KERNEL_TYPES`` lists (Tensor ->
``TensorView``, float -> ``double``, int -> ``int64_t``, bool, str -> ``std::string``,
``int[]`` -> ``Array<int64_t>``, ``T?`` -> ``Optional<T>``). The kernel may rely on:

* every tensor it gets is contiguous (inputs that are not are copied first; an argument it
  writes, ``Tensor(a!)``, must be contiguous already, else the call is refused), and the
  outputs are fresh and contiguous;
* CUDA kernels run on TensorPlay's current stream (``TVMFFIEnvGetStream``).

It must check the dtypes it supports (``TVM_FFI_THROW(TypeError)``): opcheck's gradcheck
calls it with float64 tensors. Whatever it throws becomes a Python exception naming it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.oplib._rules import OutputRule
from tensorplay.oplib._schema import OpSchema

__all__ = ["signature", "Binder", "make_kernel", "make_fake", "missing_kernel"]


def signature(schema: OpSchema) -> inspect.Signature:
    """The operator's Python signature (names, defaults, keyword-only), from its schema;
    made once per schema (each device's kernel and the fake kernel carry it)."""
    if schema.signature is None:
        params = []
        for a in schema.args:
            kind = (
                inspect.Parameter.KEYWORD_ONLY
                if a.kwarg_only
                else inspect.Parameter.POSITIONAL_OR_KEYWORD
            )
            default = a.default if a.has_default else inspect.Parameter.empty
            params.append(inspect.Parameter(a.name, kind, default=default))
        schema.signature = inspect.Signature(params)
    return schema.signature


class Binder:
    """A call's ``(args, kwargs)`` -> the argument values in schema order.

    The generated binding of the operator already passes positional parameters
    positionally and keyword-only ones by keyword, defaults filled in: that is the fast
    case. Anything else (a direct call of the fake kernel, a mode replaying a call) is bound
    by ``inspect``.
    """

    def __init__(self, schema: OpSchema):
        self.sig = signature(schema)
        self.n = len(schema.args)
        self.kwnames = tuple(a.name for a in schema.args if a.kwarg_only)
        self.npos = self.n - len(self.kwnames)

    def __call__(self, args: tuple, kwargs: dict) -> tuple:
        if not kwargs:
            if len(args) == self.n:
                return args
        elif len(args) == self.npos and len(kwargs) == len(self.kwnames):
            try:
                return (*args, *map(kwargs.__getitem__, self.kwnames))
            except KeyError:
                pass
        bound = self.sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())


def _first_device(values: Sequence[Any], tensor_positions: Sequence[int]) -> Any:
    for i in tensor_positions:
        t = values[i]
        if t is not None:
            return t.device
    return None


def _outputs(rules: Sequence[OutputRule], values: Sequence[Any], device: Any) -> list[Tensor]:
    return [tp.empty(s, dtype=d, device=device) for s, d in (r.plan(values) for r in rules)]


def _result(outs: list[Tensor]) -> Any:
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


def make_kernel(
    qualname: str,
    schema: OpSchema,
    rules: Sequence[OutputRule],
    function: Callable[[], Callable[..., Any]],
    call_on_stream: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """The operator's kernel for one device: bind, make inputs contiguous, allocate the
    outputs, call the compiled function (``function()`` returns it, loading it on first
    use) with ``(*arguments, *outputs)``. ``call_on_stream(fn, args)`` runs CUDA kernels
    on TensorPlay's current stream."""
    bind = Binder(schema)
    n = bind.n
    tensors = [i for i, a in enumerate(schema.args) if a.is_tensor]
    written = {i for i, a in enumerate(schema.args) if a.is_write}
    names = [a.name for a in schema.args]
    plans = [rule.plan for rule in rules]
    single = plans[0] if len(plans) == 1 else None
    # the device outputs go to: the first tensor argument's (a plain Tensor when there is one)
    lead = next((i for i, a in enumerate(schema.args) if a.type in ("Tensor",)), None)
    compiled: list[Callable[..., Any]] = []  # filled on the first call
    empty = tp.empty

    def contiguous(values: tuple) -> tuple:
        values = list(values)
        for i in tensors:
            t = values[i]
            if t is None or t.is_contiguous():
                continue
            if i in written:
                raise RuntimeError(
                    f"{qualname}: argument {names[i]!r} is written in place by the kernel and is "
                    f"not contiguous (strides {list(t.stride())}); kernels write contiguous "
                    f"memory. Pass a contiguous tensor (x = x.contiguous()) and use it after"
                )
            values[i] = t.contiguous()
        return tuple(values)

    def device_of(values: tuple) -> Any:
        return values[lead].device if lead is not None else _first_device(values, tensors)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        values = args if not kwargs and len(args) == n else bind(args, kwargs)
        for i in tensors:
            t = values[i]
            if t is not None and not t.is_contiguous():
                values = contiguous(values)
                break
        if not compiled:
            compiled.append(function())
        if single is not None:
            shape, dtype = single(values)
            out = empty(shape, dtype=dtype, device=device_of(values))
            if call_on_stream is None:
                compiled[0](*values, out)
            else:
                call_on_stream(compiled[0], (*values, out))
            return out
        device = device_of(values)
        outs = [
            empty(shape, dtype=dtype, device=device) for shape, dtype in (p(values) for p in plans)
        ]
        if call_on_stream is None:
            compiled[0](*values, *outs)
        else:
            call_on_stream(compiled[0], (*values, *outs))
        return _result(outs)

    kernel.__signature__ = bind.sig  # type: ignore[attr-defined]
    kernel.__name__ = kernel.__qualname__ = qualname.replace("::", "_")
    return kernel


def make_fake(qualname: str, schema: OpSchema, rules: Sequence[OutputRule]) -> Callable[..., Any]:
    """The fake kernel: outputs of the right shape, dtype and device, without data."""
    bind = Binder(schema)
    tensors = [i for i, a in enumerate(schema.args) if a.is_tensor]

    def fake(*args: Any, **kwargs: Any) -> Any:
        values = bind(args, kwargs)
        return _result(_outputs(rules, values, _first_device(values, tensors)))

    fake.__signature__ = bind.sig  # type: ignore[attr-defined]
    fake.__name__ = fake.__qualname__ = qualname.replace("::", "_") + "_fake"
    return fake


def missing_kernel(schema: OpSchema, message: str) -> Callable[..., Any]:
    """A kernel for a device the library has no compiled kernel for: raises ``message``."""

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(message)

    missing.__signature__ = signature(schema)  # type: ignore[attr-defined]
    return missing
