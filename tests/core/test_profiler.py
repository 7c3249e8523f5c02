"""tensorplay.profiler: per-op events, record_function spans, tables, Chrome traces."""

from __future__ import annotations

import json
import threading

import pytest

import tensorplay as tp
from tensorplay import _dispatch
from tensorplay.profiler import profile, record_function, span


@pytest.fixture(autouse=True)
def _clean_dispatch():
    yield
    assert _dispatch.layers == []
    assert _dispatch.state.plain is True
    assert not tp.profiler.is_profiling()


def _avg(prof, key):
    found = [a for a in prof.key_averages() if a.key == key]
    assert len(found) == 1, [a.key for a in prof.key_averages()]
    return found[0]


def _children(events, parent):
    return [
        e
        for e in events
        if e.thread == parent.thread
        and e.depth == parent.depth + 1
        and parent.start_ns <= e.start_ns
        and e.end_ns <= parent.end_ns
    ]


def test_ops_are_counted():
    a, b = tp.ones(2, 3), tp.ones(2, 3)
    with profile() as prof:
        for _ in range(3):
            a + b  # noqa: B018
        tp.matmul(tp.ones(2, 2), tp.ones(2, 2))
        a.add_(1)
    assert _avg(prof, "add").count == 3
    assert _avg(prof, "matmul").count == 1
    assert _avg(prof, "add_").count == 1
    for a_ in prof.key_averages():
        assert a_.cpu_time_total >= a_.self_cpu_time_total >= 0
        assert a_.input_shapes is None


def test_layer_only_while_profiling():
    assert _dispatch.layers == [] and _dispatch.state.plain
    with profile() as prof:
        assert len(_dispatch.layers) == 1
        assert not _dispatch.state.plain
        assert tp.profiler.is_profiling()
    a = tp.ones(3)
    a + a  # noqa: B018 - after the profiler: not recorded
    with tp.profiler.record_function("outside"):
        a * a  # noqa: B018
    assert prof.events() == []


def test_cleanup_after_exception():
    with pytest.raises(ValueError, match="boom"):
        with profile() as prof:
            tp.ones(2) + tp.ones(2)  # noqa: B018
            with record_function("failing"):
                raise ValueError("boom")
    assert _dispatch.layers == [] and _dispatch.state.plain
    names = [e.name for e in prof.events()]
    assert "add" in names and "failing" in names


def test_exception_inside_op_closes_its_event():
    with profile() as prof:
        with pytest.raises(RuntimeError):
            tp.ones(2, 3) + tp.ones(4)  # noqa: B018 - shapes don't broadcast
        tp.ones(1) * 2  # noqa: B018
    evs = prof.events()
    assert [e.name for e in evs] == ["add", "mul"]
    assert all(e.depth == 0 for e in evs)


def test_record_function_nesting_and_self_time():
    x = tp.ones(64, 64)
    with profile() as prof:
        with record_function("outer"):
            with record_function("inner"):
                tp.matmul(x, x)
                x + x  # noqa: B018
            x * x  # noqa: B018
    evs = prof.events()
    outer = next(e for e in evs if e.name == "outer")
    inner = next(e for e in evs if e.name == "inner")
    assert outer.cat == inner.cat == "user_annotation"
    assert inner.depth == outer.depth + 1
    assert {e.name for e in _children(evs, outer)} == {"inner", "mul"}
    assert {e.name for e in _children(evs, inner)} == {"matmul", "add"}
    for parent in (outer, inner):
        kids = _children(evs, parent)
        assert parent.cpu_time_total >= sum(k.cpu_time_total for k in kids)
        expected = parent.cpu_time_total - sum(k.cpu_time_total for k in kids)
        assert parent.self_cpu_time_total == pytest.approx(expected, abs=1e-3)
        assert parent.cpu_time_total >= parent.self_cpu_time_total >= 0
    avg = _avg(prof, "outer")
    assert avg.count == 1 and avg.cpu_time_total >= avg.self_cpu_time_total


def test_record_function_decorator_and_noop():
    @record_function("step")
    def step(t):
        return (t * 2).sum()

    t = tp.ones(4)
    assert step(t).item() == 8.0  # no profiler: plain call
    with profile() as prof:
        step(t)
        step(t)
    assert _avg(prof, "step").count == 2
    step_ev = [e for e in prof.events() if e.name == "step"]
    assert all({k.name for k in _children(prof.events(), s)} == {"mul", "sum"} for s in step_ev)


