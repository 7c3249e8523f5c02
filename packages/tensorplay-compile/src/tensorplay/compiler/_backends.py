"""The backend registry: built-ins, ``register_backend`` and entry-point plugins.

A backend is ``backend(graph_module, example_inputs, **options) -> callable``; the
callable takes the graph's inputs and returns its output. It may carry
``report_rows`` (a list of ``ReportRow``) and ``_tensorplay_codegen`` /
``_tensorplay_target`` markers; ``tp.compile`` adds defaults where it does not.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from tensorplay.compiler._barriers import barrier_kind
from tensorplay.compiler._report import ReportRow
from tensorplay.compiler._tvm_backend import compile_graph
from tensorplay.compiler._tvm_env import tvm_status
from tensorplay.graph import GraphModule, Interpreter

__all__ = [
    "ENTRY_POINT_GROUP",
    "InvalidBackend",
    "default_backend",
    "list_backends",
    "lookup_backend",
    "register_backend",
    "validate_options",
]

ENTRY_POINT_GROUP = "tensorplay.compiler_backends"
_REGISTRY: dict[str, Callable] = {}
_entry_points_loaded = False
_default_noted = False  # the note that the default runs as "eager" is given once per process


class InvalidBackend(ValueError):
    """An unknown backend name (the message suggests the closest registered ones)."""


def register_backend(name: str | None = None, *, override: bool = False) -> Callable:
    """Decorator registering ``fn`` as backend ``name`` (default: ``fn.__name__``).

    ``@register_backend("mine")`` then ``tp.compile(f, backend="mine")``. Registering a
    taken name raises ``ValueError`` unless ``override=True``.
    """
    if callable(name):  # used bare: @register_backend
        return register_backend()(name)

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"register_backend: a backend must be callable, got {fn!r}")
        key = name or fn.__name__
        if key in _REGISTRY and not override and _REGISTRY[key] is not fn:
            raise ValueError(
                f"backend {key!r} is already registered; pass override=True to replace it"
            )
        _REGISTRY[key] = fn
        return fn

    return decorator


def _load_entry_points() -> None:
    """Register the plugins of the ``tensorplay.compiler_backends`` entry-point group once."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _REGISTRY:
            _REGISTRY[ep.name] = _LazyEntryPoint(ep)


class _LazyEntryPoint:
    """A plugin backend imported when first used (listing backends imports nothing)."""

    def __init__(self, ep: importlib.metadata.EntryPoint) -> None:
        self.ep = ep
        self._fn: Callable | None = None

    def load(self) -> Callable:
        if self._fn is None:
            self._fn = self.ep.load()
        return self._fn

    def __call__(self, gm: GraphModule, example_inputs: list, **options: Any) -> Callable:
        return self.load()(gm, example_inputs, **options)


def list_backends() -> list[str]:
    """Names of the registered backends (built-ins, registered, entry points), sorted."""
    _load_entry_points()
    return sorted(_REGISTRY)


def lookup_backend(name: str | Callable) -> Callable:
    """The backend called ``name`` (a callable is returned as is).

    Raises ``InvalidBackend`` (a ``ValueError``) with "did you mean" suggestions.
    """
    if callable(name):
        return name
    if not isinstance(name, str):
        raise TypeError(f"backend must be a name or a callable, got {type(name).__name__}")
    _load_entry_points()
    fn = _REGISTRY.get(name)
    if fn is None:
        close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise InvalidBackend(
            f"unknown backend {name!r}.{hint} Registered backends: {list_backends()}; add one "
            f"with tensorplay.compiler.register_backend or the {ENTRY_POINT_GROUP!r} entry point"
        )
    return fn


def default_backend(*, stacklevel: int = 1) -> str:
    """The backend ``tp.compile`` uses when none is named: ``"tvm"`` where it can run.

    Elsewhere (apache-tvm not installed, an unsupported version, tilelang's bundled tvm)
    it is ``"eager"``, and the first such choice in a process warns once
    (``UserWarning``) with the reason and what installing the TVM extra would give.
    Imports tvm when it is installed. ``stacklevel`` 1 attributes the warning to the caller.
    """
    global _default_noted
    status = tvm_status()
    if status:
        return "tvm"
    if not _default_noted:
        _default_noted = True
        warnings.warn(
            "tp.compile: the default backend runs as 'eager' (the graph interpreter, no "
            f"fused kernels) because {status.reason}. {status.fix} That gives the 'tvm' "
            "backend, which compiles chains of pointwise ops into fused kernels. Pass "
            "backend='eager' to choose eager explicitly and silence this note.",
            UserWarning,
            stacklevel=stacklevel + 1,
        )
    return "eager"


def validate_options(backend: Callable, name: str, options: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming any option key ``backend`` does not accept.

    A backend declares its options as keyword parameters; one taking ``**options`` checks
    them itself.
    """
    fn = backend.load() if isinstance(backend, _LazyEntryPoint) else backend
    accepted = getattr(fn, "options", None)
    if accepted is None:
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is p.VAR_KEYWORD for p in params):
            return
        accepted = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    for key in options:
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"tp.compile: unknown option {key!r} for backend {name!r}{hint}; "
                f"accepted options: {sorted(accepted)}"
            )


def interpreter_rows(gm: GraphModule, reason: str) -> list[ReportRow]:
    """Every node run by the interpreter, saying ``reason`` (library ops keep their route)."""
    rows = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        kind = barrier_kind(node)
        rows.append(ReportRow(node.name, node.op_name, kind or "interpreter", reason))
    return rows


@register_backend("eager")
def eager(gm: GraphModule, example_inputs: list) -> Callable:
    """Run the captured graph through the ``Interpreter`` (the reference path)."""
    rows = interpreter_rows(gm, "backend 'eager' lowers nothing: every node runs eagerly")

    def run(*args: Any) -> Any:
        return Interpreter(gm).run(*args)

    run.report_rows = rows  # type: ignore[attr-defined]
    run._tensorplay_codegen = "interpreter"  # type: ignore[attr-defined]
    return run


@register_backend("tvm")
def tvm(
    gm: GraphModule,
    example_inputs: list,
    *,
    target: str | dict | None = None,
    parallel: bool = True,
    num_threads: int | None = None,
    fast_math: bool = True,
    vector_lanes: int | None = None,
) -> Callable:
    """Lower maximal pointwise regions to TVM kernels (needs apache-tvm); see docs/compile.md.

    Options: ``target`` (``"llvm"`` for CPU inputs, ``"cuda"`` for CUDA inputs by default;
    a string or a TVM target dict), ``parallel`` (split CPU loops over threads),
    ``num_threads`` (TVM's CPU thread pool size; default: all cores), ``fast_math``
    (vectorisable polynomial exp/tanh/sigmoid/gelu in float32), ``vector_lanes``.
    """
    return compile_graph(
        gm,
        example_inputs,
        target=target,
        parallel=parallel,
        num_threads=num_threads,
        fast_math=fast_math,
        vector_lanes=vector_lanes,
    )
