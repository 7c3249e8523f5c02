"""``tensorplay.profiler``: per-op timing, user spans and Chrome traces (a subset of
``torch.profiler``).

>>> import tensorplay as tp
>>> with tp.profiler.profile() as prof:
...     y = tp.ones(2, 2) + tp.ones(2, 2)
>>> [a.key for a in prof.key_averages()]
['add']

How it works: while a ``profile`` is active, a layer sees every call
(``_dispatch.push_layer``, which also keeps the fast path aside), so every op call becomes one
event named after its op-table row (``add``, ``matmul``; in-place calls get a trailing
underscore: ``add_``). Outside ``profile`` the layer is not installed at all: ops pay
nothing beyond the existing ``state.plain`` check, and ``record_function`` / ``span``
cost one global read.

Times come from ``time.perf_counter_ns``; an event's *self* time is its total time minus
the total time of the events directly nested in it (ops inside a ``record_function``,
a backward formula's ops, the ops a custom op runs).

Choices (documented behaviour):

* Nested profilers are not supported: entering a ``profile`` while another one is
  active raises ``RuntimeError``.
* Threads: ops and spans run by *any* thread while the profiler is active are recorded,
  each with its thread id (``threading.get_native_id()``); nesting and self time are
  tracked per thread. Spans still open when the profiler stops are dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
import traceback

from tensorplay import _dispatch
from tensorplay._tensor import Tensor

__all__ = [
    "profile",
    "record_function",
    "span",
    "FunctionEvent",
    "FunctionEventAvg",
    "EventList",
    "ProfilerActivity",
    "is_profiling",
]


class ProfilerActivity:
    """torch-compatible activity names (only CPU timing is collected)."""

    CPU = "CPU"
    CUDA = "CUDA"


_active: profile | None = None  # the running profiler (at most one)
_lock = threading.Lock()


@dataclasses.dataclass(eq=False)
class FunctionEvent:
    """One recorded span: an op call, a ``record_function`` block or a ``span``."""

    name: str
    cat: str  # "cpu_op" | "user_annotation"
    start_ns: int
    thread: int  # native thread id
    input_shapes: list | None = None
    stack: list | None = None
    end_ns: int = 0
    depth: int = 0
    children_ns: int = 0  # total time of the directly nested events

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        """Total (inclusive) time in µs."""
        return (self.end_ns - self.start_ns) / 1000.0

    @property
    def self_cpu_time_total(self) -> float:
        """Time in µs not spent in nested events."""
        return max(0, self.end_ns - self.start_ns - self.children_ns) / 1000.0


@dataclasses.dataclass(eq=False)
class FunctionEventAvg:
    """Events of one key (name, or name and input shapes) summed up."""

    key: str
    count: int = 0
    cpu_time_total: float = 0.0  # µs
    self_cpu_time_total: float = 0.0  # µs
    input_shapes: list | None = None

    @property
    def cpu_time(self) -> float:
        """Average total time per call (µs)."""
        return self.cpu_time_total / self.count if self.count else 0.0

    @property
    def self_cpu_time(self) -> float:
        """Average self time per call (µs)."""
        return self.self_cpu_time_total / self.count if self.count else 0.0


_SORT_KEYS = {
    "self_cpu_time_total": lambda a: a.self_cpu_time_total,
    "cpu_time_total": lambda a: a.cpu_time_total,
    "cpu_time": lambda a: a.cpu_time,
    "self_cpu_time": lambda a: a.self_cpu_time,
    "count": lambda a: a.count,
}


def _fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class EventList(list):
    """A list of ``FunctionEventAvg`` (``key_averages()``) with ``table()``."""

    def table(
        self,
        sort_by: str | None = "self_cpu_time_total",
        row_limit: int = 100,
        max_name_column_width: int = 55,
        header: str | None = None,
    ) -> str:
        """A text table like torch's, sorted by ``sort_by`` (descending)."""
        rows = list(self)
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise ValueError(
                    f"table(): unknown sort_by {sort_by!r}; expected one of {sorted(_SORT_KEYS)}"
                )
            rows.sort(key=_SORT_KEYS[sort_by], reverse=True)
        if row_limit is not None and row_limit >= 0:
            rows = rows[:row_limit]
        shapes = any(a.input_shapes is not None for a in self)
        total_self = sum(a.self_cpu_time_total for a in self) or 1.0
        # torch's "CPU total %" is relative to the summed self time as well
        cols = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
        cols.append("# of Calls")
        if shapes:
            cols.append("Input Shapes")
        body = []
        for a in rows:
            name = a.key
            if len(name) > max_name_column_width:
                name = name[: max_name_column_width - 3] + "..."
            line = [
                name,
                f"{100 * a.self_cpu_time_total / total_self:.2f}%",
                _fmt_us(a.self_cpu_time_total),
                f"{100 * a.cpu_time_total / total_self:.2f}%",
                _fmt_us(a.cpu_time_total),
                _fmt_us(a.cpu_time),
                str(a.count),
            ]
            if shapes:
                line.append(str(a.input_shapes) if a.input_shapes is not None else "")
            body.append(line)
        widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(cols)]
        sep = "  ".join("-" * w for w in widths)

        def fmt(cells):
            first = cells[0].ljust(widths[0])
            rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
            return "  ".join([first, *rest]).rstrip()

        out = []
        if header:
            out.append(header)
        out += [sep, fmt(cols), sep, *(fmt(r) for r in body), sep]
        out.append(f"Self CPU time total: {_fmt_us(sum(a.self_cpu_time_total for a in self))}")
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.table()


