"""The ``__tensorplay_function__`` protocol and function modes (PyTorch's ``__torch_function__``).

Any argument of a public op whose type defines ``__tensorplay_function__`` takes the
call over::

    class MyArray:
        def __tensorplay_function__(self, func, types, args, kwargs):
            if func is tp.add:
                return MyArray(tp.add(args[0].tensor, args[1].tensor))
            return NotImplemented

The rules are PyTorch's:

* Every public op honours it: the ``tp.<op>`` functions, ``Tensor`` methods and
  operators, with overridable objects found among the tensor arguments, the other
  parameters and one level inside lists/tuples (``tp.cat([my, t])``).
* The *overloaded arguments* are the objects whose type defines the method (a
  ``Tensor`` subclass that only inherits ``Tensor``'s default does not count), one per
  type, subclasses before their base classes and otherwise left to right. Each one's
  handler is called in turn as ``handler(func, types, args, kwargs)``; ``types`` is the
  tuple of the overloaded types. ``NotImplemented`` defers to the next one; when none is
  left the call raises ``TypeError("no implementation found for 'tensorplay.add' on
  types that implement __tensorplay_function__: [...]")``.
* ``func`` is always the *public function* of the op: ``tp.add`` for ``tp.add(a, b)``,
  ``a.add(b)``, ``a + b`` and ``b + a`` (``Tensor.add`` *is* ``tp.add``: methods are
  the generated functions themselves), ``Tensor.add_`` for ``a.add_(b)`` and
  ``a += b``. (PyTorch passes ``Tensor.add``/``Tensor.__add__`` for methods; here one
  function per op keeps handlers to one ``func is tp.add`` test.) Composites that pick
  an op (``tp.max``, ``tp.min``, ``tp.allclose``, ``tp.equal``) pass themselves.
* ``args``/``kwargs`` are the call normalised to the op's signature: positional
  parameters positionally, keyword-only ones as keywords, parameters left at their
  default omitted (``tp.add(m1, m2)`` gives ``args == (m1, m2), kwargs == {}``), so
  ``func(*args, **kwargs)`` always repeats the call.
* Whatever a handler returns (other than ``NotImplemented``) is the op's result, passed
  through unchecked, as PyTorch does: a handler returning a string makes ``tp.add``
  return that string.
* Operators: when no handler accepts ``t + obj``, ``Tensor.__add__`` returns
  ``NotImplemented`` (instead of raising) so Python falls back to ``obj.__radd__``.
* Tensor subclasses take part as PyTorch's do: ``Tensor.__tensorplay_function__`` is a
  classmethod default that runs ``func`` with subclass handling disabled and returns its
  Tensor results as the subclass (``as_subclass``), so ``type(S(...) + t)`` is ``S``
  through ops, views, in-place ops and autograd. A subclass handler may end in
  ``super().__tensorplay_function__(func, types, args, kwargs)``; a subclass opts out
  with ``__tensorplay_function__ = disabled_tensorplay_function_impl``.
  ``DisableTensorPlayFunctionSubclass`` / ``DisableTensorPlayFunction`` switch the
  protocol off for subclasses / for everything (modes included) inside a ``with``.

``TensorPlayFunctionMode`` objects see every public call made inside their ``with``
block, before the arguments' handlers. Modes stack per thread; the innermost one sees a
call first, and runs with itself popped, so calling ``func`` from its handler reaches the
next outer mode (then the arguments' handlers, then the real op) instead of recursing.

Cost: the generated functions' fast path (plain ``Tensor`` arguments, ``state.plain``)
never reaches this module. The general path ``_dispatch.call`` checks ``state.plain``
(cleared while any mode is active) and the argument types (``type(x) is Tensor`` or a
number) before calling ``dispatch`` here.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
from collections.abc import Callable, Iterable

import numpy as np

from tensorplay import _device, _dispatch, _factories
from tensorplay._dispatch import OPS, _split_params, state
from tensorplay._tensor import Tensor

__all__ = [
    "BaseTensorPlayFunctionMode",
    "DisableTensorPlayFunction",
    "DisableTensorPlayFunctionSubclass",
    "TensorPlayFunctionMode",
    "disabled_tensorplay_function_impl",
    "get_ignored_functions",
    "enable_reentrant_dispatch",
    "get_testing_overrides",
    "is_tensor_method_or_property",
    "resolve_name",
    "wrap_tensorplay_function",
    "get_overridable_functions",
    "handle_tensorplay_function",
    "has_tensorplay_function",
    "is_tensor_like",
]

# Types that can never override (checked first: they are most non-Tensor arguments).
_PLAIN = frozenset({int, float, bool, complex, str, type(None), np.dtype, slice, type(...)})


class _TLS(threading.local):
    def __init__(self):
        self.modes: list = []  # innermost last
        # > 0 inside Tensor.__tensorplay_function__ / DisableTensorPlayFunctionSubclass
        self.subclass_disabled = 0
        self.all_disabled = 0  # > 0 inside DisableTensorPlayFunction: modes are skipped too


_tls = _TLS()


def _tensor_default(cls, func, types, args=(), kwargs=None):
    """``Tensor.__tensorplay_function__``: run ``func`` with subclass handlers disabled and
    return its Tensor results as ``cls`` (``as_subclass``), as PyTorch's default does.

    Function modes still apply. A call with an overloaded type that ``cls`` does not derive
    from is declined (``NotImplemented``), so that type's handler runs instead.
    """
    if not all(issubclass(cls, t) for t in types):
        return NotImplemented
    _tls.subclass_disabled += 1
    try:
        return _convert(func(*args, **(kwargs or {})), cls)
    finally:
        _tls.subclass_disabled -= 1


def _convert(ret, cls):
    """``ret`` with its Tensors (also inside tuples and lists) made ``cls`` instances."""
    if cls is Tensor:
        return ret
    if isinstance(ret, Tensor):
        return ret if isinstance(ret, cls) else _as_subclass(ret, cls)
    if isinstance(ret, (tuple, list)):
        items = [_convert(r, cls) for r in ret]
        if hasattr(ret, "_fields"):  # a named tuple (sort, max along a dim, ...)
            return type(ret)(*items)
        return type(ret)(items)
    return ret


def disabled_tensorplay_function_impl(cls, func, types, args=(), kwargs=None):
    """A ``__tensorplay_function__`` that opts a Tensor subclass out of the protocol (its
    instances act as plain Tensors and results stay plain): PyTorch's
    ``torch._C._disabled_torch_function_impl``. Assign it as a classmethod or a plain
    function: ``__tensorplay_function__ = disabled_tensorplay_function_impl``."""
    _tls.subclass_disabled += 1
    try:
        return func(*args, **(kwargs or {}))
    finally:
        _tls.subclass_disabled -= 1


_NOT_OVERLOADED = (_tensor_default, disabled_tensorplay_function_impl)


def _overrides(obj) -> bool:
    """``obj`` takes part in the protocol: its type defines ``__tensorplay_function__``, or
    it is an instance of a Tensor subclass (which inherits Tensor's default, converting
    results to the subclass) that has not opted out. Inside ``Tensor.__tensorplay_function__``
    and ``DisableTensorPlayFunctionSubclass`` Tensor subclasses do not count; inside
    ``DisableTensorPlayFunction`` nothing does."""
    t = type(obj)
    if t is Tensor or t in _PLAIN:
        return False
    method = getattr(t, "__tensorplay_function__", None)
    if method is None or _tls.all_disabled:
        return False
    if isinstance(obj, Tensor):
        return not _tls.subclass_disabled and getattr(method, "__func__", method) not in (
            disabled_tensorplay_function_impl,
        )
    return getattr(method, "__func__", method) not in _NOT_OVERLOADED


class DisableTensorPlayFunctionSubclass:
    """``with DisableTensorPlayFunctionSubclass():`` Tensor subclasses act as plain Tensors
    (their handlers are not called, results are not converted); function modes still apply.
    PyTorch's ``torch._C.DisableTorchFunctionSubclass``."""

    def __enter__(self):
        _tls.subclass_disabled += 1
        return self

    def __exit__(self, *exc):
        _tls.subclass_disabled -= 1
        return False


