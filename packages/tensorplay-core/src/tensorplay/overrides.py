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
* ``Tensor.__tensorplay_function__`` is a classmethod default that runs ``func`` with
  subclass handling disabled; a subclass handler may end in
  ``super().__tensorplay_function__(func, types, args, kwargs)``. Unlike PyTorch it
  does not convert results to the subclass (they stay plain ``Tensor``).

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

import functools
import inspect
import sys
import threading
from collections.abc import Callable, Iterable

import numpy as np

from tensorplay import _dispatch, _factories
from tensorplay._dispatch import OPS, _split_params, state
from tensorplay._tensor import Tensor

__all__ = [
    "TensorPlayFunctionMode",
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
        self.subclass_disabled = 0  # > 0 inside Tensor.__tensorplay_function__


_tls = _TLS()


def _tensor_default(cls, func, types, args=(), kwargs=None):
    """``Tensor.__tensorplay_function__``: run ``func`` with subclass handlers disabled.

    Function modes still apply. Results are returned as computed (not converted to
    ``cls``).
    """
    _tls.subclass_disabled += 1
    try:
        return func(*args, **(kwargs or {}))
    finally:
        _tls.subclass_disabled -= 1


def _overrides(obj) -> bool:
    """``obj``'s type defines ``__tensorplay_function__`` (other than Tensor's default).

    Inside ``Tensor.__tensorplay_function__`` Tensor subclasses do not count.
    """
    t = type(obj)
    if t is Tensor or t in _PLAIN:
        return False
    method = getattr(t, "__tensorplay_function__", None)
    if method is None or getattr(method, "__func__", None) is _tensor_default:
        return False
    return not (_tls.subclass_disabled and isinstance(obj, Tensor))


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
    if _tls.modes:
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
    if not modes:
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


def install(package) -> None:
    """Make Tensor's hand-written methods overridable and remember the package.

    Called once at the end of ``import tensorplay`` (when every module has added its
    methods), with the package module itself (``get_overridable_functions`` lists its
    ``tp.<name>`` functions).
    """
    global _package
    for name, value in list(vars(Tensor).items()):
        public = not name.startswith("_") or name in _PUBLIC_DUNDERS
        if public and inspect.isfunction(value):
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


def _active_modes() -> tuple:
    """The active modes of this thread, outermost first (for tests and debugging)."""
    return tuple(_tls.modes)


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
