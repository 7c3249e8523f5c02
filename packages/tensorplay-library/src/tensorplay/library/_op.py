"""``CustomOpDef``: one user-defined operator, its kernels and formulas, and its call path.

A call takes one of two paths:

* the **fast path** (``__call__``; ``_fastcall`` generates a copy of it with the
  body's own signature for each op): nothing needs to see the call (``state.plain``: no
  override/dispatch mode, profiler or autocast), the first argument is a ``Tensor`` and
  the others plain values (so none is a capture proxy or an override), and no input
  requires grad. It costs a few attribute loads and one dict hit (``_table``: device
  type -> kernel), then the kernel runs;
* the **general path** (``_call_general``), the layers in the order they run:
  capture (one graph node, the body does not run) -> ``__tensorplay_function__``
  overrides and function modes -> autocast -> profiler span -> autograd (inputs that
  require grad: the kernel sees them detached, the outputs get the op's node) ->
  dispatch modes -> kernel.

After every kernel call, ``_finish`` checks that no output aliases an input and bumps
the version of the arguments in ``mutates_args``.

Registration never locks the call path: every change builds a new ``_table`` (and
``_formula``) under the op's lock and publishes it with one attribute store. A
``set_kernel_enabled`` block is per thread: while one is live anywhere, the published
table is empty, so calls take the general path, which resolves the kernel per thread.
"""

from __future__ import annotations

import inspect
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tensorplay import Tensor, capture, dtype as _DType, overrides, profiler
from tensorplay._extension import autocast_any_enabled, dispatch_mode_stack, dispatch_state
from tensorplay.amp import autocast, is_autocast_enabled
from tensorplay.autograd import grad_mode
from tensorplay.library import _autograd
from tensorplay.library._fastcall import specialise
from tensorplay.library._names import AGNOSTIC, DEVICE_TYPES, device_keys
from tensorplay.library._schema import check_schema, check_signature

__all__ = ["CustomOpDef"]

_state = dispatch_state  # .plain: the fast-path gate
_grad = grad_mode.state  # .enabled
_modes = dispatch_mode_stack  # .modes: the dispatch modes of this thread
# Argument types that never carry __tensorplay_function__ (the cheap override pre-check).
_PLAIN_TYPES = frozenset({Tensor, int, float, bool, complex, str, type(None), _DType})
_NOTHING: frozenset[str] = frozenset()
# Published while a set_kernel_enabled block is live in some thread: every lookup misses,
# so every call reaches _pick_kernel, which honours the calling thread's blocks.
_PER_THREAD: dict[str, Callable[..., Any]] = {}


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
        self._parsed = check_schema(self._name, schema)
        self._lock = threading.RLock()
        self._kernels: dict[str, Callable[..., Any]] = {}
        self._local = threading.local()  # .disabled: this thread's set_kernel_enabled blocks
        self._live_blocks = 0  # set_kernel_enabled blocks live in any thread
        self._full: dict[str, Callable[..., Any]] = {}  # the table outside any block
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
        if self._parsed is not None:
            check_signature(self._name, self._schema, self._parsed, fn, params, self._mutates_args)
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

    def _finish(self, args: tuple, kwargs: dict, out: Any) -> Any:
        """What every kernel call owes the rest of the system, checked after the kernel
        ran: outputs that alias no input (autograd and capture treat them as new tensors),
        and a version bump on each argument in ``mutates_args`` (as core's in-place ops
        do, so a tensor saved for backward and then written through the op is caught)."""
        _check_no_alias(self, args, kwargs, out)
        for name in self._mutates_args:
            _bump_versions(self._argument(name, args, kwargs))
        return out

    def _kernel(self, key: str) -> Callable[..., Any] | None:
        """The kernel registered in slot ``key`` (None if missing or disabled here)."""
        if key in self._disabled_here():
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
                if _wants_grad(args, kwargs):
                    return _autograd.apply(self, args, kwargs)
                kernel = self._table.get(a.device.type)
                if kernel is not None:
                    return self._finish(args, kwargs, kernel(*args, **kwargs))
        return self._call_general(args, kwargs)

    def _call_general(self, args: tuple, kwargs: dict):
        if capture.capturing() and capture.contains_proxy(args, kwargs):
            # a live capture with symbolic arguments: one graph node, the body does not run
            return capture.capture_call(self, args, kwargs)
        if not _state.plain or _unusual(args, kwargs):
            relevant = _flat(args, kwargs)
            if overrides.has_tensorplay_function(relevant):
                return overrides.handle_tensorplay_function(self, relevant, *args, **kwargs)
        if self._autocast and autocast_any_enabled():
            dev = _first_tensor_device(args, kwargs)
            cast_to = self._autocast.get(dev.type) if dev is not None else None
            if cast_to is not None and is_autocast_enabled(dev.type):
                args, kwargs = _cast_floating(args, kwargs, dev.type, cast_to)
                with autocast(dev.type, enabled=False):
                    return self._profiled(args, kwargs)
        return self._profiled(args, kwargs)

    def _profiled(self, args: tuple, kwargs: dict):
        if profiler.is_profiling():
            with profiler.span(self._name, inputs=_flat(args, kwargs)):
                return self._autograd_or_kernel(args, kwargs)
        return self._autograd_or_kernel(args, kwargs)

    def _autograd_or_kernel(self, args: tuple, kwargs: dict):
        if _wants_grad(args, kwargs):  # in grad mode or not: the kernel sees detached inputs
            return _autograd.apply(self, args, kwargs)
        return self._below_autograd(args, kwargs)

    def _below_autograd(self, args: tuple, kwargs: dict):
        """Dispatch modes, then the kernel (autograd, if any, records around this)."""
        if _modes.modes:
            return self._through_mode(args, kwargs)
        return self._finish(args, kwargs, self._pick_kernel(args, kwargs)(*args, **kwargs))

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
        # no tensor argument: only a device-agnostic kernel can run
        key = AGNOSTIC if dev is None else dev.type
        kernel = self._table.get(key)
        if kernel is None:
            disabled = self._disabled_here()
            kernel = (self._build_table(disabled) if disabled else self._full).get(key)
        if kernel is None and dev is None:
            raise NotImplementedError(
                f"{self._name} was called without tensor arguments and has no "
                f"device-agnostic kernel; registered: {self._registered()}. Pass a tensor "
                f"or register one via {self._name}.register_kernel(None)"
            )
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
        disabled = self._disabled_here()
        return sorted(k for k in self._kernels if k not in disabled)

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

    def _argument(self, name: str, args: tuple, kwargs: dict) -> Any:
        """The value passed for parameter ``name`` (None if not passed)."""
        if name in kwargs:
            return kwargs[name]
        names = self._input_names()
        index = names.index(name) if name in names else len(args)
        return args[index] if index < len(args) else None

    def _named_tensors(self, args: tuple, kwargs: dict) -> list[tuple[str, Tensor]]:
        """(argument name, tensor) for every tensor argument; list elements as ``name[i]``."""
        names = self._input_names()
        pairs = [(names[i] if i < len(names) else f"args[{i}]", a) for i, a in enumerate(args)]
        pairs += list(kwargs.items())
        found = []
        for name, value in pairs:
            if isinstance(value, Tensor):
                found.append((name, value))
            elif isinstance(value, (list, tuple)):
                found += [(f"{name}[{j}]", v) for j, v in enumerate(value) if isinstance(v, Tensor)]
        return found


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


def _check_no_alias(op: CustomOpDef, args: tuple, kwargs: dict, out: Any) -> None:
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
    for name, t in op._named_tensors(args, kwargs):
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
