"""Library ops under graph capture, dispatch modes, function modes and the profiler;
wrap_triton / wrap_tilelang (spec: Capture and Triton/TileLang)."""

from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay import capture, library
from tensorplay.overrides import TensorPlayFunctionMode
from tensorplay.profiler import profile
from tensorplay.utils._python_dispatch import TensorPlayDispatchMode


class FakeProxy(capture.Proxy):
    def __init__(self, name):
        self.name = name


class RecordingTracer:
    """The smallest tracer core's capture interface accepts: one record per call."""

    def __init__(self):
        self.calls = []

    def record_call(self, target, args, kwargs):
        self.calls.append((target, args, kwargs))
        return FakeProxy(f"out{len(self.calls)}")


def _counting_op(qualname, runs):
    def body(x, scale=2.0):
        runs.append(1)
        return x * scale

    return library.custom_op(qualname(), body)


def test_capture_records_exactly_one_node_and_skips_the_body(qualname):
    runs = []
    op = _counting_op(qualname, runs)
    tracer = RecordingTracer()
    x = FakeProxy("x")
    with capture.tracing(tracer):
        out = op(x, scale=3.0)
    assert isinstance(out, FakeProxy) and runs == []
    # arguments are bound to the body's signature (positional parameters positionally)
    assert tracer.calls == [(op, (x, 3.0), {})]


def test_capture_with_concrete_arguments_runs_eagerly(qualname):
    runs = []
    op = _counting_op(qualname, runs)
    tracer = RecordingTracer()
    with capture.tracing(tracer):
        out = op(tp.ones(2))
    assert out.tolist() == [2.0, 2.0] and runs == [1] and tracer.calls == []


def test_symbolic_argument_in_second_position_or_list_is_captured(qualname):
    op = library.custom_op(qualname(), lambda a, xs: a)
    tracer = RecordingTracer()
    with capture.tracing(tracer):
        op(tp.ones(1), [FakeProxy("p")])
    assert len(tracer.calls) == 1 and tracer.calls[0][0] is op


def test_dispatch_mode_with_tracer_sees_one_call(qualname):
    class Tracer:
        def __init__(self):
            self.nodes = []

        def record(self, name, args):
            self.nodes.append(name)

    class Tracing(TensorPlayDispatchMode):
        def __init__(self):
            self.tracer = Tracer()

        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            self.tracer.record(func.name, args)
            return func(*args, **(kwargs or {}))

    name = qualname("lin")
    op = library.custom_op(name, lambda x: (x * 2 + 1).relu())
    with Tracing() as t:
        out = op(tp.ones(2)).sum()
    assert t.tracer.nodes == [name, "sum"] and out.item() == 6.0


def test_dispatch_mode_below_autograd_keeps_the_registered_formula(qualname):
    class Passthrough(TensorPlayDispatchMode):
        def __init__(self):
            self.seen = []

        def __tensorplay_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append((func.name, tp.is_grad_enabled()))
            return func(*args, **(kwargs or {}))

    name = qualname()
    op = library.custom_op(name, lambda x: x * 2)
    op.register_autograd(lambda ctx, g: g * 5)  # deliberately not the true derivative
    x = tp.ones(2, requires_grad=True)
    with Passthrough() as mode:
        y = op(x)
    y.sum().backward()
    assert (name, True) in mode.seen
    assert y.grad_fn.name() == f"{name}Backward" and x.grad.tolist() == [5.0, 5.0]


def test_function_mode_sees_the_op_itself(qualname):
    class Log(TensorPlayFunctionMode):
        def __init__(self):
            self.funcs = []

        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            self.funcs.append(func)
            return func(*args, **(kwargs or {}))

    op = library.custom_op(qualname(), lambda x: x + 1)
    x = tp.zeros(1)  # made outside: inside, the factory reaches the mode too
    with Log() as log:
        assert op(x).tolist() == [1.0]
    assert log.funcs[0] is op


def test_tensorplay_function_override_on_an_argument(qualname):
    class Wrapped:
        def __init__(self, t):
            self.t = t

        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            return ("handled", func)

    op = library.custom_op(qualname(), lambda x: x)
    assert op(Wrapped(tp.ones(1))) == ("handled", op)


def test_profiler_span_is_named_after_the_op(qualname):
    name = qualname("prof")
    op = library.custom_op(name, lambda x: x * 2)
    with profile() as prof:
        op(tp.ones(3))
        op(tp.ones(3))
    keys = {a.key: a.count for a in prof.key_averages()}
    assert keys[name] == 2 and keys["mul"] == 2


