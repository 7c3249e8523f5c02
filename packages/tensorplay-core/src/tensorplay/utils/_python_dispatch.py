"""Dispatch modes: objects with ``__tensorplay_dispatch__`` that see every op *below*
autograd (PyTorch's ``TorchDispatchMode``).

    class Log(TensorPlayDispatchMode):
        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            print(func.name)
            return func(*args, **(kwargs or {}))

Autograd has already decided what to record when a mode is called; the mode
produces the op's result (usually by calling ``func``, which runs the op with this
mode switched off and without recording), and autograd records around it. That is
what tracing needs (a mode carrying a ``tracer`` with ``record()`` turns every op,
and every library op as one node, into a graph node) and fake/meta execution too.
The stack is per thread; modes nest, the innermost sees an op first.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
from collections.abc import Callable

from tensorplay import _device, _dispatch, overrides
from tensorplay._device import META
from tensorplay._dtype import get_default_dtype
from tensorplay._storage import Storage
from tensorplay._tensor import Tensor, _new as new_tensor
from tensorplay.autograd import forward_ad, grad_mode
from tensorplay.overrides import disabled_tensorplay_function_impl, user_call

__all__ = [
    "TensorPlayDispatchMode",
    "OpHandle",
    "_push_mode",
    "_pop_mode",
    "_len_dispatch_stack",
    "_get_current_dispatch_mode",
    "enable_reentrant_dispatch",
    "register_dispatch_rule",
    "register_row_handler",
]


class _Stack(threading.local):
    modes: tuple = ()
    # the whole stack while a mode's handler runs (with that mode popped): what
    # enable_reentrant_dispatch() puts back
    snapshot: tuple | None = None


_stack = _Stack()


class OpHandle:
    """``func`` as a dispatch mode sees it: call it to run the op below the mode."""

    __slots__ = ("row", "inplace")

    def __init__(self, row, inplace: bool = False):
        self.row, self.inplace = row, inplace

    @property
    def name(self) -> str:
        return self.row.name + ("_" if self.inplace else "")

    def __call__(self, *args, **kwargs):
        row = self.row
        # below autograd, both modes: the outer call records the graph and propagates the
        # tangents (the handler's own calls on unwrapped values would only duplicate them)
        fw, gm = forward_ad.state, grad_mode.state
        if fw.busy and not gm.enabled:  # a handler's call: below autograd already
            if row.kind == "tensor_op":
                return row.below_autograd(args, kwargs)
            return (row.inplace_fn if self.inplace else row.fn)(*args, **kwargs)
        busy, fw.busy = fw.busy, True
        enabled, gm.enabled = gm.enabled, False
        try:
            if row.kind == "tensor_op":  # the next mode, or the kernel
                return row.below_autograd(args, kwargs)
            return (row.inplace_fn if self.inplace else row.fn)(*args, **kwargs)
        finally:
            fw.busy, gm.enabled = busy, enabled

    def __repr__(self) -> str:
        if self.row.kind == "tensor_op":
            return f"<op {self.name}>"
        return f"<op tensorplay.{self.name}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, OpHandle) and (other.row, other.inplace) == (
            self.row,
            self.inplace,
        )

    def __hash__(self) -> int:
        return hash((self.row.name, self.inplace))


class TensorPlayDispatchMode:
    """Base class: override ``__tensorplay_dispatch__``; use as a context manager."""

    def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        _push_mode(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        if not _stack.modes or _stack.modes[-1] is not self:
            raise RuntimeError(
                "dispatch modes must be exited in the reverse order they were "
                f"entered ({type(self).__name__} is not the innermost mode)"
            )
        _pop_mode()
        return False


def _push_mode(mode) -> None:
    _stack.modes = _stack.modes + (mode,)
    _dispatch.state.block()  # every op must reach the dispatcher's general path


def _pop_mode():
    mode = _stack.modes[-1]
    _stack.modes = _stack.modes[:-1]
    _dispatch.state.unblock()
    return mode


def _len_dispatch_stack() -> int:
    """How many dispatch modes are active in this thread (a cheap probe)."""
    return len(_stack.modes)


def _get_current_dispatch_mode():
    return _stack.modes[-1] if _stack.modes else None


def active() -> bool:
    return bool(_stack.modes)


# Set once a Tensor subclass defines __tensorplay_dispatch__: until then ``wanted`` costs
# one attribute read more than ``active``.
_subclasses = False


def wanted(values) -> bool:
    """A dispatch mode is active, or one of ``values`` (one level into lists and tuples) is
    an instance of a Tensor subclass that defines ``__tensorplay_dispatch__``."""
    if _stack.modes:
        return True
    if not _subclasses:
        return False
    for x in values:  # (every general-path call asks: a plain loop, no generator)
        t = type(x)
        if t is Tensor:
            continue
        if t is list or t is tuple:
            if any(_handles(type(y)) for y in x):
                return True
        elif _handles(t):
            return True
    return False


def _handles(t) -> bool:
    return t is not Tensor and getattr(t, "__tensorplay_dispatch__", None) is not None


def claims(targs: tuple, params: dict) -> bool:
    """With no layer active (``_dispatch.call`` asks only then): an argument is an instance
    of a dispatch subclass, and no argument takes part in ``__tensorplay_function__``, so
    the override layer would hand the call on unchanged (that subclass's
    ``__tensorplay_function__`` is the disabled default: running ``func`` again is all it
    would do). Every other argument is a plain Tensor or a simple value, also one level
    into lists and tuples."""
    found = False
    for group in (targs, params.values()):
        for x in group:
            t = type(x)
            if t in _SIMPLE:
                continue
            if t is list or t is tuple:
                for y in x:
                    u = type(y)
                    if u in _SIMPLE:
                        continue
                    if not _opted_out(u):
                        return False
                    found = True
            elif _opted_out(t):
                found = True
            else:
                return False
    return found


_SIMPLE = _dispatch._SIMPLE


def _opted_out(t) -> bool:
    """``t`` defines ``__tensorplay_dispatch__`` and leaves ``__tensorplay_function__``
    disabled (read on every call: a class may assign its own later)."""
    if getattr(t, "__tensorplay_dispatch__", None) is None:
        return False
    method = getattr(t, "__tensorplay_function__", None)
    return getattr(method, "__func__", method) is disabled_tensorplay_function_impl


def _types(values) -> tuple:
    """``(the Tensor types among values, the dispatch subclasses among them)``: one scan;
    the subclasses one each, subclasses before their bases."""
    types: list = []
    found: list = []
    for x in _two_levels(values):
        t = type(x)
        if t in types or not isinstance(x, Tensor):
            continue
        types.append(t)
        if t is Tensor or getattr(t, "__tensorplay_dispatch__", None) is None:
            continue
        index = next((i for i, f in enumerate(found) if issubclass(t, f)), len(found))
        found.insert(index, t)
    return tuple(types), found


def _defaulted(row, params: dict) -> bool:
    """Every parameter is its default object (``user_call``'s test: it drops those)."""
    defaults = row.defaults
    for k, v in params.items():
        if v is not defaults.get(k, _MISSING):
            return False
    return True


_MISSING = object()


def _two_levels(values):
    """The items of ``targs`` and the values of ``params`` (``values`` is the pair), with
    the items of list and tuple arguments (cat's tensors)."""
    targs, params = values
    for group in (targs, params.values()):
        for x in group:
            if type(x) is list or type(x) is tuple:
                yield from x
            else:
                yield x


def run(row, targs: tuple, params: dict, out, inplace):
    """The op below autograd: the innermost mode first (with itself switched off), then
    the dispatch subclasses among the arguments; ``NotImplemented`` passes to the next."""
    func = _handle(row, inplace is not None)
    if not _stack.modes and out is None and _row_handlers and _row_form(row):
        owner = _sole_subclass(targs, params)
        handler = _row_handlers.get(owner)
        if handler is not None and not (_rules and (func.name, owner) in _rules):
            result = handler(func, targs, params)
            if result is not NotImplemented:
                return result
    if (
        row.kind != "tensor_op"
        and out is None
        and row.n_inputs != "star"
        and _defaulted(row, params)
    ):
        args, kwargs = targs, {}  # user_call's answer, without building it
    else:
        _, args, kwargs = user_call(row, targs, params, out, inplace)
    types, subclasses = _types((targs, params))
    if _stack.modes:
        mode = _stack.modes[-1]
        saved, outer_snapshot = _stack.modes, _stack.snapshot
        _stack.modes, _stack.snapshot = saved[:-1], saved
        try:
            rule = _rules.get((func.name, type(mode))) if _rules else None
            if rule is not None:
                result = rule(mode, func, types, args, kwargs)
            else:
                result = mode.__tensorplay_dispatch__(func, types, args, kwargs)
        finally:
            _stack.modes, _stack.snapshot = saved, outer_snapshot
        if result is not NotImplemented:
            return result
    for cls in subclasses:
        rule = _rules.get((func.name, cls)) if _rules else None
        if rule is not None:
            result = rule(cls, func, types, args, kwargs)
        else:
            result = cls.__tensorplay_dispatch__(func, types, args, kwargs)
        if result is not NotImplemented:
            return result
    raise TypeError(
        f"no implementation found for {func!r} on types that implement "
        f"__tensorplay_dispatch__: {[c.__name__ for c in subclasses]} (every handler, and "
        "the active dispatch mode if any, returned NotImplemented)"
    )


def _handle(row, inplace: bool) -> OpHandle:
    """The row's ``func`` (one per row and form: handlers may compare and keep it)."""
    key = (row, inplace)
    handle = _op_handles.get(key)
    if handle is None:
        handle = _op_handles[key] = OpHandle(row, inplace)
    return handle


_op_handles: dict = {}


def _sole_subclass(targs: tuple, params: dict):
    """The one dispatch subclass among the tensor inputs (one level into lists), or None
    when there are several, or another Tensor subclass among the other parameters (the
    full route orders those)."""
    found = None
    for x in targs:
        t = type(x)
        if t is Tensor:
            continue
        if t is list or t is tuple:
            for y in x:
                u = type(y)
                if u is not Tensor and _handles(u):
                    if found is not None and found is not u:
                        return None
                    found = u
        elif _handles(t):
            if found is not None and found is not t:
                return None
            found = t
    for v in params.values():
        for y in v if type(v) is list or type(v) is tuple else (v,):
            if isinstance(y, Tensor) and type(y) is not Tensor and type(y) is not found:
                return None
    return found


@functools.cache
def _row_form(row) -> bool:
    """``row.fn(*targs, **params)`` repeats a call of ``row`` (the form row handlers get):
    a row of the op table without a ``*name`` parameter."""
    return (
        row.kind != "tensor_op"
        and row.n_inputs != "star"
        and "*" not in row.params.replace("*,", "")
    )


# dispatch subclass -> handler(func, targs, params): register_row_handler
_row_handlers: dict = {}


def register_row_handler(cls: type, handler) -> None:
    """Let ``handler(func, targs, params)`` stand for ``cls.__tensorplay_dispatch__`` when
    no dispatch mode is active, ``cls`` is the only dispatch subclass among a call's
    arguments, no ``register_dispatch_rule`` rule covers the op, and the op's public
    function takes every parameter by name: ``targs`` are the tensor inputs in order and
    ``params`` every other parameter by name, defaults included (``func(*targs, **params)``
    repeats the call), so the user's call is not rebuilt first. ``NotImplemented`` falls
    back to ``__tensorplay_dispatch__``. For a subclass whose handler reads both forms
    alike (vmap's ``BatchedTensor``)."""
    if getattr(cls, "__tensorplay_dispatch__", None) is None:
        raise TypeError(
            f"register_row_handler(cls): a Tensor subclass defining __tensorplay_dispatch__, "
            f"got {cls!r}"
        )
    _row_handlers[cls] = handler


# (op name, mode class or subclass) -> rule(mode_or_class, func, types, args, kwargs): what
# that class does for that op instead of its __tensorplay_dispatch__ (register_dispatch_rule)
_rules: dict = {}


def register_dispatch_rule(op_name: str, owner: type, rule) -> Callable[[], None]:
    """Make ``owner`` (a dispatch mode class or a ``__tensorplay_dispatch__`` subclass)
    handle op ``op_name`` (``"mul"``, ``"mylib::scale"``) with ``rule(mode_or_class, func,
    types, args, kwargs)`` instead of its ``__tensorplay_dispatch__``: how a library teaches
    a class it does not own about its op (PyTorch's ``register_torch_dispatch``). Returns a
    function that removes the rule."""
    if not isinstance(op_name, str) or not op_name:
        raise TypeError(f"register_dispatch_rule(op_name): a non-empty str, got {op_name!r}")
    if not isinstance(owner, type) or getattr(owner, "__tensorplay_dispatch__", None) is None:
        raise TypeError(
            f"register_dispatch_rule(owner): a class defining __tensorplay_dispatch__ (a "
            f"TensorPlayDispatchMode or a Tensor subclass), got {owner!r}"
        )
    if not callable(rule):
        raise TypeError(f"register_dispatch_rule(rule): must be callable, got {rule!r}")
    key = (op_name, owner)
    _rules[key] = rule

    def remove() -> None:
        if _rules.get(key) is rule:
            del _rules[key]

    return remove


@contextlib.contextmanager
def enable_reentrant_dispatch():
    """Inside a dispatch mode's handler, make the calls it makes reach that mode again (the
    handler normally runs with itself popped): PyTorch's ``enable_reentrant_dispatch``.
    Outside a handler it changes nothing."""
    snapshot = _stack.snapshot
    if snapshot is None:
        yield
        return
    # (run() pops the handler's mode without unblocking the fast-path gate: no gate change)
    saved = _stack.modes
    _stack.modes = snapshot
    try:
        yield
    finally:
        _stack.modes = saved


def _init_subclass(cls, **kwargs):
    """``Tensor.__init_subclass__``: a subclass defining ``__tensorplay_dispatch__`` (a
    classmethod, as in PyTorch) switches the subclass check on; unless it defines its own
    ``__tensorplay_function__`` it opts out of the function-level conversion, which would
    turn plain results into wrappers with nothing inside (PyTorch's docs ask wrapper
    subclasses for the same ``_disabled_torch_function_impl``)."""
    global _subclasses
    super(Tensor, cls).__init_subclass__(**kwargs)
    handler = cls.__dict__.get("__tensorplay_dispatch__")
    if handler is None:
        return
    if not isinstance(handler, classmethod):
        raise TypeError(
            f"{cls.__name__}.__tensorplay_dispatch__ must be a classmethod "
            "(@classmethod def __tensorplay_dispatch__(cls, func, types, args=(), kwargs=None))"
        )
    if "__tensorplay_function__" not in cls.__dict__:
        cls.__tensorplay_function__ = classmethod(disabled_tensorplay_function_impl)
    _subclasses = True


def _make_wrapper_subclass(
    cls, size, strides=None, storage_offset=0, dtype=None, device=None, requires_grad=False
):
    """A ``cls`` instance with the given metadata and no memory of its own, for a wrapper
    subclass whose ``__tensorplay_dispatch__`` computes on the tensors it wraps (PyTorch's
    ``Tensor._make_wrapper_subclass``). Reading its data (``numpy()``, printing values)
    raises; ops reach the handler."""
    if not (isinstance(cls, type) and issubclass(cls, Tensor) and cls is not Tensor):
        raise TypeError(f"_make_wrapper_subclass(cls): cls must subclass Tensor, got {cls!r}")
    shape = tuple(int(n) for n in size)
    dt = dtype if dtype is not None else get_default_dtype()
    dev = _device.canonical(device) if device is not None else _device.CPU
    t = new_wrapper(cls, shape, dt, dev)
    if strides is not None:
        if len(strides) != len(shape):
            raise ValueError(
                f"_make_wrapper_subclass(): strides {tuple(strides)} do not match size {shape}"
            )
        t._stride = tuple(int(s) for s in strides)
    if storage_offset:
        t._offset = int(storage_offset)
    if requires_grad:
        t.requires_grad = True
    return t


def new_wrapper(cls, shape: tuple, dtype, device) -> Tensor:
    """A ``cls`` instance of ``shape`` (a tuple of ints), ``dtype`` and ``device`` with no
    memory: ``_make_wrapper_subclass`` without its checks, for a subclass that makes a
    wrapper per op (vmap's ``BatchedTensor``)."""
    storage = Storage(None, 0, math.prod(shape) * dtype.itemsize, META)  # its version counter
    return new_tensor(cls, None, storage, 0, shape, None, dtype, device)


def flat(value):
    """The leaves of ``value``: the items of lists and tuples and the values of dicts, at any
    depth; anything else is a leaf."""
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from flat(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from flat(v)
    else:
        yield value


Tensor.__init_subclass__ = classmethod(_init_subclass)
Tensor._make_wrapper_subclass = staticmethod(_make_wrapper_subclass)


overrides._reentrant_dispatch = enable_reentrant_dispatch  # tp.overrides' public name
_dispatch.register_dispatch_modes(sys.modules[__name__])  # execute() consults this module
