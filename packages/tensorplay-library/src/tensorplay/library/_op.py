"""``CustomOpDef``: one user-defined operator, its kernels and formulas, and its call path.

A call takes one of two paths:

* the **fast path** (``__call__``; ``_fastcall`` generates a copy of it with the
  body's own signature for each op): nothing needs to see the call (``state.plain``: no
  override/dispatch mode, profiler or autocast), the first argument is a ``Tensor`` and
  the others plain values (so none is a capture proxy or an override), and there is no
  autograd node to build. It costs a few attribute loads and one dict hit (``_table``:
  device type -> kernel), then the kernel runs;
* the **general path** (``_call_general``), the layers in the order they run:
  capture (one graph node, the body does not run) -> ``__tensorplay_function__``
  overrides and function modes -> autocast -> profiler span -> autograd (a node for the
  registered formula) -> dispatch modes -> kernel.

Registration never locks the call path: every change builds a new ``_table`` (and
``_formula``) under the op's lock and publishes it with one attribute store.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tensorplay import _capture, _dispatch, amp, overrides, profiler
from tensorplay._dtype import dtype as _DType
from tensorplay._tensor import Tensor
from tensorplay.autograd import grad_mode
from tensorplay.library import _autograd
from tensorplay.library._fastcall import specialise
from tensorplay.library._names import AGNOSTIC, DEVICE_TYPES, device_keys
from tensorplay.utils import _python_dispatch

__all__ = ["CustomOpDef"]

_state = _dispatch.state  # .plain: the fast-path gate
_tracers = _capture._stack  # .tracers: the live captures of this thread
_grad = grad_mode.state  # .enabled
_modes = _python_dispatch._stack  # .modes: the dispatch modes of this thread
# Argument types that never carry __tensorplay_function__ (the cheap override pre-check).
_PLAIN_TYPES = frozenset({Tensor, int, float, bool, complex, str, type(None), _DType})


class CustomOpDef:
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
    ):
        self._namespace, self._opname = namespace, opname
        self._name = f"{namespace}::{opname}"
        self.__name__ = self.__qualname__ = self._name
        self._mutates_args = mutates_args
        self._schema = schema
        self._lock = threading.RLock()
        self._kernels: dict[str, Callable[..., Any]] = {}
        self._disabled: frozenset[str] = frozenset()
        self._fake: Callable[..., Any] | None = None
        self._vmap: Callable[..., Any] | None = None
        self._autocast: dict[str, _DType] = {}
        self._params: tuple[inspect.Parameter, ...] | None = None
        # Published state read by the call path (replaced whole, never mutated in place).
        self._table: dict[str, Callable[..., Any]] = {}
        self._formula: tuple | None = None  # (backward, setup_context)
        self._handle = _ModeHandle(self)
        if fn is not None:
            self._set_signature(fn)
            self.__doc__ = fn.__doc__
            self.__wrapped__ = fn
            for key in device_keys(self._name, device_types):
                self._kernels[key] = fn
        self._rebuild()

    # ---- introspection ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def opname(self) -> str:
        return self._opname

    @property
    def mutates_args(self) -> tuple[str, ...]:
        return self._mutates_args

    @property
    def schema(self) -> str | None:
        return self._schema

    def __repr__(self) -> str:
        return f"<{self._kind} {self._name}>"

    def _set_signature(self, fn: Callable[..., Any]) -> None:
        try:
            params = tuple(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):  # builtins without a signature
            return
        names = {p.name for p in params}
        has_var = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
        for m in self._mutates_args:
            if m not in names and not has_var:
                raise ValueError(
                    f"{self._name}: mutates_args names {m!r}, which is not a parameter of "
                    f"{getattr(fn, '__name__', fn)!r} (parameters: {sorted(names)})"
                )
        self._params = params
        specialise(self, params)

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
            self._formula = (backward, setup_context)
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
        a disabled kernel falls back to the device-agnostic one."""
        (key,) = device_keys(self._name, device_type)
        with self._lock:
            was_enabled = key not in self._disabled
            if was_enabled == bool(enabled):
                state = "enabled" if enabled else "disabled"
                warnings.warn(
                    f"{self._name}: the {key!r} kernel is already {state}; "
                    f"set_kernel_enabled({device_type!r}, {bool(enabled)}) changes nothing",
                    UserWarning,
                    stacklevel=3,
                )
            self._set_enabled(key, bool(enabled))
        try:
            yield
        finally:
            with self._lock:
                self._set_enabled(key, was_enabled)

    def _set_enabled(self, key: str, enabled: bool) -> None:
        self._disabled = self._disabled - {key} if enabled else self._disabled | {key}
        self._rebuild()

    def _rebuild(self) -> None:
        """Publish the dispatch table: device type -> the kernel a call on it runs."""
        agnostic = self._kernels.get(AGNOSTIC)
        table: dict[str, Callable[..., Any]] = {}
        for dev in DEVICE_TYPES:
            k = self._kernel(dev) or agnostic
            if k is not None:
                table[dev] = k
        meta = self._fake or agnostic
        if meta is not None:
            table["meta"] = meta
        self._table = table

    def _kernel(self, key: str) -> Callable[..., Any] | None:
        """The kernel registered in slot ``key`` (None if missing or disabled)."""
        if key in self._disabled:
            return None
        return self._kernels.get(key)

    # ---- calling ----------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # The reference fast path; ops whose body has a plain signature run a copy of it
        # generated with that signature (``_fastcall.specialise``).
        if _state.plain and args:
            a = args[0]
            # plain arguments can be neither capture proxies nor overrides
            if type(a) is Tensor and not _unusual(args, kwargs):
                if self._formula is not None and _grad.enabled and _wants_grad(args, kwargs):
                    return _autograd.apply(self, args, kwargs)
                kernel = self._table.get(a.device.type)
                if kernel is not None:
                    return kernel(*args, **kwargs)
        return self._call_general(args, kwargs)

    def _call_general(self, args: tuple, kwargs: dict):
        if _tracers.tracers and _capture.contains_proxy(args, kwargs):
            # a live capture with symbolic arguments: one graph node, the body does not run
            return _capture.capture_call(self, args, kwargs)
        if not _state.plain or _unusual(args, kwargs):
            relevant = _flat(args, kwargs)
            if overrides.has_tensorplay_function(relevant):
                return overrides.handle_tensorplay_function(self, relevant, *args, **kwargs)
        if self._autocast and amp._local.any_enabled:
            dev = _first_tensor_device(args, kwargs)
            cast_to = self._autocast.get(dev.type) if dev is not None else None
            if cast_to is not None and amp.is_autocast_enabled(dev.type):
                args, kwargs = _cast_floating(args, kwargs, dev.type, cast_to)
                with amp.autocast(dev.type, enabled=False):
                    return self._profiled(args, kwargs)
        return self._profiled(args, kwargs)

    def _profiled(self, args: tuple, kwargs: dict):
        if profiler.is_profiling():
            with profiler.span(self._name, inputs=_flat(args, kwargs)):
                return self._autograd_or_kernel(args, kwargs)
        return self._autograd_or_kernel(args, kwargs)

    def _autograd_or_kernel(self, args: tuple, kwargs: dict):
        if self._formula is not None and _grad.enabled and _wants_grad(args, kwargs):
            return _autograd.apply(self, args, kwargs)
        return self._below_autograd(args, kwargs)

    def _below_autograd(self, args: tuple, kwargs: dict):
        """Dispatch modes, then the kernel (autograd, if any, records around this)."""
        if _modes.modes:
            return self._through_mode(args, kwargs)
        return self._pick_kernel(args, kwargs)(*args, **kwargs)

    def _through_mode(self, args: tuple, kwargs: dict):
        # As core does for its ops: the innermost mode sees the op as one call, and runs
        # with itself switched off (so calling ``func`` reaches the next mode / the kernel).
        saved = _modes.modes
        mode = saved[-1]
        types = tuple({type(x) for x in _flat(args, kwargs) if isinstance(x, Tensor)})
        _modes.modes = saved[:-1]
        try:
            return mode.__tensorplay_dispatch__(self._handle, types, args, kwargs)
        finally:
            _modes.modes = saved

    def _pick_kernel(self, args: tuple, kwargs: dict) -> Callable[..., Any]:
        dev = _first_tensor_device(args, kwargs)
        table = self._table
        if dev is None:  # no tensor argument: only a device-agnostic kernel can run
            kernel = self._kernel(AGNOSTIC)
            if kernel is None:
                raise NotImplementedError(
                    f"{self._name} was called without tensor arguments and has no "
                    f"device-agnostic kernel; registered: {self._registered()}. Pass a tensor "
                    f"or register one via {self._name}.register_kernel(None)"
                )
            return kernel
        kernel = table.get(dev.type)
        if kernel is None:
            if dev.type == "meta":
                raise NotImplementedError(
                    f"{self._name} has no fake kernel for device 'meta' (needed for meta "
                    f"tensors and shape propagation); registered: {self._registered()}. "
                    f"Register one via {self._name}.register_fake(fn)"
                )
            raise NotImplementedError(
                f"{self._name} has no kernel for device {dev.type!r}; registered: "
                f"{self._registered()}. Register one via "
                f"{self._name}.register_kernel({dev.type!r})"
            )
        return kernel

    def _registered(self) -> list[str]:
        return sorted(k for k in self._kernels if k not in self._disabled)

    def _inputs(self, args: tuple, kwargs: dict) -> tuple:
        """The call's arguments in the body's parameter order (defaults filled in): what
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

    def _input_names(self) -> list[str]:
        if self._params is None:
            return []
        return [p.name for p in self._params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


class _ModeHandle:
    """``func`` as a dispatch mode sees a library op: call it to run the op below the mode."""

    __slots__ = ("op",)

    def __init__(self, op: CustomOpDef):
        self.op = op

    @property
    def name(self) -> str:
        return self.op.name

    def __call__(self, *args, **kwargs):
        op = self.op
        if op._formula is None:  # implicit autograd: the body records as it runs
            return op._below_autograd(args, kwargs)
        prev = _grad.enabled
        _grad.enabled = False  # below autograd: the outer call builds the node
        try:
            return op._below_autograd(args, kwargs)
        finally:
            _grad.enabled = prev

    def __repr__(self) -> str:
        return f"<op {self.op.name}>"


def _check_callable(name: str, what: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"{name}.{what}: expected a callable, got {type(fn).__name__} {fn!r}")


def _wants_grad(args: tuple, kwargs: dict) -> bool:
    """Some tensor argument (or element of a list argument) requires grad."""
    for a in args:
        if type(a) is Tensor or isinstance(a, Tensor):
            if a.requires_grad:
                return True
        elif type(a) is list or type(a) is tuple:
            if any(isinstance(x, Tensor) and x.requires_grad for x in a):
                return True
    return bool(kwargs) and _wants_grad(tuple(kwargs.values()), {})


def _unusual(args: tuple, kwargs: dict) -> bool:
    """Some argument could implement ``__tensorplay_function__`` (not a Tensor, number, ...)."""
    for a in (*args, *kwargs.values()):
        t = type(a)
        if t not in _PLAIN_TYPES:
            if t is not list and t is not tuple:
                return True
            if any(type(x) not in _PLAIN_TYPES for x in a):
                return True
    return False


def _flat(args: tuple, kwargs: dict) -> list:
    """Arguments with list/tuple arguments opened one level (``Tensor[]`` parameters)."""
    flat: list = []
    for a in (*args, *kwargs.values()):
        if type(a) is list or type(a) is tuple:
            flat.extend(a)
        else:
            flat.append(a)
    return flat


def _first_tensor_device(args: tuple, kwargs: dict):
    """The device of the first tensor argument: positional first, then keyword."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, Tensor):
            return a.device
        if type(a) is list or type(a) is tuple:
            for x in a:
                if isinstance(x, Tensor):
                    return x.device
    return None


def _cast_floating(args: tuple, kwargs: dict, device_type: str, dtype: _DType):
    def cast(x):
        if isinstance(x, Tensor):
            if x.dtype.is_floating_point and x.dtype is not dtype and x.device.type == device_type:
                return x.to(dtype)
            return x
        if type(x) is list or type(x) is tuple:
            return type(x)(cast(y) for y in x)
        return x

    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
