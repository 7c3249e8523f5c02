"""CUDA graphs, as in ``torch.cuda``: capture a region of CUDA work once, replay it with one
launch.

A replay runs the captured kernels on the captured addresses, so:

- the inputs of a captured region are *static* tensors: copy new values into them
  (``static_x.copy_(x)``) before each ``replay()``; the outputs are static too and are
  overwritten by the next replay;
- memory allocated during the capture comes from a private pool (``CUDAGraph.pool()``,
  shareable between graphs through ``pool=``) that no other allocation reuses while a
  graph holding it lives;
- a captured region must not synchronise with the host. TensorPlay's own host reads
  (``.item()``, ``.tolist()``, ``.cpu()``, printing, data-dependent shapes,
  ``tp.cuda.synchronize()``) raise a clear error during a capture, naming the call;
  index checks of ``gather``/``scatter``/``index_select`` run on the device and a bad index
  met during a replay is raised at the next synchronisation;
- run the region a few times on a side stream before capturing it, so that kernels are
  compiled and libraries (cuBLAS) set up outside the capture.

``capture_error_mode`` defaults to ``"relaxed"`` where torch defaults to ``"global"``:
CuPy's pool grows with ``cudaMalloc`` during a capture, which the global mode forbids
(torch's allocator switches the mode around its own ``cudaMalloc``; CuPy exposes no way
to). The global and thread-local modes are accepted and work once the pool holds enough
memory (a second capture into a shared pool).
"""

from __future__ import annotations

import gc

from tensorplay import _cublas, _cuda_memory as memory, _device, _device_checks, autograd
from tensorplay._factories import empty_like, ones_like
from tensorplay._tensor import Tensor
from tensorplay.cuda.streams import Stream, current_stream, stream

__all__ = [
    "CUDAGraph",
    "graph",
    "graph_pool_handle",
    "is_current_stream_capturing",
    "make_graphed_callables",
]

_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}  # cudaStreamCaptureMode values


def graph_pool_handle():
    """A new private memory pool to share between graph captures (``pool=``)."""
    return memory.new_pool()


def is_current_stream_capturing() -> bool:
    """True while CUDA work on the current stream is being captured into a graph."""
    if _device.cuda_unavailable_reason() is not None:
        return False
    s = _device.cupy_or_raise().cuda.get_current_stream()
    return s.ptr != 0 and s.is_capturing()


class CUDAGraph:
    """A captured CUDA graph: ``capture_begin``/``capture_end`` (or ``tp.cuda.graph(g)``)
    record the CUDA work queued on the current stream in between; ``replay`` launches it."""

    def __init__(self, keep_graph: bool = False):
        _device.cupy_or_raise()  # a clear error without CUDA
        self._graph = None
        self._pool = None
        self._stream = None  # the CuPy stream while capturing
        self._alloc = None
        self._device = None
        self._checks = 0
        self._has_checks = False

    def capture_begin(self, pool=None, capture_error_mode: str = "relaxed") -> None:
        """Start capturing the work queued on the current stream (not the default stream)."""
        cp = _device.cupy_or_raise()
        if self._stream is not None or self._graph is not None:
            raise RuntimeError(
                "capture_begin: this CUDAGraph already holds a capture; call reset() first"
            )
        if capture_error_mode not in _MODES:
            raise ValueError(
                f"capture_error_mode: expected one of {sorted(_MODES)}, got {capture_error_mode!r}"
            )
        if pool is not None and not isinstance(pool, memory._Pool):
            raise TypeError(
                "pool: expected tp.cuda.graph_pool_handle() or another graph's pool(), got "
                f"{type(pool).__name__}"
            )
        stream = cp.cuda.get_current_stream()
        if stream.ptr == 0:
            raise RuntimeError(
                "capture_begin: the current stream is the default stream, which CUDA cannot "
                "capture; capture inside `with tp.cuda.graph(g):` (it provides a side stream) "
                "or `with tp.cuda.stream(tp.cuda.Stream()):`"
            )
        self._device = cp.cuda.runtime.getDevice()
        _device_checks.prepare(self._device)
        _cublas.prepare(self._device)
        self._pool = pool if pool is not None else memory.new_pool()
        self._alloc = cp.cuda.using_allocator(self._pool.malloc)
        self._alloc.__enter__()
        _device_checks._capturing.append(stream)
        self._checks = _device_checks._checks_launched
        try:
            stream.begin_capture(_MODES[capture_error_mode])
        except BaseException:
            self._undo(stream)
            raise
        self._stream = stream

    def _undo(self, stream) -> None:
        _device_checks._capturing.remove(stream)
        self._alloc.__exit__(None, None, None)
        self._alloc = None

    def capture_end(self) -> None:
        """End the capture and instantiate the graph."""
        stream = self._stream
        if stream is None:
            raise RuntimeError("capture_end: no capture is in progress on this CUDAGraph")
        self._stream = None
        try:
            g = stream.end_capture()
        except Exception as e:  # noqa: BLE001 - CuPy raises CUDA's error types
            raise RuntimeError(
                f"capturing the CUDA graph failed ({e}): a call in the captured region "
                "synchronised with the host, used the legacy default stream, or ran work "
                "CUDA cannot capture; run it outside the captured region"
            ) from e
        finally:
            self._undo(stream)
        self._graph = g
        self._has_checks = _device_checks._checks_launched != self._checks

    def replay(self) -> None:
        """Launch the captured work on the current stream."""
        if self._graph is None:
            raise RuntimeError(
                "replay: this CUDAGraph holds no capture; capture it with tp.cuda.graph(g)"
            )
        self._graph.launch(_device.cupy_or_raise().cuda.get_current_stream())
        if self._has_checks:  # the replay may record a bad index: read it at the next sync
            _device_checks._pending.add(self._device)

    def reset(self) -> None:
        """Drop the captured graph and this graph's hold on its pool."""
        if self._stream is not None:
            self.capture_end()
        self._graph = None
        self._pool = None

    def pool(self):
        """The private memory pool of this graph, to share with another capture."""
        if self._pool is None:
            raise RuntimeError("pool: this CUDAGraph has not started a capture")
        return self._pool

    def __repr__(self) -> str:
        state = "captured" if self._graph is not None else "capturing" if self._stream else "empty"
        return f"<tensorplay.cuda.CUDAGraph {state}>"


