"""``TensorOp``: the dispatcher entry whose kernels take and return Tensors.

The dispatcher (``_dispatch``) runs two kinds of entries through one path, ``call``:

* op-table rows (``OpDef``): array kernels; the dispatcher does promotion, shapes and
  wrapping for them (``_dispatch.execute``);
* ``TensorOp`` entries: kernels written on Tensors, one per device type (a custom op's
  body, a Triton launch), a fake kernel for meta tensors, and optionally a vjp. The
  library's ``CustomOpDef`` is a ``TensorOp`` that adds the registration API.

For both kinds a call goes through the same layers, each written once::

    overrides and function modes (a capture proxy is an override: one graph node)
    -> profiler, autocast (``_dispatch.layers``)
    -> autograd (``TensorOp.execute``: inputs that require grad reach the kernel detached,
       the outputs get one node calling the vjp; ``autograd._tensor_op``)
    -> dispatch modes -> kernel -> ``finish`` (no output aliases an input; a version bump
       on each argument the op mutates)

The *fast path* skips the layers when none is active (``state.plain``), every argument is
a plain value and no input requires grad: it is one dict hit in ``_table`` (device type ->
kernel) and the kernel. ``bind_signature`` generates a ``__call__`` with the kernel's own
signature, so Python binds the arguments and nothing is packed twice (the generated
bindings of op-table rows do the same for theirs).

A subclass publishes ``_table`` (replaced whole, never mutated in place, so registering a
kernel never locks the call path), ``_vjp``, ``_mutates``, ``_autocast`` and ``_params``,
and may override ``kernel_missing`` (the slow lookup: per-thread switches, errors).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tensorplay import _dispatch
from tensorplay._dispatch import call, state
from tensorplay._native import any_requires_grad
from tensorplay._tensor import Tensor

__all__ = ["TensorOp", "NO_TENSOR"]

#: ``_table`` key of the kernel run by a call without any tensor argument.
NO_TENSOR = "default"


class TensorOp:
    """One operator with Tensor kernels, run by the dispatcher (see the module docstring)."""

    kind = "tensor_op"

    def __init__(self, name: str):
        self._name = name
        self._table: dict[str, Callable[..., Any]] = {}
        self._vjp: tuple | None = None  # (backward(ctx, *grads), setup_context or None)
        self._mutates: tuple[str, ...] = ()  # names of the parameters written in place
        self._autocast: dict = {}  # device type -> dtype floating inputs are cast to
        self._params: tuple[inspect.Parameter, ...] | None = None

    @property
    def name(self) -> str:
        return self._name

    # ---- the call -----------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # The reference binding; bind_signature replaces it with one generated for the
        # kernel's signature, which runs the same checks.
        if state.plain and args:
            a = args[0]
            if type(a) is Tensor and not _dispatch._unusual(args, kwargs):
                if _wants_grad(args, kwargs):
                    return _dispatch.autograd_tensor_op(self, args, kwargs)
                kernel = self._table.get(a.device.type)
                if kernel is not None:
                    return self.finish(args, kwargs, kernel(*args, **kwargs))
        return call(self, args, kwargs)

    def execute(self, args: tuple, kwargs: dict):
        """Below the layers (``_dispatch.execute`` hands a ``TensorOp`` call here)."""
        if _wants_grad(args, kwargs):  # in grad mode or not: the kernel sees detached inputs
            return _dispatch.autograd_tensor_op(self, args, kwargs)
        return self.below_autograd(args, kwargs)

    def below_autograd(self, args: tuple, kwargs: dict):
        """Dispatch modes, then the kernel (autograd, if any, records around this)."""
        if _dispatch.dispatch_modes.wanted((*args, *kwargs.values())):
            return _dispatch.dispatch_modes.run(self, args, kwargs, None, None)
        return self.finish(args, kwargs, self.pick_kernel(args, kwargs)(*args, **kwargs))

    def pick_kernel(self, args: tuple, kwargs: dict) -> Callable[..., Any]:
        """The kernel for the device of the first tensor argument (``NO_TENSOR``: none)."""
        dev = first_tensor_device(args, kwargs)
        key = NO_TENSOR if dev is None else dev.type
        kernel = self._table.get(key)
        return kernel if kernel is not None else self.kernel_missing(key)

    def kernel_missing(self, key: str) -> Callable[..., Any]:
        """The kernel for ``key`` when the published table has none: raise, or (subclasses)
        resolve it another way."""
        raise NotImplementedError(f"{self._name} has no kernel for {key!r}")

    def finish(self, args: tuple, kwargs: dict, out: Any) -> Any:
        """What every kernel call owes the rest of the system, checked after the kernel
        ran: outputs that alias no input (autograd and capture treat them as new tensors),
        and a version bump on each argument in ``_mutates`` (as core's in-place ops do, so
        a tensor saved for backward and then written through the op is caught)."""
        _check_no_alias(self, args, kwargs, out)
        for name in self._mutates:
            _bump_versions(self.argument(name, args, kwargs))
        return out

    # ---- what the layers ask about a call -----------------------------------------------
    def user_call(self, args: tuple, kwargs: dict) -> tuple:
        """``(public function, args, kwargs)`` as overrides and modes see the call."""
        return self, args, kwargs

    def inputs(self, args: tuple, kwargs: dict) -> tuple:
        """The call's arguments in the kernel's parameter order (defaults filled in): what
        ``setup_context`` receives as ``inputs`` and what ``backward`` returns grads for."""
        params = self._params
        if params is None:
            return args + tuple(kwargs.values())
        if not kwargs and len(args) == len(params):
            return args
        inputs = list(args)
        for p in params[len(args) :]:
            if p.kind is p.VAR_POSITIONAL or p.kind is p.VAR_KEYWORD:
                continue
            inputs.append(kwargs.get(p.name, p.default))
        return tuple(inputs)

    def input_names(self) -> list[str]:
        if self._params is None:
            return []
        return [p.name for p in self._params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def argument(self, name: str, args: tuple, kwargs: dict) -> Any:
        """The value passed for parameter ``name`` (None if not passed)."""
        if name in kwargs:
            return kwargs[name]
        names = self.input_names()
        index = names.index(name) if name in names else len(args)
        return args[index] if index < len(args) else None

    def named_tensors(self, args: tuple, kwargs: dict) -> list[tuple[str, Tensor]]:
        """(argument name, tensor) for every tensor argument; list elements as ``name[i]``."""
        names = self.input_names()
        pairs = [(names[i] if i < len(names) else f"args[{i}]", a) for i, a in enumerate(args)]
        pairs += list(kwargs.items())
        found = []
        for name, value in pairs:
            if isinstance(value, Tensor):
                found.append((name, value))
            elif isinstance(value, (list, tuple)):
                found += [(f"{name}[{j}]", v) for j, v in enumerate(value) if isinstance(v, Tensor)]
        return found

    # ---- the generated binding ----------------------------------------------------------
    def bind_signature(self, params: tuple[inspect.Parameter, ...]) -> None:
        """Record the kernel's signature and give this op a class of its own whose
        ``__call__`` has it (see ``_BINDING``). Signatures with ``*args``/``**kwargs``
        keep the reference ``__call__``."""
        self._params = params
        if not params or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            return
        if params[0].kind is params[0].KEYWORD_ONLY or any(
            p.name.startswith(_PREFIX) for p in params
        ):
            return
        base = type(self)
        attrs = {"__call__": _generate_binding(self, params), "__module__": base.__module__}
        self.__class__ = type(base.__name__, (base,), {**attrs, "__qualname__": base.__qualname__})


def _wants_grad(args: tuple, kwargs: dict) -> bool:
    """Some tensor argument (or element of a list argument) requires grad."""
    return any_requires_grad(args) or (bool(kwargs) and any_requires_grad(tuple(kwargs.values())))


def first_tensor_device(args: tuple, kwargs: dict):
    """The device of the first tensor argument: positional first, then keyword."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor):
            return a.device
        if type(a) is list or type(a) is tuple:
            for x in a:
                if isinstance(x, Tensor):
                    return x.device
    return None


