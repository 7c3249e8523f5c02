"""``tp.compile``: capture on first call, compile per specialisation, cache, report.

A call is keyed by its *specialisation*: for every tensor argument its shape (or, with
``dynamic=True``, only its rank and which dims are 0 or 1), dtype, device and
``requires_grad``; every other argument by value; grad mode, the default dtype and the
autocast state; and the guards on the globals and closure values ``fn`` reads (see
``_guards``). A key seen before reuses its artifact; a new one traces ``fn`` again and
asks the backend for a new artifact, up to ``config.recompile_limit`` artifacts, after
which new keys run ``fn`` eagerly (with a warning).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any

import tensorplay as tp
from tensorplay.capture import GraphCaptureError
from tensorplay.compiler import _cudagraphs
from tensorplay.compiler._autocast import autocast_state, run_recording_dtypes
from tensorplay.compiler._backends import default_backend, lookup_backend, validate_options
from tensorplay.compiler._guards import Guards, collect
from tensorplay.compiler._report import Report, ReportRow
from tensorplay.graph import Graph, GraphModule, Tracer, propagate_shapes

__all__ = ["CompiledFunction", "compile", "config"]

logger = logging.getLogger("tensorplay.compiler")
if "compile" in os.environ.get("TENSORPLAY_LOG", "").split(","):
    logger.addHandler(logging.StreamHandler())
    logger.setLevel(logging.INFO)


@dataclasses.dataclass
class Config:
    """Process-wide settings of ``tp.compile``."""

    recompile_limit: int = 8  # artifacts per compiled function before falling back to eager


config = Config()
_NOT_RUN = object()  # _build's result when building did not already run the call


class Artifact:
    """What one specialisation compiled to: a callable with its report and markers."""

    def __init__(
        self,
        fn: Callable,
        report: Report,
        *,
        graph_module: GraphModule | None,
        codegen: str,
        target: str | None = None,
        shape_specialized: bool = False,
    ) -> None:
        self.fn = fn
        self.report = report
        self.graph_module = graph_module
        self._tensorplay_codegen = codegen
        self._tensorplay_target = target
        self.shape_specialized = shape_specialized
        self.cudagraph: Callable | None = None  # mode="reduce-overhead": its graph replay
        # the values its guards summarise by id, kept alive so no id is reused while cached
        self.guarded: list = []

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        target = f", target={self._tensorplay_target}" if self._tensorplay_target else ""
        return f"<Artifact codegen={self._tensorplay_codegen}{target}>"


def compile(  # noqa: A001 - the public name is tp.compile
    fn: Callable | None = None,
    *,
    backend: str | Callable | None = None,
    mode: str | None = None,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    options: dict[str, Any] | None = None,
    strict: bool = False,
) -> Any:
    """Compile ``fn`` lazily: the first call captures it and builds a backend artifact.

    Args:
        fn: the function (or use ``@tp.compile(...)`` as a decorator).
        backend: a registered name (``"tvm"``, ``"eager"``, plugins) or a callable
            ``backend(graph_module, example_inputs, **options)``. Default: ``"tvm"`` where
            it can run (a supported apache-tvm is installed), else ``"eager"`` with a
            one-time ``UserWarning`` saying why; chosen at the first call.
        mode: ``"default"`` (or None) or ``"reduce-overhead"``: calls on CUDA tensors
            replay CUDA graphs of the artifact (forward and backward when an input
            requires grad), built at the second call of a specialisation; the outputs are
            static and overwritten by the next call. A region that synchronises with the
            host raises an error naming the call. CPU calls are not affected.
        dynamic: ``True`` keys the cache on ranks instead of shapes, so one artifact (one
            symbolic-shape kernel per region) serves every size; ``None``/``False``
            specialise on shapes.
        fullgraph: raise ``GraphCaptureError`` when ``fn`` cannot be captured instead of
            running it eagerly.
        options: backend options; an unknown key raises ``ValueError`` naming it. With
            the default backend they are the ``"tvm"`` backend's, unused under ``"eager"``.
            One key belongs to ``tp.compile`` itself, whatever the backend: ``"passes"``, a
            list of graph passes run in order on each captured graph before the backend
            sees it. A pass is ``pass_(gm: GraphModule) -> GraphModule | Graph | None``: it
            returns a new module or graph, or edits ``gm`` in place and returns None. The
            graph is linted after each pass, then recompiled and its ``meta``
            (shapes) propagated again.
        strict: any fallback (a node the backend could not lower, a capture failure, the
            recompile limit) raises ``RuntimeError`` naming the node and the reason.

    Example::

        @tp.compile(backend="eager")
        def f(x):
            return (x * 2).exp()

    Raises:
        InvalidBackend: unknown backend name (with suggestions).
        ValueError: unknown option.
    """
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"tp.compile: options must be a dict, got {type(options).__name__}")
    if mode is not None and mode not in _cudagraphs.MODES:
        raise ValueError(
            f"tp.compile: mode must be one of {', '.join(map(repr, _cudagraphs.MODES))}, "
            f"got {mode!r}"
        )
    options = dict(options or {})
    passes = _check_passes(options.pop("passes", ()))
    if backend is None:
        # chosen at the first call: finding out whether TVM can run imports it (seconds)
        backend_fn, name = None, "default"
        validate_options(lookup_backend("tvm"), "tvm", options)
    else:
        backend_fn = lookup_backend(backend)
        name = backend if isinstance(backend, str) else getattr(backend, "__name__", "custom")
        validate_options(backend_fn, name, options)
    settings = dict(
        backend=backend_fn,
        backend_name=name,
        mode=mode or "default",
        dynamic=bool(dynamic),
        fullgraph=fullgraph,
        options=options,
        passes=passes,
        strict=strict,
    )
    if fn is None:
        return lambda f: CompiledFunction(f, **settings)
    if not callable(fn):
        raise TypeError(f"tp.compile: fn must be callable, got {type(fn).__name__}")
    return CompiledFunction(fn, **settings)


class CompiledFunction:
    """The callable ``tp.compile`` returns; ``_tensorplay_cache`` maps keys to artifacts."""

    def __init__(
        self,
        fn: Callable,
        *,
        backend: Callable | None,
        backend_name: str,
        mode: str,
        dynamic: bool,
        fullgraph: bool,
        options: dict[str, Any],
        passes: list[Callable],
        strict: bool,
    ) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._signature = inspect.signature(fn)
        self._backend = backend
        self.backend_name = backend_name
        self.mode = mode
        self.dynamic = dynamic
        self.fullgraph = fullgraph
        self.options = options
        self.passes = passes
        self.strict = strict
        self._tensorplay_cache: dict[tuple, Artifact] = {}
        self._last: Artifact | None = None
        self._limit_warned = False
        self._capture_warned = False
        # collected at the first miss (a decorator runs before the globals it reads exist)
        self._guards = Guards([])

    # ---- calling -------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        names, tensors, constants, spec = self._specialise(args, kwargs)
        artifact = self._lookup(spec, tensors)
        if artifact is None:
            # a helper function may have been replaced: read which globals to guard again
            self._guards = collect(self._fn)
            artifact = self._lookup(spec, tensors)
        result = _NOT_RUN
        if artifact is None:
            if len(self._tensorplay_cache) >= config.recompile_limit:
                return self._over_limit(args, kwargs)
            artifact, result = self._build(names, tensors, constants, spec)
        self._last = artifact
        if result is not _NOT_RUN:
            return result
        if artifact.graph_module is None:  # the capture failed: fn itself runs
            return self._fn(*args, **kwargs)
        if self.mode == "reduce-overhead" and _cudagraphs.on_cuda(tensors):
            if artifact.cudagraph is None:
                artifact.cudagraph = _cudagraphs.graphed_runner(artifact, tensors)
            return artifact.cudagraph(*tensors)
        return artifact(*tensors)

    def _key(self, spec: tuple) -> tuple:
        return spec + (("guards", self._guards.snapshot()),)

    def _lookup(self, spec: tuple, tensors: list) -> Artifact | None:
        key = self._key(spec)
        artifact = self._tensorplay_cache.get(key)
        if artifact is None and self.dynamic:
            # a graph that read shapes while tracing is valid for those shapes only
            artifact = self._tensorplay_cache.get(key + (_shapes(tensors),))
        return artifact

    def report(self) -> Report:
        """How the most recent call's specialisation runs: one row per captured node."""
        if self._last is None:
            raise RuntimeError(
                f"report() of {self.__name__}: nothing is compiled yet; call the function first"
            )
        return self._last.report

    def _specialise(self, args: tuple, kwargs: dict) -> tuple:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}(): {e}") from None
        bound.apply_defaults()
        names, tensors, constants = [], [], {}
        # what changes the traced graph besides the arguments
        key: list = [tp.is_grad_enabled(), tp.get_default_dtype(), autocast_state()]
        for pname, value in bound.arguments.items():
            kind = self._signature.parameters[pname].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                items = [(f"{pname}_{i}", v) for i, v in enumerate(value)]
            elif kind is inspect.Parameter.VAR_KEYWORD:
                items = list(value.items())
            else:
                items = [(pname, value)]
            for name, v in items:
                if isinstance(v, tp.Tensor):
                    names.append(name)
                    tensors.append(v)
                    key.append((name, self._shape_key(v), v.dtype, v.device, v.requires_grad))
                else:
                    try:
                        hash(v)
                    except TypeError:
                        raise TypeError(
                            f"{self.__name__}(): argument {name!r} of type {type(v).__name__} is "
                            "not hashable; a compiled function specialises on its non-tensor "
                            "arguments, so pass tensors, numbers, strings or tuples"
                        ) from None
                    constants[name] = v
                    key.append((name, type(v), v))
        return names, tensors, constants, tuple(key)

    def _shape_key(self, t: tp.Tensor) -> tuple:
        if self.dynamic:  # rank and the broadcast-relevant sizes only
            return tuple(d if d in (0, 1) else -1 for d in t.shape)
        return tuple(t.shape)

    # ---- building ------------------------------------------------------------------------

    def _build(self, names: list, tensors: list, constants: dict, spec: tuple) -> tuple:
        """``(artifact, result)``; ``result`` is ``_NOT_RUN`` unless building ran the call."""
        if self._backend is None:  # the default: warns from the user's call when not TVM
            self.backend_name = default_backend(stacklevel=3)
            self._backend = lookup_backend(self.backend_name)
            if self.backend_name != "tvm":
                self.options = {}
        try:
            gm, shape_specialized = self._trace(names, tensors, constants)
        except GraphCaptureError as e:
            key = self._key(spec)
            if self.fullgraph or self.strict:
                raise
            self._warn_capture_failed(e)
            artifact = self._eager_artifact(key, f"capture failed: {e}")
            artifact.guarded = self._guards.values()
            self._tensorplay_cache[key] = artifact
            return artifact, _NOT_RUN
        # NOTE: guarded values are read after tracing: Python state the function changed
        # while traced (a list counting traces) is what the graph was built with
        key, guarded = self._key(spec), self._guards.values()
        if self.passes:
            gm = self._run_passes(gm)
        result = _NOT_RUN
        if autocast_state():  # traced dtypes are pre-autocast: take eager's (see _autocast)
            result = run_recording_dtypes(gm, tensors)
        compiled = self._backend(gm, list(tensors), **self.options)
        rows = getattr(compiled, "report_rows", None)
        if rows is None:  # a third-party backend: every node is its own route
            rows = [
                ReportRow(n.name, n.op_name, self.backend_name)
                for n in gm.graph.nodes
                if n.op in ("call_function", "call_method", "call_module")
            ]
        report = Report(rows, backend=self.backend_name, key=key)
        self._check_fallbacks(report)
        artifact = Artifact(
            compiled,
            report,
            graph_module=gm,
            codegen=getattr(compiled, "_tensorplay_codegen", self.backend_name),
            target=getattr(compiled, "_tensorplay_target", None),
            shape_specialized=shape_specialized,
        )
        artifact.guarded = guarded
        if self.dynamic and shape_specialized:
            key = key + (_shapes(tensors),)
        self._tensorplay_cache[key] = artifact
        return artifact, result

    def _trace(self, names: list, tensors: list, constants: dict) -> tuple[GraphModule, bool]:
        """Capture ``fn`` with tensors as placeholders and other arguments baked in."""
        sig = self._signature
        tracer = Tracer()

        def flat(*proxies: Any) -> Any:
            values = dict(zip(names, proxies), **constants)
            args, kwargs = [], {}
            for pname, p in sig.parameters.items():
                if p.kind is p.VAR_POSITIONAL:
                    prefix = f"{pname}_"
                    args.extend(
                        values[k]
                        for k in sorted(
                            (
                                k
                                for k in values
                                if k.startswith(prefix) and k[len(prefix) :].isdigit()
                            ),
                            key=lambda k: int(k[len(prefix) :]),
                        )
                    )
                elif p.kind is p.VAR_KEYWORD:
                    kwargs.update({k: v for k, v in values.items() if k not in sig.parameters})
                elif p.kind is p.KEYWORD_ONLY:
                    kwargs[pname] = values[pname]
                else:
                    args.append(values[pname])
            return self._fn(*args, **kwargs)

        gm = tracer.trace_inputs(flat, dict(zip(names, tensors)))
        # backends read this: symbolic-shape kernels, unless the code read a shape
        gm.dynamic = self.dynamic and not tracer.shape_specialized
        return gm, tracer.shape_specialized

    def _run_passes(self, gm: GraphModule) -> GraphModule:
        """``gm`` after every pass of ``options["passes"]``, linted, recompiled, re-shaped."""
        dynamic = getattr(gm, "dynamic", False)
        for pass_ in self.passes:
            name = getattr(pass_, "__name__", repr(pass_))
            result = pass_(gm)
            if isinstance(result, Graph):
                result = GraphModule(result, gm)
            elif result is None:
                result = gm
            elif not isinstance(result, GraphModule):
                raise TypeError(
                    f"tp.compile({self.__name__}): pass {name} returned "
                    f"{type(result).__name__}; a pass returns a GraphModule, a Graph, or None "
                    "after editing the GraphModule it was given in place"
                )
            try:
                result.graph.lint()
            except RuntimeError as e:
                raise RuntimeError(
                    f"tp.compile({self.__name__}): pass {name} left a malformed graph: {e}"
                ) from None
            gm = result
        gm.recompile()
        propagate_shapes(gm)
        gm.dynamic = dynamic
        return gm

    def _warn_capture_failed(self, error: GraphCaptureError) -> None:
        """Once per compiled function: capture failed, so the function runs eagerly."""
        if self._capture_warned:
            return
        self._capture_warned = True
        name = self.__name__
        warnings.warn(
            f"tp.compile({name}) runs {name} eagerly, not compiled (graph capture failed; "
            f"{name}.report() says why, fullgraph=True raises instead): {error}",
            RuntimeWarning,
            stacklevel=4,
        )

    def _eager_artifact(self, key: tuple, reason: str) -> Artifact:
        name = self.__name__
        row = ReportRow(name, "<function>", "eager", reason=reason, fallback=True)
        logger.info("tp.compile(%s): running eagerly: %s", name, reason)
        report = Report([row], backend=self.backend_name, key=key)
        return Artifact(self._fn, report, graph_module=None, codegen="eager")

    def _check_fallbacks(self, report: Report) -> None:
        for row in report.fallbacks:
            logger.info(
                "tp.compile(%s): node %s (%s) runs on %s: %s",
                self.__name__,
                row.node,
                row.op,
                row.route,
                row.reason,
            )
        if self.strict and report.fallbacks:
            details = "; ".join(f"{r.node} ({r.op}): {r.reason}" for r in report.fallbacks)
            raise RuntimeError(
                f"tp.compile(strict=True): {len(report.fallbacks)} node(s) of "
                f"{self.__name__} would not be lowered by backend {self.backend_name!r}: "
                f"{details}"
            )

    def _over_limit(self, args: tuple, kwargs: dict) -> Any:
        msg = (
            f"tp.compile({self.__name__}): recompile limit of {config.recompile_limit} "
            "specialisations reached; running new ones eagerly. Use dynamic=True for varying "
            "shapes, or raise tensorplay.compiler.config.recompile_limit"
        )
        if self.strict:
            raise RuntimeError(msg)
        if not self._limit_warned:
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            logger.info(msg)
            self._limit_warned = True
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<compiled {self.__name__} backend={self.backend_name!r}>"


def _check_passes(passes: Any) -> list[Callable]:
    """``options["passes"]`` as a list of callables, or ``TypeError`` naming the bad one."""
    if not isinstance(passes, (list, tuple)):
        raise TypeError(
            f"tp.compile: options['passes'] must be a list of passes, got {type(passes).__name__}"
        )
    for i, pass_ in enumerate(passes):
        if not callable(pass_):
            raise TypeError(
                f"tp.compile: options['passes'][{i}] is a {type(pass_).__name__}, not a pass; "
                "a pass is a function taking a GraphModule and returning a GraphModule, "
                "a Graph, or None (after editing it in place)"
            )
    return list(passes)


def _shapes(tensors: list) -> tuple:
    return tuple(tuple(t.shape) for t in tensors)