def test_span_for_custom_ops():
    assert span("mylib::op").__enter__() is None  # shared no-op when not profiling
    x = tp.ones(2, 3)
    with profile(record_shapes=True) as prof:
        with span("mylib::op", inputs=(x,)):
            x.exp()
    op = next(e for e in prof.events() if e.name == "mylib::op")
    assert op.cat == "cpu_op"
    assert op.input_shapes == [[2, 3]]
    assert [k.name for k in _children(prof.events(), op)] == ["exp"]
    assert _avg(prof, "mylib::op").count == 1


def test_table():
    x = tp.ones(3, 3)
    with profile() as prof:
        for _ in range(3):
            x + x  # noqa: B018
        tp.matmul(x, x)
    for sort_by in ("self_cpu_time_total", "cpu_time_total", "count"):
        table = prof.key_averages().table(sort_by=sort_by, row_limit=10)
        for col in ("Name", "Self CPU %", "Self CPU", "CPU total", "# of Calls"):
            assert col in table
        assert "add" in table and "matmul" in table
    by_count = prof.key_averages().table(sort_by="count", row_limit=1)
    assert "add" in by_count and "matmul" not in by_count
    with pytest.raises(ValueError, match="sort_by"):
        prof.key_averages().table(sort_by="nope")


def test_record_shapes():
    with profile(record_shapes=True) as prof:
        tp.ones(2, 3) + tp.ones(3)  # noqa: B018
        tp.ones(4) + 1  # noqa: B018
        tp.cat([tp.ones(2), tp.ones(3)])
    adds = [e for e in prof.events() if e.name == "add"]
    assert [e.input_shapes for e in adds] == [[[2, 3], [3]], [[4], []]]
    cat = next(e for e in prof.events() if e.name == "cat")
    assert cat.input_shapes == [[[2], [3]]]
    grouped = prof.key_averages(group_by_input_shape=True)
    assert sorted(str(a.input_shapes) for a in grouped if a.key == "add") == [
        "[[2, 3], [3]]",
        "[[4], []]",
    ]
    assert "Input Shapes" in grouped.table()


def test_backward_ops_are_recorded():
    x = tp.ones(3, requires_grad=True)
    with profile() as prof:
        with record_function("forward"):
            y = (x * x).sum()
        with record_function("backward"):
            y.backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
    evs = prof.events()
    bwd = next(e for e in evs if e.name == "backward")
    inside = [
        e.name
        for e in evs
        if e.depth > bwd.depth and bwd.start_ns <= e.start_ns and e.end_ns <= bwd.end_ns
    ]
    assert "mul" in inside  # MulBackward's formula: grad * other
    assert bwd.cpu_time_total >= bwd.self_cpu_time_total >= 0


def test_nested_profilers_raise():
    with profile():
        with pytest.raises(RuntimeError, match="already active"):
            with profile():
                pass
        assert len(_dispatch.layers) == 1


def test_profile_start_stop():
    prof = profile()
    prof.start()
    try:
        tp.ones(2) + 1  # noqa: B018
    finally:
        prof.stop()
    assert [e.name for e in prof.events()] == ["add"]
    with pytest.raises(RuntimeError, match="only once"):
        prof.start()


def test_threads_recorded_with_tid():
    x = tp.ones(2)
    tids = {}

    def work():
        tids["worker"] = threading.get_native_id()
        with record_function("worker_span"):
            x * x  # noqa: B018

    with profile() as prof:
        t = threading.Thread(target=work, name="worker-thread")
        t.start()
        t.join()
        x + x  # noqa: B018
    evs = prof.events()
    mul = next(e for e in evs if e.name == "mul")
    add = next(e for e in evs if e.name == "add")
    assert mul.thread == tids["worker"] and add.thread == threading.get_native_id()
    assert mul.depth == 1  # nested in worker_span of its own thread
    assert add.depth == 0
    names = {e["args"]["name"] for e in prof.chrome_trace()["traceEvents"] if e["ph"] == "M"}
    assert "worker-thread" in names