class graph:
    """``with tp.cuda.graph(g):`` captures the CUDA work of the block into ``g``.

    The block runs on ``stream`` (by default a side stream kept per device, as in torch),
    after the device is synchronised. On an error inside the block the capture is ended and
    discarded, and the error propagates."""

    default_capture_streams: dict = {}  # device id -> tp.cuda.Stream

    def __init__(
        self, cuda_graph: CUDAGraph, pool=None, stream=None, capture_error_mode: str = "relaxed"
    ):
        if not isinstance(cuda_graph, CUDAGraph):
            raise TypeError(f"graph: expected a tp.cuda.CUDAGraph, got {type(cuda_graph).__name__}")
        if stream is None:
            dev = _device.cupy_or_raise().cuda.runtime.getDevice()
            stream = self.default_capture_streams.get(dev)
            if stream is None:
                stream = self.default_capture_streams[dev] = Stream()
        self.cuda_graph, self.pool, self.stream = cuda_graph, pool, stream
        self.capture_error_mode = capture_error_mode

    def __enter__(self):
        cp = _device.cupy_or_raise()
        cp.cuda.Device().synchronize()
        gc.collect()  # a collection inside the capture would free into the captured pool
        self.stream.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, self.capture_error_mode)
        except BaseException:
            self.stream.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.cuda_graph.capture_end()
        except Exception:
            if exc_type is None:
                raise
        finally:
            self.stream.__exit__(None, None, None)
            if exc_type is not None:
                self.cuda_graph.reset()
        return False


def make_graphed_callables(
    callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False, pool=None
):
    """CUDA-graphed versions of ``callables`` (functions or modules), forward and backward.

    As ``torch.cuda.make_graphed_callables``: each callable runs ``num_warmup_iters`` times
    on a side stream, then its forward and its backward (the gradients of its outputs with
    respect to its tensor inputs that require grad and its parameters) are captured into
    two graphs sharing one pool. The result is called like the original with tensors of the
    sample's shapes, dtypes and devices: the arguments are copied into the static inputs, the
    forward graph replays and the outputs are returned (static tensors, overwritten by the
    next call); ``backward`` replays the backward graph. A module gets its ``forward``
    replaced and is returned; a module not in the training state it was graphed in runs its
    original forward. Tensor arguments only (as in torch); keyword arguments are not graphed.
    """
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    if len(callables) != len(sample_args):
        raise ValueError(
            f"sample_args: expected one tuple per callable ({len(callables)}), got "
            f"{len(sample_args)}"
        )
    graphed = []
    for fn, args in zip(callables, sample_args):
        args = args if isinstance(args, tuple) else (args,)
        for i, a in enumerate(args):
            if not isinstance(a, Tensor) or a.device.type != "cuda":
                raise TypeError(
                    f"sample_args: argument {i} must be a CUDA tensor (graphed callables take "
                    f"tensors only), got {type(a).__name__}"
                    + (f" on {a.device}" if isinstance(a, Tensor) else "")
                )
        graphed.append(_graph_one(fn, args, num_warmup_iters, allow_unused_input, pool))
    return graphed[0] if single else tuple(graphed)


