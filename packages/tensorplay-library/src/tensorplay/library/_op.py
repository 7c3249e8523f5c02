"""``CustomOpDef``: one user-defined operator, its kernels and formulas.

A ``CustomOpDef`` is an entry of core's dispatcher (a ``TensorOp``, from
``tensorplay._extension``): calling it runs the same layers as a built-in op (overrides
and graph capture, profiler, autocast, autograd, dispatch modes, version counters), and
the same fast path when none is active. This module adds what a user registers: kernels
per device type, the fake kernel (the ``meta`` slot), the autograd formula (the entry's
vjp), an autocast policy, and per-thread ``set_kernel_enabled`` blocks. An overload
(``"ns::foo.Tensor"``) is an op of its own; ``_overloads`` names and selects them.

Registration never locks the call path: every change builds a new ``_table`` under the
op's lock and publishes it with one attribute store. While a ``set_kernel_enabled`` block
is live anywhere, the published table is empty, so every call reaches ``kernel_missing``,
which resolves the kernel for the calling thread.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tensorplay import dtype as _DType
from tensorplay._extension import TensorOp
from tensorplay.library._names import AGNOSTIC, DEVICE_TYPES, device_keys
from tensorplay.library._overloads import OpOverload
from tensorplay.library._schema import Schema, check_schema, check_signature, signature_schema

__all__ = ["CustomOpDef"]

_NOTHING: frozenset[str] = frozenset()
# Published while a set_kernel_enabled block is live in some thread: every lookup misses,
# so every call reaches kernel_missing, which honours the calling thread's blocks.
_PER_THREAD: dict[str, Callable[..., Any]] = {}
# What each registration slot is stored in (a destroyed Library puts back what it replaced);
# "kernel" and "autocast" are dicts keyed by device slot.
_SLOT_ATTRS = {
    "kernel": "_kernels",
    "autocast": "_autocast",
    "fake": "_fake",
    "autograd": "_vjp",
    "vmap": "_vmap",
}


class CustomOpDef(TensorOp):
    """A registered operator ``namespace::name``: call it like its body.

    Made by ``custom_op`` / ``triton_op`` / ``tile_lang_op`` (or ``define``); the
    ``register_*`` methods work as decorators and as direct calls.
    """

    _kind = "custom_op"
    is_triton_op = False
    is_tile_lang_op = False

    def __init__(
        self,
        namespace: str,
        opname: str,
        fn: Callable[..., Any] | None,
        mutates_args: tuple[str, ...],
        device_types: Any,
        schema: str | None,
        *,
        overload: str = "",
    ):
        super().__init__(f"{namespace}::{opname}" + (f".{overload}" if overload else ""))
        self._namespace, self._opname, self._overload = namespace, opname, overload
        self.__name__ = self.__qualname__ = self._name
        self._mutates = mutates_args
        self._schema = schema
        self._parsed = check_schema(self._name, schema)
        self._lock = threading.RLock()
        self._kernels: dict[str, Callable[..., Any]] = {}
        self._local = threading.local()  # .disabled: this thread's set_kernel_enabled blocks
        self._live_blocks = 0  # set_kernel_enabled blocks live in any thread
        self._full: dict[str, Callable[..., Any]] = {}  # the table outside any block
        self._fake: Callable[..., Any] | None = None
        self._vmap: Callable[..., Any] | None = None
        self._signature_fn: Callable[..., Any] | None = None  # the kernel params came from
        self._bound = False  # whether the first call generated the binding (see __call__)
        self._retired = False  # withdrawn by a destroyed Library
        self._opoverload = OpOverload(self)
        if fn is not None:
            self._set_signature(fn)
            self.__doc__ = fn.__doc__
            self.__wrapped__ = fn
            for key in device_keys(self._name, device_types):
                self._kernels[key] = fn
        self._rebuild()

    # ---- introspection ------------------------------------------------------------------
    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def opname(self) -> str:
        return self._opname

    @property
    def mutates_args(self) -> tuple[str, ...]:
        return self._mutates

    @property
    def schema(self) -> str | None:
        return self._schema

    @property
    def overload_name(self) -> str:
        """``"Tensor"`` for ``"ns::foo.Tensor"``; ``""`` for the default overload."""
        return self._overload

    @property
    def _qualified_op_name(self) -> str:
        """``"ns::foo"``: the name of the packet (without the overload), as in PyTorch."""
        return f"{self._namespace}::{self._opname}"

    @property
    def default(self) -> OpOverload:
        """``tp.ops.ns.op.default``: the op as an ``OpOverload`` (with ``_schema``)."""
        if self._overload:
            raise AttributeError(
                f"{self._name} is the overload {self._overload!r} of "
                f"tp.ops.{self._namespace}.{self._opname}; it has no 'default' overload of "
                f"its own (use tp.ops.{self._namespace}.{self._opname}.default)"
            )
        return self._opoverload

    def overloads(self) -> list[str]:
        """The overload names this object answers to: ``["default"]`` (an op with named
        overloads is reached through its ``OpOverloadPacket``)."""
        return [self._overload or "default"]

    def _function_schema(self) -> Schema:
        """The parsed schema with the qualified name: the one given at definition, else
        the one inferred from the body's signature. ``RuntimeError`` if neither exists;
        ``ValueError`` if the signature has no schema spelling."""
        parsed = self._parsed
        if parsed is None:
            fn = self._signature_fn
            if fn is None:
                raise RuntimeError(
                    f"{self._name} was defined without a schema and has no kernel yet, so "
                    f"its signature is unknown; define it with one, e.g. "
                    f"define('{self._name}(Tensor x) -> Tensor')"
                )
            parsed = signature_schema(fn, self._mutates, self._name)
        return dataclasses.replace(
            parsed, name=self._qualified_op_name, overload_name=self._overload
        )

    def __repr__(self) -> str:
        return f"<{self._kind} {self._name}>"

    def _set_signature(self, fn: Callable[..., Any]) -> None:
        try:
            params = tuple(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # builtins without a signature
            return
        names = {p.name for p in params}
        has_var = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
        for m in self._mutates:
            if m not in names and not has_var:
                raise ValueError(
                    f"{self._name}: mutates_args names {m!r}, which is not a parameter of "
                    f"{getattr(fn, '__name__', fn)!r} (parameters: {sorted(names)})"
                )
        if self._parsed is not None:
            check_signature(self._name, self._schema, self._parsed, fn, params, self._mutates)
        self._signature_fn = fn
        self._params = params  # the binding over them is generated by the first call

    # ---- the call -----------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Only an op's first call comes here: it generates the op's binding
        # (TensorOp.bind_signature), whose __call__ then replaces this one for the op.
        # Generating means compiling, so it waits for a call: a library that defines many
        # operators pays for the ones it uses. Signatures that get no generated binding
        # (*args, **kwargs) keep coming here and take the reference call.
        if not self._bound:
            self._bind()
            call = type(self).__call__
            if call is not CustomOpDef.__call__:
                return call(self, *args, **kwargs)
        return TensorOp.__call__(self, *args, **kwargs)

    def _bind(self) -> None:
        with self._lock:
            if self._bound or self._params is None:  # bound by another thread / no kernel yet
                return
            self.bind_signature(self._params)
            self._bound = True

    # ---- registration -------------------------------------------------------------------
    def register_kernel(
        self, device_types: Any = None, fn: Callable[..., Any] | None = None, /
    ) -> Any:
        """Register ``fn`` for ``device_types`` (None: the device-agnostic slot).

        Re-registering replaces the kernel (hot swap). Decorator or direct call::

            @op.register_kernel("cpu")
            def _(x): ...
        """
        keys = device_keys(self._name, device_types)

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            _check_callable(self._name, "register_kernel", func)
            with self._lock:
                if self._params is None:
                    self._set_signature(func)
                for key in keys:
                    self._kernels[key] = func
                self._rebuild()
            return func

        return register if fn is None else register(fn)

    def register_fake(
        self, fn: Callable[..., Any] | None = None, /, *, allow_override: bool = True
    ) -> Any:
        """Register the fake (meta) kernel: data-free outputs of the right shape/dtype/device.

        It runs for meta-device inputs and during shape propagation; it must not read data.
        """

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            _check_callable(self._name, "register_fake", func)
            with self._lock:
                if self._fake is not None and not allow_override:
                    raise RuntimeError(
                        f"{self._name} already has a fake kernel; pass allow_override=True to "
                        "replace it"
                    )
                self._fake = func
                self._rebuild()
            return func

        return register if fn is None else register(fn)

    def register_autograd(
        self,
        backward: Callable[..., Any],
        /,
        *,
        setup_context: Callable[..., Any] | None = None,
    ) -> Callable[..., Any]:
        """Attach the derivative: ``backward(ctx, *grads)`` returns one gradient per input.

        ``setup_context(ctx, inputs, output)`` runs after the forward and may
        ``ctx.save_for_backward(...)``; without it the context is empty.
        """
        _check_callable(self._name, "register_autograd", backward)
        if setup_context is not None:
            _check_callable(self._name, "register_autograd(setup_context=)", setup_context)
        with self._lock:
            self._vjp = (backward, setup_context)
        return backward

    def register_vmap(self, fn: Callable[..., Any] | None = None, /) -> Any:
        """Store the op's batching rule (used once a ``tp.vmap`` transform exists)."""

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            _check_callable(self._name, "register_vmap", func)
            self._vmap = func
            return func

        return register if fn is None else register(fn)

    def register_autocast(self, device_type: str, cast_inputs: _DType, /) -> None:
        """Under ``tp.autocast(device_type)``, floating tensor arguments on that device type
        are cast to ``cast_inputs`` before a kernel runs (which then runs without autocast)."""
        if not isinstance(cast_inputs, _DType) or not cast_inputs.is_floating_point:
            raise TypeError(
                f"{self._name}.register_autocast: cast_inputs must be a floating dtype such as "
                f"tp.float16 or tp.bfloat16, got {cast_inputs!r}"
            )
        (key,) = device_keys(self._name, device_type)
        if key == AGNOSTIC:
            raise ValueError(
                f"{self._name}.register_autocast: device_type must be one of "
                f"{list(DEVICE_TYPES)}, got {device_type!r}"
            )
        with self._lock:
            self._autocast = {**self._autocast, key: cast_inputs}

    @contextmanager
    def set_kernel_enabled(self, device_type: str, enabled: bool = True) -> Iterator[None]:
        """Disable (or re-enable) the concrete kernel of ``device_type`` inside the block;
        a disabled kernel falls back to the device-agnostic one.

        The block affects only the calling thread (like ``tp.no_grad``): other threads keep
        running the kernel, and on exit the thread's previous state comes back whatever
        other threads did meanwhile. Toggling into the state already in force warns::

            with op.set_kernel_enabled("cpu", False):
                op(x)  # the device-agnostic kernel, in this thread only
        """
        (key,) = device_keys(self._name, device_type)
        enabled = bool(enabled)
        local = self._local
        saved = self._disabled_here()
        if (key not in saved) == enabled:
            state = "enabled" if enabled else "disabled"
            warnings.warn(
                f"{self._name}: the {key!r} kernel is already {state}; "
                f"set_kernel_enabled({device_type!r}, {enabled}) changes nothing",
                UserWarning,
                stacklevel=3,
            )
        local.disabled = saved - {key} if enabled else saved | {key}
        self._count_block(+1)
        try:
            yield
        finally:
            local.disabled = saved
            self._count_block(-1)

    def _count_block(self, delta: int) -> None:
        with self._lock:
            self._live_blocks += delta
            self._table = self._full if not self._live_blocks else _PER_THREAD

    def _disabled_here(self) -> frozenset[str]:
        """The kernel slots this thread's set_kernel_enabled blocks switched off."""
        return getattr(self._local, "disabled", _NOTHING)

    def _rebuild(self) -> None:
        """Publish the dispatch table: device type -> the kernel a call on it runs."""
        self._full = self._build_table(_NOTHING)
        self._table = self._full if not self._live_blocks else _PER_THREAD

    def _build_table(self, disabled: frozenset[str]) -> dict[str, Callable[..., Any]]:
        """Device type -> kernel with the slots in ``disabled`` switched off; ``AGNOSTIC``
        -> the kernel of calls without a tensor argument."""
        kernels = self._kernels
        fallback = kernels.get(AGNOSTIC)
        chosen = {dev: kernels.get(dev) if dev not in disabled else None for dev in DEVICE_TYPES}
        chosen = {dev: k or fallback for dev, k in chosen.items()}
        chosen["meta"] = self._fake or fallback
        chosen[AGNOSTIC] = fallback if AGNOSTIC not in disabled else None
        return {key: k for key, k in chosen.items() if k is not None}

    def _kernel(self, key: str) -> Callable[..., Any] | None:
        """The kernel registered in slot ``key`` (None if missing or disabled here)."""
        if key in self._disabled_here():
            return None
        return self._kernels.get(key)

    # ---- withdrawing registrations (Library._destroy) -------------------------------------
    def _registration(self, slot: str, key: str | None = None) -> Any:
        """What a registration slot holds: ``"kernel"`` / ``"autocast"`` (for device slot
        ``key``), ``"fake"``, ``"autograd"`` or ``"vmap"``."""
        value = getattr(self, _SLOT_ATTRS[slot])
        return value.get(key) if isinstance(value, dict) else value

    def _restore(self, slot: str, key: str | None, expected: Any, previous: Any) -> None:
        """Put ``previous`` back in a slot that still holds ``expected`` (a registration
        made since is kept: it is not the withdrawn one)."""
        with self._lock:
            if self._registration(slot, key) is not expected:
                return
            attr = _SLOT_ATTRS[slot]
            value = getattr(self, attr)
            if isinstance(value, dict):  # replaced whole, as register_autocast does
                value = {k: v for k, v in value.items() if k != key}
                if previous is not None:
                    value[key] = previous
            else:
                value = previous
            setattr(self, attr, value)
            self._rebuild()

    def _retire(self) -> None:
        """Withdraw the op (the Library that defined it was destroyed): kernels and
        formulas are dropped and every later call says so."""
        with self._lock:
            self._retired = True
            self._kernels = {}
            self._fake = self._vjp = self._vmap = None
            self._autocast = {}
            self._rebuild()

    # ---- the dispatcher's slow lookup ----------------------------------------------------
    def kernel_missing(self, key: str) -> Callable[..., Any]:
        """The kernel for ``key`` (a device type, ``meta`` or ``AGNOSTIC`` for a call without
        tensors) when the published table has none: this thread's view of the kernels, or
        the error naming the registration that is missing."""
        if self._retired:
            raise RuntimeError(
                f"{self._name} was deregistered: the Library that defined it was destroyed "
                f"(its _scoped_library block ended). Define it again to call it; "
                f"tp.ops.{self._namespace}.{self._opname} then finds the new definition"
            )
        disabled = self._disabled_here()
        kernel = (self._build_table(disabled) if disabled else self._full).get(key)
        if kernel is not None:
            return kernel
        if key == AGNOSTIC:
            raise NotImplementedError(
                f"{self._name} was called without tensor arguments and has no "
                f"device-agnostic kernel; registered: {self._registered()}. Pass a tensor "
                f"or register one via {self._name}.register_kernel(None)"
            )
        if key == "meta":
            raise NotImplementedError(
                f"{self._name} has no fake kernel for device 'meta' (needed for meta "
                f"tensors and shape propagation); registered: {self._registered()}. "
                f"Register one via {self._name}.register_fake(fn)"
            )
        raise NotImplementedError(
            f"{self._name} has no kernel for device {key!r}; registered: "
            f"{self._registered()}. Register one via "
            f"{self._name}.register_kernel({key!r})"
        )

    def _registered(self) -> list[str]:
        disabled = self._disabled_here()
        return sorted(k for k in self._kernels if k not in disabled)


def _check_callable(name: str, what: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"{name}.{what}: expected a callable, got {type(fn).__name__} {fn!r}")