def _check_no_alias(op: TensorOp, args: tuple, kwargs: dict, out: Any) -> None:
    """Raise if an output shares its storage with an input or with another output."""
    if out is None:
        return
    if type(out) is Tensor and not kwargs:  # the common call: one output, positional args
        storage = out._storage
        for a in args:
            if type(a) is Tensor:
                if a._storage is storage:
                    break
            elif type(a) is list or type(a) is tuple or isinstance(a, Tensor):
                break  # Tensor[] arguments and subclasses: the full check below
        else:
            return
    seen: dict[int, tuple[str, str]] = {}  # id(storage) -> (what holds it, the fix)
    for name, t in op.named_tensors(args, kwargs):
        if t._storage is not None:
            seen.setdefault(id(t._storage), (f"input {name!r}", f"`return {name}.clone()`"))
    outs = out if type(out) is tuple or type(out) is list else (out,)
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor) or o._storage is None:
            continue
        if id(o._storage) in seen:
            other, fix = seen[id(o._storage)]
            raise RuntimeError(
                f"{op.name}: output {i} aliases {other} (it is that tensor or a view of it); "
                "the outputs of a custom op may not alias its inputs or each other, since "
                "autograd and graph capture treat them as new tensors. Return a copy instead, "
                f"e.g. {fix}"
            )
        seen[id(o._storage)] = (f"output {i}", f"a `.clone()` of output {i}")