def _flatten(out):
    if isinstance(out, (tuple, list)):
        return tuple(out), type(out)
    return (out,), None


def _graph_one(fn, args, warmup: int, allow_unused: bool, pool):
    is_module = callable(getattr(fn, "parameters", None)) and hasattr(fn, "forward")
    params = tuple(p for p in fn.parameters() if p.requires_grad) if is_module else ()
    call = fn.forward if is_module else fn
    static_in = args + params
    diff_in = tuple(t for t in static_in if t.requires_grad)

    def grads_of(outs):
        outs = tuple(o for o in outs if o.requires_grad)
        if not outs or not diff_in:
            return outs, ()
        return outs, autograd.grad(
            outs,
            diff_in,
            grad_outputs=tuple(ones_like(o) for o in outs),
            allow_unused=allow_unused,
        )

    side = Stream()
    side.wait_stream(current_stream())
    with stream(side):
        for _ in range(warmup):
            grads_of(_flatten(call(*args))[0])
    side.synchronize()

    fwd = CUDAGraph()
    with graph(fwd, pool=pool):
        out = call(*args)
    outs, kind = _flatten(out)
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            raise TypeError(
                f"make_graphed_callables: output {i} of the callable is a "
                f"{type(o).__name__}; graphed callables return tensors only"
            )
    needs = tuple(o.requires_grad for o in outs)
    static_grad_out = tuple(empty_like(o) for o, n in zip(outs, needs) if n)
    bwd = CUDAGraph()
    grads: tuple = ()
    if static_grad_out and diff_in:
        with graph(bwd, pool=fwd.pool()):
            grads = autograd.grad(
                tuple(o for o, n in zip(outs, needs) if n),
                diff_in,
                grad_outputs=static_grad_out,
                allow_unused=allow_unused,
            )
    static_out = tuple(o.detach() for o in outs)  # forward's graph writes into these
    grad_for = []  # per static input: its static gradient, or None
    it = iter(grads)
    for t in static_in:
        grad_for.append(next(it, None) if t.requires_grad else None)

    class Graphed(autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for s, x in zip(static_in, inputs):
                if s.data_ptr() != x.data_ptr():
                    s.copy_(x)
            fwd.replay()
            out = tuple(o.detach() for o in static_out)  # a new alias per call, as in torch
            return out if len(out) > 1 else out[0]

        @staticmethod
        def backward(ctx, *grad_outputs):
            k = 0
            for i, n in enumerate(needs):
                if n:
                    g = grad_outputs[i]
                    if g is None:
                        static_grad_out[k].zero_()
                    elif g.data_ptr() != static_grad_out[k].data_ptr():
                        static_grad_out[k].copy_(g)
                    k += 1
            if grads:
                bwd.replay()
            return tuple(None if g is None else g.detach() for g in grad_for)

    training = getattr(fn, "training", None)

    def graphed(*user_args):
        if len(user_args) != len(args):
            raise TypeError(
                f"graphed callable: expected {len(args)} tensor arguments (as sampled), got "
                f"{len(user_args)}"
            )
        for i, (s, x) in enumerate(zip(args, user_args)):
            if (
                not isinstance(x, Tensor)
                or x.shape != s.shape
                or x.dtype != s.dtype
                or (x.device != s.device)
            ):
                raise ValueError(
                    f"graphed callable: argument {i} must match the sample (shape "
                    f"{tuple(s.shape)}, {s.dtype}, {s.device}); got "
                    + (
                        f"shape {tuple(x.shape)}, {x.dtype}, {x.device}"
                        if isinstance(x, Tensor)
                        else type(x).__name__
                    )
                )
        out = Graphed.apply(*user_args, *params)
        if kind is None:
            return out
        return kind(out) if isinstance(out, tuple) else kind((out,))

    if not is_module:
        return graphed
    original = fn.forward

    def forward(*user_args):
        if fn.training == training:
            return graphed(*user_args)
        return original(*user_args)

    fn.forward = forward
    return fn
