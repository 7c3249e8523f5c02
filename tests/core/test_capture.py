"""The core capture interface (``tensorplay.capture``): tracer stack, delegation, walker."""

from __future__ import annotations

import threading

import pytest

import tensorplay as tp
from tensorplay import _capture, capture


class FakeProxy(capture.Proxy):
    def __init__(self, name):
        self.name = name


class FakeTracer:
    def __init__(self):
        self.calls = []

    def record_call(self, target, args, kwargs):
        self.calls.append((target, args, kwargs))
        return FakeProxy(f"r{len(self.calls)}")


def test_not_capturing_by_default():
    assert capture.capturing() is False
    assert capture.current_tracer() is None
    with pytest.raises(capture.GraphCaptureError):
        capture.capture_call(len, ([],), {})
    with pytest.raises(capture.GraphCaptureError):
        capture.pop_tracer()


def test_push_pop_and_nesting():
    t1, t2 = FakeTracer(), FakeTracer()
    capture.push_tracer(t1)
    try:
        assert capture.capturing() and capture.current_tracer() is t1
        with capture.tracing(t2) as t:
            assert t is t2 and capture.current_tracer() is t2
        assert capture.current_tracer() is t1
    finally:
        assert capture.pop_tracer() is t1
    assert not capture.capturing()


def test_tracing_pops_on_exception():
    with pytest.raises(ValueError):
        with capture.tracing(FakeTracer()):
            raise ValueError("boom")
    assert not capture.capturing()


def test_thread_isolation():
    seen = {}

    def worker():
        seen["capturing"] = capture.capturing()
        with capture.tracing(FakeTracer()):
            seen["inner"] = capture.capturing()

    with capture.tracing(FakeTracer()) as t:
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        assert capture.current_tracer() is t
    assert seen == {"capturing": False, "inner": True}


def test_capture_call_delegates_to_innermost():
    outer, inner = FakeTracer(), FakeTracer()
    with capture.tracing(outer), capture.tracing(inner):
        p = capture.capture_call("ns::op", [1, 2], {"k": 3})
    assert isinstance(p, capture.Proxy) and p.name == "r1"
    assert inner.calls == [("ns::op", (1, 2), {"k": 3})]
    assert outer.calls == []
    with capture.tracing(outer):
        capture.capture_call(max, (1, 2))
    assert outer.calls == [(max, (1, 2), {})]


def test_contains_proxy_walks_nested_args():
    p = FakeProxy("x")
    assert not capture.contains_proxy((1, "a", [2, (3,)], {"k": None}))
    assert capture.contains_proxy((p,))
    assert capture.contains_proxy(([1, (2, [p])],))
    assert capture.contains_proxy((), {"a": {"b": [p]}})
    assert capture.contains_proxy([{"x": (p,)}])
    assert not capture.contains_proxy((), {"a": 1})
    assert not capture.contains_proxy((1,), None)


def test_error_type_and_exports():
    assert issubclass(capture.GraphCaptureError, RuntimeError)
    assert capture.Proxy is _capture.Proxy
    assert set(capture.__all__) == set(_capture.__all__)


def test_an_active_tracer_turns_the_fast_path_gate_off():
    from tensorplay import _dispatch
    from tensorplay._capture import tracing

    class T:
        def record_call(self, target, args, kwargs):
            return None

    assert _dispatch.state.plain
    with tracing(T()):
        assert not _dispatch.state.plain
        assert (tp.ones(2) + tp.ones(2)).tolist() == [2.0, 2.0]  # real tensors still compute
    assert _dispatch.state.plain
    assert tp.GraphCaptureError is _capture.GraphCaptureError