def test_with_stack():
    with profile(with_stack=True) as prof:
        tp.ones(2) + 1  # noqa: B018
    (ev,) = prof.events()
    assert any("test_with_stack" in f for f in ev.stack)


# ---- Chrome trace --------------------------------------------------------------------


def _end(ev):
    return ev["ts"] + ev["dur"]


def _validate_chrome_trace(doc) -> None:
    """Checks the Trace Event Format subset Perfetto / chrome://tracing read."""
    assert isinstance(doc, dict)
    assert isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    spans: dict = {}
    for ev in doc["traceEvents"]:
        assert isinstance(ev, dict)
        assert ev["ph"] in ("X", "M")
        assert isinstance(ev["name"], str) and ev["name"]
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        assert isinstance(ev.get("args", {}), dict)
        if ev["ph"] == "M":
            assert ev["name"] in ("process_name", "thread_name")
            assert isinstance(ev["args"]["name"], str)
            continue
        assert isinstance(ev["cat"], str)
        for key in ("ts", "dur"):
            assert isinstance(ev[key], (int, float)) and not isinstance(ev[key], bool)
        assert ev["ts"] >= 0 and ev["dur"] >= 0
        spans.setdefault((ev["pid"], ev["tid"]), []).append(ev)
    eps = 1e-6  # µs: float rounding of ts + dur
    for events in spans.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_: list = []
        for ev in events:
            end = ev["ts"] + ev["dur"]
            # leave the spans that ended before this one starts (siblings, finished parents)
            while open_ and ev["ts"] >= _end(open_[-1]) - eps and end > _end(open_[-1]) + eps:
                open_.pop()
            if open_:
                parent = open_[-1]
                assert ev["ts"] >= parent["ts"] - eps
                assert ev["ts"] + ev["dur"] <= parent["ts"] + parent["dur"] + eps, (ev, parent)
            open_.append(ev)


def test_chrome_trace(tmp_path):
    x = tp.ones(8, 8, requires_grad=True)
    with profile(record_shapes=True) as prof:
        with record_function("model"):
            y = tp.matmul(x, x).relu().sum()
            with span("mylib::op"):
                x.detach() * 2  # noqa: B018
        y.backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    _validate_chrome_trace(doc)
    names = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"]
    for name in ("model", "matmul", "relu", "sum", "mylib::op", "mul"):
        assert name in names
    assert any(e["name"] == "process_name" for e in doc["traceEvents"])
    assert any(e["name"] == "thread_name" for e in doc["traceEvents"])
    mm = next(e for e in doc["traceEvents"] if e["name"] == "matmul")
    assert mm["args"]["Input Dims"] == [[8, 8], [8, 8]]
    assert doc["displayTimeUnit"] == "ms"


def test_trace_validator_catches_bad_nesting():
    bad = {
        "traceEvents": [
            {"name": "p", "cat": "c", "ph": "X", "ts": 0.0, "dur": 10.0, "pid": 1, "tid": 1},
            {"name": "c", "cat": "c", "ph": "X", "ts": 5.0, "dur": 10.0, "pid": 1, "tid": 1},
        ]
    }
    with pytest.raises(AssertionError):
        _validate_chrome_trace(bad)
    neg = {
        "traceEvents": [
            {"name": "p", "cat": "c", "ph": "X", "ts": 0.0, "dur": -1.0, "pid": 1, "tid": 1}
        ]
    }
    with pytest.raises(AssertionError):
        _validate_chrome_trace(neg)


def test_backward_nodes_get_spans_around_their_ops():
    x = tp.ones(3, requires_grad=True)
    with profile() as prof:
        (x * 2).sum().backward()
    names = [e.name for e in prof.events()]
    mul_bw = "autograd::engine::evaluate_function: MulBackward0"
    sum_bw = "autograd::engine::evaluate_function: SumBackward0"
    assert names.index("sum") < names.index(sum_bw) < names.index(mul_bw)
    # the ops a node's formula runs are children of its span
    spans = {e.name: e for e in prof.events()}
    assert spans[sum_bw].cpu_time_total >= spans["expand"].cpu_time_total
    assert x.grad.tolist() == [2.0, 2.0, 2.0]
