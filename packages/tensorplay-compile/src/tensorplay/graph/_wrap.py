"""``wrap``: record a free function as one ``call_function`` node instead of tracing it.

A wrapped function called with traced values is a leaf of the graph: its body does not
run during capture except on meta tensors, for shapes. That is how a helper with Python
control flow on tensor values (which cannot be traced) stays in a captured graph.
"""

from __future__ import annotations

import builtins
import functools
import sys
from collections.abc import Callable
from typing import Any

from tensorplay import capture
from tensorplay.graph._tracer import Tracer

__all__ = ["wrap"]


def wrap(fn_or_name: Callable | str) -> Callable:
    """Make a free function a leaf of traced graphs.

    ``@wrap`` (or ``f = wrap(f)``) returns a wrapper that records ``f`` as one
    ``call_function`` node when a traced value reaches it and calls ``f`` otherwise.
    ``wrap("f")``, at the top level of a module (as with ``torch.fx.wrap``), rebinds the
    module's global ``f`` (or a builtin of that name) to that wrapper and returns it.

    Example::

        @wrap
        def clip_positive(x):
            return x if float(x.min()) >= 0 else x.clamp(min=0)

        gm = symbolic_trace(lambda x: clip_positive(x) * 2)  # one clip_positive node

    Raises:
        RuntimeError: ``wrap("f")`` called inside a function.
        NameError: ``wrap("f")`` where the module has no ``f`` yet.
        TypeError: neither a callable nor a name.
    """
    if isinstance(fn_or_name, str):
        return _wrap_global(fn_or_name, sys._getframe(1))
    if not callable(fn_or_name):
        raise TypeError(
            f"wrap(fn_or_name): expected a function or a function's name, got "
            f"{type(fn_or_name).__name__}"
        )
    return _leaf(fn_or_name)


def _leaf(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def leaf(*args: Any, **kwargs: Any) -> Any:
        tracer = capture.current_tracer()
        if tracer is None or not capture.contains_proxy(args, kwargs):
            return fn(*args, **kwargs)
        if isinstance(tracer, Tracer):  # a plain node: not a library op's fusion barrier
            return tracer.record(fn, args, kwargs)
        return capture.capture_call(fn, args, kwargs)

    return leaf


def _wrap_global(name: str, frame: Any) -> Callable:
    if frame.f_code.co_name != "<module>":
        raise RuntimeError(
            f"wrap({name!r}) must be called at the top level of a module, as torch.fx.wrap; "
            f"inside a function, decorate the function with @wrap or write {name} = wrap({name})"
        )
    scope = frame.f_globals
    fn = scope.get(name, getattr(builtins, name, None))
    if fn is None:
        raise NameError(
            f"wrap({name!r}): module {scope.get('__name__')!r} has no function {name!r} yet; "
            "call wrap after defining it, or decorate the definition with @wrap"
        )
    scope[name] = _leaf(fn)
    return scope[name]