# ---- recording ------------------------------------------------------------------------


def _shape_of(x):
    if isinstance(x, Tensor):
        return list(x.shape)
    if isinstance(x, (list, tuple)) and x and all(isinstance(t, Tensor) for t in x):
        return [list(t.shape) for t in x]
    return []


def _stack() -> list:
    here = os.path.dirname(__file__)
    frames = traceback.extract_stack()[:-3]
    return [
        f"{f.filename}({f.lineno}): {f.name}" for f in reversed(frames) if here not in f.filename
    ]


class _Thread(threading.local):
    def __init__(self):
        self.stack = []


class profile:
    """Record every op call (and ``record_function`` span) while active.

    ``with tp.profiler.profile(record_shapes=True) as prof: ...`` then
    ``prof.key_averages().table()``, ``prof.events()``, ``prof.export_chrome_trace(path)``.
    ``activities`` and ``profile_memory`` are accepted for torch compatibility (CPU time
    only). Nested profilers raise ``RuntimeError``.
    """

    def __init__(
        self,
        activities=None,
        *,
        record_shapes: bool = False,
        with_stack: bool = False,
        profile_memory: bool = False,
    ):
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self._events: list[FunctionEvent] = []
        self._local = _Thread()
        self._threads: dict[int, str] = {}
        self._start_ns = 0
        self._stop_ns = 0
        self._running = False
        self._layer = self._make_layer()

    # lifecycle
    def start(self) -> None:
        global _active
        with _lock:
            if _active is not None:
                raise RuntimeError(
                    "tensorplay.profiler.profile: another profiler is already active; "
                    "nested profilers are not supported"
                )
            if self._running or self._stop_ns:
                raise RuntimeError("tensorplay.profiler.profile: a profiler runs only once")
            _active = self
            self._running = True
            self._start_ns = time.perf_counter_ns()
            _dispatch.push_layer(self._layer)

    def stop(self) -> None:
        global _active
        with _lock:
            if not self._running:
                return
            self._running = False
            self._stop_ns = time.perf_counter_ns()
            try:
                _dispatch.pop_layer(self._layer)
            finally:
                _active = None

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # recording (called from the layer and from record_function)
    def _begin(self, name: str, cat: str, shapes=None) -> FunctionEvent:
        stack = self._local.stack
        tid = threading.get_native_id()
        if tid not in self._threads:
            self._threads[tid] = threading.current_thread().name
        ev = FunctionEvent(
            name,
            cat,
            0,
            tid,
            shapes,
            _stack() if self.with_stack else None,
            depth=len(stack),
        )
        stack.append(ev)
        ev.start_ns = time.perf_counter_ns()
        return ev

    def _end(self, ev: FunctionEvent) -> None:
        ev.end_ns = time.perf_counter_ns()
        stack = self._local.stack
        if stack and stack[-1] is ev:
            stack.pop()
        elif ev in stack:  # spans closed out of order: drop the ones opened inside
            del stack[stack.index(ev) :]
        if stack:
            stack[-1].children_ns += ev.end_ns - ev.start_ns
        if self._running:
            self._events.append(ev)

    def _make_layer(self):
        def profiler_layer(nxt, row, targs, params, out, inplace):
            name = row.name + "_" if inplace is not None else row.name
            shapes = None
            if self.record_shapes:
                shapes = [_shape_of(x) for x in targs]
            ev = self._begin(name, "cpu_op", shapes)
            try:
                return nxt(row, targs, params, out, inplace)
            finally:
                self._end(ev)

        return profiler_layer

    # results
    def events(self) -> list[FunctionEvent]:
        """All finished events, ordered by start time."""
        return sorted(self._events, key=lambda e: (e.start_ns, -e.end_ns))

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        """Events summed per name (and per input shapes with ``group_by_input_shape``)."""
        groups: dict = {}
        for ev in self.events():
            shapes = ev.input_shapes if group_by_input_shape else None
            k = (ev.name, repr(shapes)) if group_by_input_shape else ev.name
            avg = groups.get(k)
            if avg is None:
                avg = groups[k] = FunctionEventAvg(ev.name, input_shapes=shapes)
            avg.count += 1
            avg.cpu_time_total += ev.cpu_time_total
            avg.self_cpu_time_total += ev.self_cpu_time_total
        return EventList(groups.values())

    def table(self, **kwargs) -> str:
        return self.key_averages().table(**kwargs)

    def chrome_trace(self) -> dict:
        """The trace as a Chrome Trace Event Format dict (what ``export_chrome_trace`` writes)."""
        pid = os.getpid()
        base = self._start_ns
        trace = [
            {
                "name": "process_name",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"name": "tensorplay"},
            }
        ]
        for tid, tname in self._threads.items():
            trace.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": tname}}
            )
        for ev in self.events():
            args = {}
            if ev.input_shapes is not None:
                args["Input Dims"] = ev.input_shapes
            if ev.stack is not None:
                args["Call stack"] = ev.stack
            trace.append(
                {
                    "name": ev.name,
                    "cat": ev.cat,
                    "ph": "X",
                    "ts": (ev.start_ns - base) / 1000.0,
                    "dur": (ev.end_ns - ev.start_ns) / 1000.0,
                    "pid": pid,
                    "tid": ev.thread,
                    "args": args,
                }
            )
        return {"traceEvents": trace, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path) -> None:
        """Write the trace as JSON (opens in Perfetto / chrome://tracing)."""
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)