# ---- wrap_triton / wrap_tilelang ---------------------------------------------------------------


class GridLauncher:
    """Stands in for a @triton.jit kernel: kernel[grid](*args) launches."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def test_wrap_triton_launches_eagerly_and_is_idempotent():
    k = GridLauncher()
    w = library.wrap_triton(k)
    assert isinstance(w, library.TritonKernelWrapper) and library.wrap_triton(w) is w
    x = tp.ones(4)
    w[(1,)](x, 4, BLOCK=8)
    assert k.launches == [((1,), (x, 4), {"BLOCK": 8})]


@pytest.mark.parametrize("bad", [lambda x: x, 3])
def test_wrap_triton_rejects_non_kernels(bad):
    with pytest.raises(TypeError, match="triton.jit"):
        library.wrap_triton(bad)


def test_wrap_triton_symbolic_arguments_or_grid_raise_capture_error():
    w = library.wrap_triton(GridLauncher())
    with capture.tracing(RecordingTracer()):
        with pytest.raises(capture.GraphCaptureError, match="triton_op"):
            w[(1,)](FakeProxy("x"))
        with pytest.raises(capture.GraphCaptureError, match="triton_op"):
            w[(FakeProxy("n"),)](tp.ones(1))


def test_triton_op_is_captured_as_one_node_without_launching(qualname):
    k = GridLauncher()
    launcher = library.wrap_triton(k)

    @library.triton_op(qualname(), mutates_args=())
    def add_one(x):
        out = tp.empty_like(x)
        launcher[(1,)](x, out)
        return out

    tracer = RecordingTracer()
    with capture.tracing(tracer):
        add_one(FakeProxy("x"))
    assert [c[0] for c in tracer.calls] == [add_one] and k.launches == []
    add_one(tp.ones(2))
    assert len(k.launches) == 1


class DuckTileLang:
    _tilelang_kernel = True

    def __init__(self, bound=None):
        self.bound = bound
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)
        return "ran"

    def compile(self, *args):
        return DuckTileLang(bound=args)


def test_wrap_tilelang_accepts_duck_typed_kernels_and_binds_factories():
    k = DuckTileLang()
    w = library.wrap_tilelang(k)
    assert isinstance(w, library.TileLangKernelWrapper) and library.wrap_tilelang(w) is w
    assert w(1, 2) == "ran" and k.calls == [(1, 2)]
    bound = w.compile(128, 64)
    assert isinstance(bound, library.TileLangKernelWrapper) and bound is not w
    assert bound.kernel.bound == (128, 64)

    class WithAdapter:
        adapter = object()

        def __call__(self):
            return 1

    assert library.wrap_tilelang(WithAdapter())() == 1


@pytest.mark.parametrize("bad", [lambda x: x, 3, "kernel"])
def test_wrap_tilelang_rejects_plain_callables(bad):
    with pytest.raises(TypeError, match="TileLang kernel"):
        library.wrap_tilelang(bad)


def test_wrap_tilelang_symbolic_arguments_raise_capture_error():
    w = library.wrap_tilelang(DuckTileLang())
    with pytest.raises(capture.GraphCaptureError, match="tile_lang_op"):
        w(FakeProxy("x"))
    with pytest.raises(capture.GraphCaptureError, match="tile_lang_op"):
        w.compile(FakeProxy("n"))


def test_real_triton_kernel_is_accepted_when_triton_is_installed():
    triton = pytest.importorskip("triton", reason="triton not installed")
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr):  # noqa: N803 - Triton's constexpr style
        pass

    assert library.wrap_triton(kernel).kernel is kernel


def test_override_in_a_later_argument_is_honoured(qualname):
    class Wrapped:
        def __tensorplay_function__(self, func, types, args=(), kwargs=None):
            return ("handled", func)

    plain = library.custom_op(qualname("plain"), lambda x, y: x)
    star = library.custom_op(qualname("star"), lambda x, *rest: x)  # the reference __call__
    assert plain(tp.ones(1), Wrapped()) == ("handled", plain)
    assert star(tp.ones(1), Wrapped()) == ("handled", star)
    assert plain(tp.ones(1), y=Wrapped()) == ("handled", plain)


def test_symbolic_later_argument_is_captured_by_the_reference_call_too(qualname):
    op = library.custom_op(qualname(), lambda x, *rest: x)
    tracer = RecordingTracer()
    with capture.tracing(tracer):
        op(tp.ones(1), FakeProxy("p"))
    assert [c[0] for c in tracer.calls] == [op]