def _bump_versions(value: Any) -> None:
    """Record an in-place write on ``value`` (a tensor or a list of tensors)."""
    if isinstance(value, Tensor):
        value._bump_version()
    elif type(value) is list or type(value) is tuple:
        for t in value:
            if isinstance(t, Tensor):
                t._bump_version()


# ---- code generation ---------------------------------------------------------------------

_PREFIX = "__tp_"

# The generated ``__call__`` for, e.g., ``def scaled(x, factor=2.0)`` (mutating nothing):
#
#     def __call__(__tp_op, x, factor=__tp_d0):
#         if __tp_st.plain and type(x) is __tp_T and type(factor) in __tp_NP:
#             if not (x.requires_grad or type(factor) is __tp_T and factor.requires_grad):
#                 __tp_k = __tp_op._table.get(x.device.type)
#                 if __tp_k is not None:
#                     __tp_r = __tp_k(x, factor)
#                     if (type(__tp_r) is __tp_T and __tp_r._storage is not x._storage
#                             and (type(factor) is not __tp_T
#                                  or __tp_r._storage is not factor._storage)):
#                         return __tp_r
#                     return __tp_op.finish((x, factor), {}, __tp_r)
#             else:
#                 return __tp_grad(__tp_op, (x, factor), {})
#         return __tp_call(__tp_op, (x, factor), {})
#
# Only calls whose arguments are all plain values (the first a Tensor, the others tensors,
# numbers, strings, None, dtypes, devices, slices) take the fast path: such arguments can
# be neither capture proxies nor overrides. The common result, one tensor in new memory
# from an op that mutates nothing, is checked inline; anything else goes through
# ``finish``. Arguments reach kernels bound to the signature (positional parameters
# positionally, keyword-only ones by keyword).
_BINDING = """
def __call__(__tp_op, {sig}):
    if __tp_st.plain and type({first}) is __tp_T{plain_args}:
        if not ({wants_grad}):
            __tp_k = __tp_op._table.get({first}.device.type)
            if __tp_k is not None:
                __tp_r = __tp_k({forward})
                if {fresh}:
                    return __tp_r
                return __tp_op.finish({args}, {kwargs}, __tp_r)
        else:
            return __tp_grad(__tp_op, {args}, {kwargs})
    return __tp_call(__tp_op, {args}, {kwargs})
"""


def _generate_binding(op: TensorOp, params: tuple[inspect.Parameter, ...]) -> Callable:
    env: dict = {
        "__tp_st": state,
        "__tp_T": Tensor,
        "__tp_NP": _dispatch._SIMPLE,
        "__tp_grad": _dispatch.autograd_tensor_op,
        "__tp_call": call,
    }
    sig, positional, keyword = [], [], []
    star_added = False
    for i, p in enumerate(params):
        text = p.name
        if p.default is not p.empty:
            env[f"__tp_d{i}"] = p.default
            text += f"=__tp_d{i}"
        if p.kind is p.KEYWORD_ONLY:
            if not star_added:
                sig.append("*")
                star_added = True
            keyword.append(p.name)
        else:
            positional.append(p.name)
        sig.append(text)
    if any(p.kind is p.POSITIONAL_ONLY for p in params):
        last = max(i for i, p in enumerate(params) if p.kind is p.POSITIONAL_ONLY)
        sig.insert(last + 1, "/")
    first = positional[0]
    others = positional[1:] + keyword
    # a mutating op always goes through finish (its arguments' versions are bumped)
    fresh = (
        "False"
        if op._mutates
        else " and ".join(
            [f"type(__tp_r) is __tp_T and __tp_r._storage is not {first}._storage"]
            + [f"(type({n}) is not __tp_T or __tp_r._storage is not {n}._storage)" for n in others]
        )
    )
    src = _BINDING.format(
        sig=", ".join(sig),
        first=first,
        plain_args="".join(f" and type({n}) in __tp_NP" for n in others),
        wants_grad=" or ".join(
            [f"{first}.requires_grad"]
            + [f"type({n}) is __tp_T and {n}.requires_grad" for n in others]
        ),
        forward=", ".join(positional + [f"{n}={n}" for n in keyword]),
        fresh=fresh,
        args="(" + "".join(f"{n}, " for n in positional) + ")",
        kwargs="{" + ", ".join(f"{n!r}: {n}" for n in keyword) + "}",
    )
    exec(compile(src, f"<tensorplay op {op.name}>", "exec"), env)  # noqa: S102 - generated binding
    fn = env["__call__"]
    fn.__qualname__ = f"{op.name}.__call__"
    return fn