class DisableTensorPlayFunction:
    """``with DisableTensorPlayFunction():`` no handler runs: neither the arguments' nor the
    function modes'. PyTorch's ``torch._C.DisableTorchFunction``."""

    def __enter__(self):
        _tls.all_disabled += 1
        state.block()  # the fast path's mode route is left aside too (see needs_dispatch)
        return self

    def __exit__(self, *exc):
        _tls.all_disabled -= 1
        state.unblock()
        return False


def _as_subclass(t: Tensor, cls) -> Tensor:
    """``t.as_subclass(cls)``: a ``cls`` instance aliasing ``t``'s memory, attached to the
    autograd graph through a view of ``t`` (PyTorch's ``AliasBackward0``; here
    ``ViewBackward0``)."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError(f"as_subclass(): cls must be a subclass of tensorplay.Tensor, got {cls!r}")
    _tls.all_disabled += 1  # a primitive, as in PyTorch: no handler or mode sees the view
    try:
        alias = Tensor.view(t, t._shape)  # same shape: a view whatever the strides
    finally:
        _tls.all_disabled -= 1
    try:
        alias.__class__ = cls
    except TypeError as e:
        raise TypeError(
            f"as_subclass(): cannot make a {cls.__name__} from a Tensor ({e}); a subclass that "
            "adds __slots__ cannot share Tensor's layout, drop them"
        ) from None
    return alias


def _overloaded_args(relevant: Iterable) -> list:
    """The overloaded objects of ``relevant``: one per type, subclasses before bases."""
    found: list = []
    types: list = []
    for obj in relevant:
        if not _overrides(obj):
            continue
        t = type(obj)
        if t in types:
            continue
        # insert before the first earlier argument whose type is a base class of ``t``
        index = len(found)
        for i, earlier in enumerate(types):
            if issubclass(t, earlier):
                index = i
                break
        found.insert(index, obj)
        types.insert(index, t)
    return found


def _flatten(values: Iterable) -> list:
    """``values`` with lists/tuples opened one level (``cat``'s sequence of tensors)."""
    flat = []
    for v in values:
        if type(v) in (list, tuple):
            flat.extend(v)
        else:
            flat.append(v)
    return flat


def has_tensorplay_function(relevant_args: Iterable) -> bool:
    """True when a function mode is active or an element of ``relevant_args`` overrides
    ``__tensorplay_function__`` (then ``handle_tensorplay_function`` should take the call).
    """
    if _tls.all_disabled:
        return False
    return bool(_tls.modes) or any(_overrides(a) for a in relevant_args)


def is_tensor_like(obj) -> bool:
    """True for Tensors and for objects whose type implements ``__tensorplay_function__``."""
    return isinstance(obj, Tensor) or hasattr(type(obj), "__tensorplay_function__")


def _qualified(func) -> str:
    module = getattr(func, "__module__", None) or "tensorplay"
    return f"{module}.{getattr(func, '__qualname__', func)}"


class NoImplementationError(TypeError):
    """Every handler returned ``NotImplemented`` (operators turn it into ``NotImplemented``)."""


def handle_tensorplay_function(public_api: Callable, relevant_args: Iterable, *args, **kwargs):
    """Call ``public_api``'s overrides: the innermost mode, then each overloaded argument.

    ``relevant_args`` are the objects to look for handlers on; ``args``/``kwargs`` are
    passed to the handlers (and are what ``public_api(*args, **kwargs)`` would take).
    """
    overloaded = _overloaded_args(relevant_args)
    types = tuple(type(a) for a in overloaded)
    if _tls.modes and not _tls.all_disabled:
        result = _innermost_mode(public_api, types, args, kwargs)
        if result is not NotImplemented:
            return result
    for obj in overloaded:
        result = obj.__tensorplay_function__(public_api, types, args, kwargs)
        if result is not NotImplemented:
            return result
    raise _no_implementation(public_api, types)


def _no_implementation(func, types: tuple) -> NoImplementationError:
    return NoImplementationError(
        f"no implementation found for {_qualified(func)!r} on types that implement "
        f"__tensorplay_function__: {list(types)}"
    )


def _innermost_mode(func, types, args, kwargs):
    """Run the innermost mode's handler with that mode off (and, when it was the only
    layer, the fast path back on for the calls the handler makes)."""
    modes = _tls.modes
    mode = modes.pop()
    _unblock()
    try:
        return mode.__tensorplay_function__(func, types, args, kwargs)
    finally:
        modes.append(mode)
        _block()


_block, _unblock = state.block, state.unblock


def mode_call(func, fallback, args: tuple):
    """The native fast path's route while a layer is active (``tensorplay._C.FastOp``;
    twin: ``_dispatch.call`` -> ``dispatch``): the arguments are plain Tensors and
    numbers, so only function modes can claim the call; otherwise ``fallback`` runs it.
    ``_innermost_mode`` and the gate's block()/unblock() are inlined here: this runs once
    per op under a mode, and the calls cost 1.75x -> 2.0x of the fast path (goal <= 2x)."""
    modes = _tls.modes
    if not modes or _tls.all_disabled:
        return fallback(*args)
    mode = modes.pop()
    st = state
    st._blockers -= 1
    st.plain = not st._blockers
    try:
        result = mode.__tensorplay_function__(func, (), args, {})
    finally:
        modes.append(mode)
        st._blockers += 1
        st.plain = False
    if result is not NotImplemented:
        return result
    raise _no_implementation(func, ())


# ---- the hook called by _dispatch.call -----------------------------------------------------


def needs_dispatch(targs: tuple, params: dict, out) -> bool:
    """A mode is active or an argument overrides (``call`` asks only after its cheap
    pre-check ``_dispatch._unusual`` found a non-Tensor, non-number argument or a mode).
    """
    if _tls.all_disabled:
        return False
    if _tls.modes or _overrides(out):
        return True
    for v in targs:
        if _overrides(v) or (type(v) in (list, tuple) and any(_overrides(x) for x in v)):
            return True
    for v in params.values():
        if _overrides(v) or (type(v) in (list, tuple) and any(_overrides(x) for x in v)):
            return True
    return False


@functools.cache
def _layout(row, inplace: bool):
    """(public function, its parameters, the names bound to ``targs``) for ``row``."""
    fn = row.inplace_fn if inplace else row.fn
    inputs, _, _ = _split_params(row)
    if inplace:
        inputs = ["self", *inputs[1:]]
    return fn, tuple(inspect.signature(fn).parameters.values()), inputs


def dispatch(row, targs: tuple, params: dict, out, inplace):
    """Hand a general-path call to the overrides: rebuild the user's call and run them."""
    fn, args, kwargs = user_call(row, targs, params, out, inplace)
    relevant = _flatten(list(targs) + list(params.values()) + ([out] if out is not None else []))
    return handle_tensorplay_function(fn, relevant, *args, **kwargs)


def user_call(row, targs: tuple, params: dict, out, inplace) -> tuple:
    """``(public function, args, kwargs)`` of the call the dispatcher received as
    ``targs``/``params`` (parameters left at their default are dropped)."""
    if row.kind == "tensor_op":
        return row.user_call(targs, params)
    fn, sig, inputs = _layout(row, inplace is not None)
    values = dict(params)
    if row.n_inputs == "star":
        values[inputs[0]] = targs
    else:
        values.update(zip(inputs, targs))
    if out is not None:
        values["out"] = out
    args: list = []
    kwargs: dict = {}
    pending: list = []  # positional parameters at their default, kept only if a later one is not
    for p in sig:
        v = values.get(p.name, p.default)
        if p.kind is p.VAR_POSITIONAL:
            args.extend(pending)
            args.extend(v)
            pending = []
        elif p.kind is p.KEYWORD_ONLY:
            if v is not p.default:
                kwargs[p.name] = v
        elif v is p.default:
            pending.append(v)
        else:
            args.extend(pending)
            args.append(v)
            pending = []
    return fn, tuple(args), kwargs


_NO_ARG = object()  # overridable's wrapper: called without a positional argument


def overridable(fn: Callable) -> Callable:
    """Make a hand-written public function or method (``tp.max``, ``Tensor.to``,
    ``Tensor.__getitem__``) honour the protocol itself (op-table functions do it in the
    dispatcher). The plain call (no layer active, only Tensors, numbers, slices...) costs
    one gate check and one scan of the arguments."""
    if getattr(fn, "__tensorplay_overridable__", False):
        return fn

    @functools.wraps(fn)
    def wrapper(first=_NO_ARG, /, *args, **kwargs):
        # the commonest call, a method with no other argument (x.dim(), x.is_contiguous(),
        # x.data_ptr() in op bodies), is checked without packing the arguments
        if not args and not kwargs and type(first) is Tensor and state.plain:
            return fn(first)
        if first is not _NO_ARG:
            args = (first, *args)
        if not state.plain or _dispatch._unusual(args, kwargs):
            relevant = _flatten(list(args) + list(kwargs.values()))
            if has_tensorplay_function(relevant):
                return handle_tensorplay_function(wrapper, relevant, *args, **kwargs)
        return fn(*args, **kwargs)

    wrapper.__tensorplay_overridable__ = True
    return wrapper


# Dunders of Tensor that are public API (operators come from the op table).
_PUBLIC_DUNDERS = (
    "__getitem__",
    "__setitem__",
    "__len__",
    "__bool__",
    "__float__",
    "__int__",
    "__index__",
    "__complex__",
    "__iter__",
    "__contains__",
)
_methods: list = []  # Tensor's hand-written public methods, wrapped by install()
_functions: list = []  # the hand-written tp.<name> functions below
_package = None  # the package ``tensorplay``, once install() has run


def _public(fn: Callable) -> Callable:
    wrapped = overridable(fn)
    _functions.append(wrapped)
    return wrapped


# tp.<name> functions written by hand (the op-table ones are generated and overridable). The
# package re-exports these very objects, and the derivative formulas call them
# (``autograd._derivatives``), so a handler's ``func is tp.zeros_like`` holds for both.
zeros_like = _public(_factories.zeros_like)
ones_like = _public(_factories.ones_like)
full_like = _public(_factories.full_like)
empty_like = _public(_factories.empty_like)
rand_like = _public(_factories.rand_like)
randn_like = _public(_factories.randn_like)
randint_like = _public(_factories.randint_like)


@_public
def numel(input: Tensor) -> int:
    return input.numel()


_ignored: list = []  # public callables only function modes see (get_ignored_functions)


def _through_modes(fn: Callable) -> Callable:
    """``fn`` (a factory: no tensor argument to carry a handler) seen by function modes,
    as PyTorch's factories are; outside a mode the call costs one gate check."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not state.plain and _tls.modes and not _tls.all_disabled:
            return handle_tensorplay_function(wrapper, (), *args, **kwargs)
        return fn(*args, **kwargs)

    wrapper.__tensorplay_overridable__ = True
    wrapper.__module__ = "tensorplay"  # handlers and errors name it tensorplay.<name>
    _ignored.append(wrapper)
    return wrapper


tensor = _through_modes(_factories.tensor)
as_tensor = _through_modes(_factories.as_tensor)
from_numpy = _through_modes(_factories.from_numpy)
empty = _through_modes(_factories.empty)
zeros = _through_modes(_factories.zeros)
ones = _through_modes(_factories.ones)
full = _through_modes(_factories.full)
arange = _through_modes(_factories.arange)
linspace = _through_modes(_factories.linspace)
eye = _through_modes(_factories.eye)
rand = _through_modes(_factories.rand)
randn = _through_modes(_factories.randn)
randint = _through_modes(_factories.randint)
randperm = _through_modes(_factories.randperm)


def _device_hook(cls, args, kwargs):
    """``tp.device(...)`` under a function mode (``_device.mode_hook``)."""
    if state.plain or not _tls.modes or _tls.all_disabled:
        return NotImplemented
    return handle_tensorplay_function(cls, (), *args, **kwargs)


_device.mode_hook = _device_hook
_ignored.append(_device.device)


def _as_subclass_method(self, cls):
    """``t.as_subclass(cls)``: a ``cls`` instance (a Tensor subclass) sharing ``t``'s
    memory and attached to its autograd graph (``ViewBackward0``, where PyTorch records
    ``AliasBackward0``). Not seen by ``__tensorplay_function__``, as in PyTorch."""
    return _as_subclass(self, cls)


_as_subclass_method.__name__ = _as_subclass_method.__qualname__ = "as_subclass"
_as_subclass_method.__tensorplay_overridable__ = True  # install() leaves it as it is
Tensor.as_subclass = _as_subclass_method
_ignored.append(_as_subclass_method)


def get_ignored_functions() -> set:
    """Public callables that cannot be overridden by an argument's handler (no tensor
    argument, or a protocol primitive such as ``Tensor.as_subclass``); the factories and
    ``tp.device`` among them are still seen by function modes (as in PyTorch)."""
    return set(_ignored)


def install(package) -> None:
    """Make Tensor's hand-written methods overridable and remember the package.

    Called once at the end of ``import tensorplay`` (when every module has added its
    methods), with the package module itself (``get_overridable_functions`` lists its
    ``tp.<name>`` functions).
    """
    global _package
    for name, value in list(vars(Tensor).items()):
        public = not name.startswith("_") or name in _PUBLIC_DUNDERS
        done = getattr(value, "__tensorplay_overridable__", False)
        if public and inspect.isfunction(value) and not done:
            wrapped = overridable(value)
            wrapped.__name__, wrapped.__qualname__ = name, f"Tensor.{name}"  # as handlers see it
            setattr(Tensor, name, wrapped)
            _methods.append(wrapped)
    _package = package


# ---- modes -------------------------------------------------------------------------------------


class TensorPlayFunctionMode:
    """Base class of function modes: ``with Mode():`` routes every public call inside it
    through ``Mode.__tensorplay_function__(func, types, args, kwargs)``.

    The default handler runs the call unchanged (reaching outer modes and the real op).
    """

    def __tensorplay_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        if isinstance(inspect.getattr_static(type(self), "__tensorplay_function__"), classmethod):
            raise RuntimeError(
                f"{type(self).__name__}: a mode's __tensorplay_function__ must be a plain "
                "method, not a classmethod (the mode object is what the call is handed to)"
            )
        _tls.modes.append(self)
        state.block()  # the generated functions' fast path would skip the mode
        return self

    def __exit__(self, exc_type, exc, tb):
        modes = _tls.modes
        if not modes or modes[-1] is not self:
            raise RuntimeError(
                f"{type(self).__name__}.__exit__: exiting a function mode out of order "
                "(it is not the innermost active mode)"
            )
        modes.pop()
        state.unblock()
        return False


class BaseTensorPlayFunctionMode(TensorPlayFunctionMode):
    """PyTorch's ``BaseTorchFunctionMode``: a mode whose handler runs every call unchanged
    (override ``__tensorplay_function__`` for the calls you care about and end in
    ``super().__tensorplay_function__(...)``). ``TensorPlayFunctionMode``'s default does the
    same here; the name is kept for code ported from PyTorch."""


def _active_modes() -> tuple:
    """The active modes of this thread, outermost first (for tests and debugging)."""
    return tuple(_tls.modes)


def _get_current_function_mode():
    """The innermost active function mode of this thread, or None."""
    return _tls.modes[-1] if _tls.modes else None


def _get_current_function_mode_stack() -> list:
    """The active function modes of this thread, outermost first (a copy)."""
    return list(_tls.modes)


def enable_reentrant_dispatch():
    """Context manager: inside a dispatch mode's handler, the calls the handler makes reach
    that mode again (PyTorch's ``torch.overrides.enable_reentrant_dispatch``)."""
    return _reentrant_dispatch()


# The dispatch-mode layer (tensorplay.utils._python_dispatch, which imports this module)
# installs its implementation here at import.
_reentrant_dispatch = contextlib.nullcontext


def wrap_tensorplay_function(dispatcher: Callable) -> Callable:
    """Decorator: make a function of your own honour the protocol, as PyTorch's
    ``wrap_torch_function``. ``dispatcher(*args, **kwargs)`` returns the arguments to look
    for handlers on; the decorated function is what handlers receive as ``func``::

        @wrap_tensorplay_function(lambda x, scale=1.0: (x,))
        def scaled(x, scale=1.0):
            return x * scale
    """
    if not callable(dispatcher):
        raise TypeError(
            f"wrap_tensorplay_function(dispatcher): dispatcher must be callable (returning "
            f"the relevant arguments), got {type(dispatcher).__name__}"
        )

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapped(*args, **kwargs):
            relevant = _flatten(dispatcher(*args, **kwargs))
            if has_tensorplay_function(relevant):
                return handle_tensorplay_function(wrapped, relevant, *args, **kwargs)
            return func(*args, **kwargs)

        return wrapped

    return decorate


def resolve_name(func) -> str | None:
    """A readable name of a function handlers receive (``"tensorplay.add"``,
    ``"tensorplay.Tensor.to"``), or None for one that is not TensorPlay's."""
    tp = _package
    name = getattr(func, "__name__", None)
    if name is None:
        return None
    if tp is not None and getattr(tp, name, None) is func:
        return f"tensorplay.{name}"
    if getattr(Tensor, name, None) is func or is_tensor_method_or_property(func):
        return f"tensorplay.Tensor.{name.removesuffix('.__get__')}"
    return None


def is_tensor_method_or_property(func) -> bool:
    """``func`` is a ``Tensor`` method or property getter that handlers may receive
    (PyTorch's helper of the same name)."""
    if func in get_overridable_functions()[Tensor]:
        return True
    owner = getattr(func, "__self__", None)
    return isinstance(owner, property) and any(v is owner for v in vars(Tensor).values())


def get_testing_overrides() -> dict:
    """``{function: dummy}`` for every overridable function: each dummy has the function's
    signature and returns -1 (PyTorch's ``get_testing_overrides``, for testing a handler
    against the whole API)."""
    out = {}
    for funcs in get_overridable_functions().values():
        for f in funcs:
            out[f] = _dummy(f)
    return out


def _dummy(f: Callable) -> Callable:
    def dummy(*args, **kwargs):
        return -1

    try:
        dummy.__signature__ = inspect.signature(f)
    except (TypeError, ValueError):  # a builtin without a signature: (*args, **kwargs)
        pass
    dummy.__name__ = getattr(f, "__name__", "dummy")
    return dummy


def get_overridable_functions() -> dict:
    """``{namespace: [functions]}`` of everything that honours the protocol (like PyTorch's):
    ``tensorplay`` -> the public ``tp.<op>`` functions, ``tensorplay.Tensor`` -> its op
    methods, in-place methods and operators.
    """
    tp = _package
    funcs, methods = [], []
    for name in sorted(tp._PUBLIC_OPS):
        funcs.append(getattr(tp, name))
    funcs += [tp.max, tp.min, tp.allclose, tp.equal, *_functions]
    seen = set()
    for row in OPS.values():
        names = ([row.name] if row.method else []) + ([row.name + "_"] if row.inplace else [])
        for name in [*names, *row.dunders]:
            if name not in seen and hasattr(Tensor, name):
                seen.add(name)
                methods.append(getattr(Tensor, name))
    methods += [m for m in _methods if m not in methods]
    return {tp: funcs, Tensor: methods}


# Tensor's default handler (a classmethod, like torch.Tensor.__torch_function__); a plain
# or subclass Tensor that only inherits it is not an overloaded argument.
Tensor.__tensorplay_function__ = classmethod(_tensor_default)
_dispatch.register_overrides(sys.modules[__name__])  # call() now consults this module