# ---- user spans -----------------------------------------------------------------------


class record_function(contextlib.ContextDecorator):
    """A named span around a block (``with record_function("fwd"):``) or a function
    (``@record_function("step")``); nests; costs one global read when not profiling."""

    def __init__(self, name: str, cat: str = "user_annotation", inputs=None):
        self.name = name
        self.cat = cat
        self.inputs = inputs
        self._open: list = []  # (profiler, event) per entry: reentrant and decorator-safe

    def __enter__(self) -> record_function:
        prof = _active
        if prof is not None:
            shapes = None
            if prof.record_shapes and self.inputs is not None:
                shapes = [_shape_of(x) for x in self.inputs]
            self._open.append((prof, prof._begin(self.name, self.cat, shapes)))
        else:
            self._open.append(None)
        return self

    def __exit__(self, *exc) -> None:
        entry = self._open.pop()
        if entry is not None:
            entry[0]._end(entry[1])

    def _recreate_cm(self):  # a fresh instance per decorated call (threads, recursion)
        return record_function(self.name, self.cat, self.inputs)


_NULL = contextlib.nullcontext()


def span(name: str, inputs=None):
    """A span named ``name`` (e.g. ``"mylib::op"``) recorded as one op event.

    For components that run outside the op table (custom ops of tensorplay-library):
    ``with tp.profiler.span("mylib::op", inputs=(x,)): ...``. When no profiler is
    active this returns a shared no-op context manager.
    """
    if _active is None:
        return _NULL
    return record_function(name, "cpu_op", inputs)


def is_profiling() -> bool:
    """Whether a profiler is active (for callers that want to skip span bookkeeping)."""
    return _active is not None
