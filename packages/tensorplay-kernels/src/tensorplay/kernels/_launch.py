"""Launch glue: Triton kernels on TensorPlay tensors, without torch.

``kernel(fn, ...)`` turns a plain Triton-language function into a ``TritonKernel``, a
grid-indexable launcher (``k[grid](*args)``) that ``tensorplay.library.wrap_triton``
accepts. TensorPlay tensors are Triton arguments as they are: Triton reads
``data_ptr()`` and ``dtype`` (``str(tp.float32).split(".")[-1]`` is a Triton type name).

* On CUDA the function is compiled with ``triton.jit`` (and ``triton.autotune`` when
  configs are given) and launched on TensorPlay's current stream: Triton's stock CUDA
  driver asks torch for the device and stream, so a small driver that asks CuPy (the
  array library behind TensorPlay's CUDA tensors) is installed on first CUDA use.
  Kernels that need scratch memory get it from ``triton.set_allocator``, backed by
  TensorPlay CUDA tensors.
* On CPU, under ``TRITON_INTERPRET=1``, ``triton.jit`` yields Triton's interpreter, which
  reads TensorPlay CPU tensors through their torch-compatible surface
  (``untyped_storage()``, ``set_()``, ``copy_()``, ...). Autotuning is skipped there and
  the ``cpu_meta`` block sizes are used instead (small blocks keep the interpreter fast).

``Pointer`` wraps a raw CUDA address (a CuPy array's) for launches on arrays that are
not TensorPlay tensors (the kernels behind ``tp.kernels.enable()``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorplay as tp
from tensorplay.kernels._capability import import_triton, interpreting, triton_unavailable_reason
from tensorplay.kernels._fastlaunch import FastLauncher

__all__ = ["TritonKernel", "kernel", "Pointer", "next_power_of_2"]


class Pointer:
    """A raw device address with a TensorPlay dtype: what Triton needs of a tensor."""

    __slots__ = ("ptr", "dtype")

    def __init__(self, ptr: int, dtype: tp.dtype):
        self.ptr, self.dtype = ptr, dtype

    def data_ptr(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"Pointer({self.ptr:#x}, {self.dtype})"


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class TritonKernel:
    """A Triton kernel launchable on TensorPlay tensors: ``k[grid](*args, **meta)``.

    Built lazily on first launch, so importing a module full of kernels costs nothing
    and needs no Triton. ``configs``/``key`` autotune on CUDA; ``cpu_meta`` gives the
    meta-parameters the autotuner would otherwise choose, for the CPU interpreter.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        configs: Sequence[Mapping[str, Any]] | None = None,
        key: Sequence[str] = (),
        cpu_meta: Mapping[str, Any] | None = None,
    ):
        self.fn = fn
        self.__name__ = fn.__name__
        params = inspect.signature(fn).parameters
        unknown = [k for k in key if k not in params]
        if unknown:  # Triton's autotuner ignores unknown names: the tuning would be wrong
            raise ValueError(
                f"kernel {fn.__name__}: key {unknown} names no parameter of the kernel; "
                f"key= lists the parameters whose values pick a config ({', '.join(params)})"
            )
        self._configs = configs
        self._key = tuple(key)
        self._cpu_meta = dict(cpu_meta or {})
        self._built: Any = None
        self._fast: FastLauncher | None = None  # CUDA: replays compiled kernels
        self._interp = False
        self._lock = threading.Lock()

    def _build(self) -> Any:
        with self._lock:
            if self._built is None:
                triton = import_triton()
                self._interp = interpreting()
                if self._interp:
                    _patch_interpreter_index()
                jitted = triton.jit(self.fn)
                if self._configs and not self._interp:
                    configs = [_config(triton, c) for c in self._configs]
                    jitted = triton.autotune(configs=configs, key=list(self._key))(jitted)
                if not self._interp:
                    import cupy as cp  # noqa: PLC0415 - the array library of CUDA tensors

                    self._fast = FastLauncher(
                        jitted,
                        device=cp.cuda.runtime.getDevice,
                        stream=lambda: cp.cuda.get_current_stream().ptr,
                        tune_keys=self._key,
                        pointer_type=Pointer,
                    )
                self._built = jitted
        return self._built

    @property
    def jit_function(self) -> Any:
        """The underlying ``triton.jit`` object (an ``InterpretedFunction`` under the
        interpreter), e.g. for ``triton.compile`` or a raw launch."""
        return self._build()

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        built = self._built if self._built is not None else self._build()
        if self._interp:
            meta = self._cpu_meta

            def launch_interpreted(*args: Any, **kwargs: Any) -> Any:
                _check_device(self.__name__, args, "cpu")
                args = tuple(_InterpretedArg(a) if type(a) is tp.Tensor else a for a in args)
                return built[grid](*args, **{**meta, **kwargs})

            return launch_interpreted

        return lambda *args, **kwargs: self.launch_grid(grid, args, kwargs)

    def launch_grid(self, grid: Any, args: tuple, kwargs: dict) -> Any:
        """``self[grid](*args, **kwargs)`` on CUDA, without building a launcher first (the
        per-call path of ``wrap_triton`` launches inside ``triton_op`` bodies)."""
        if self._fast is None:
            if self._built is None:
                self._build()
            if self._interp:
                return self[grid](*args, **kwargs)
        _ensure_cuda_runtime()
        kernel = self._fast.launch(grid, args, kwargs)
        if kernel is None:  # a call signature not launched before: Triton's full path
            _check_device(self.__name__, args, "cuda")
            kernel = self._built[grid](*args, **kwargs)
            self._fast.record(kernel, args, kwargs)
        return kernel

    def clear_launch_cache(self) -> None:
        """Forget the compiled kernels replayed on CUDA (see ``_fastlaunch``): the next
        launch of each call signature takes Triton's full path again."""
        if self._fast is not None:
            self._fast.clear()

    def __repr__(self) -> str:
        return f"<TritonKernel {self.__name__}>"


def kernel(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    configs: Sequence[Mapping[str, Any]] | None = None,
    key: Sequence[str] = (),
    cpu_meta: Mapping[str, Any] | None = None,
) -> Any:
    """Decorator: a Triton-language function -> ``TritonKernel`` (see the class).

    ``configs`` are dicts of meta-parameters plus optional ``num_warps``/``num_stages``.
    """

    def make(f: Callable[..., Any]) -> TritonKernel:
        return TritonKernel(f, configs=configs, key=key, cpu_meta=cpu_meta)

    return make if fn is None else make(fn)


def _config(triton: Any, spec: Mapping[str, Any]) -> Any:
    spec = dict(spec)
    warps = spec.pop("num_warps", 4)
    stages = spec.pop("num_stages", 3)
    return triton.Config(spec, num_warps=warps, num_stages=stages)


class _StorageNoSelfCopy:
    """A CPU storage whose ``copy_`` from itself does nothing (see ``_InterpretedArg``)."""

    __slots__ = ("storage",)

    def __init__(self, storage: Any):
        self.storage = storage

    def data_ptr(self) -> int:
        return self.storage.data_ptr()

    def cpu(self) -> Any:
        return self.storage.cpu()

    def copy_(self, src: Any) -> Any:
        if src is self.storage or src.data_ptr() == self.storage.data_ptr():
            return self.storage
        return self.storage.copy_(src)


class _InterpretedArg:
    """A CPU tensor as Triton's interpreter sees it.

    The interpreter moves every tensor argument "to the host" and back: it builds a host
    tensor with ``new_empty(0)`` + ``set_(storage.cpu(), offset, size, stride)`` and after
    the launch ``storage.copy_(host_storage)``. For a CPU tensor the host storage is the
    tensor's own, so both steps change no value, but each is an in-place operation that
    bumps the storage's version counter: autograd would then report every saved input of
    a ``triton_op`` as modified in place. Here the host tensor *is* the tensor and the
    self-copy is skipped; memory the kernel writes is written directly.
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: tp.Tensor):
        self.tensor = tensor

    def untyped_storage(self) -> _StorageNoSelfCopy:
        return _StorageNoSelfCopy(self.tensor.untyped_storage())

    def new_empty(self, *args: Any, **kwargs: Any) -> _HostView:
        return _HostView(self.tensor)

    def __getattr__(self, name: str) -> Any:  # data_ptr, dtype, size, stride, ...
        return getattr(self.tensor, name)


class _HostView:
    """The interpreter's host tensor for a CPU tensor: the tensor itself."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: tp.Tensor):
        self.tensor = tensor

    def set_(self, storage: Any, offset: int, size: Any, stride: Any) -> _HostView:
        t = self.tensor
        if storage.data_ptr() != t.untyped_storage().data_ptr() or offset != t.storage_offset():
            raise RuntimeError("Triton interpreter glue: host view differs from the tensor")
        return self

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tensor, name)


_index_patched = False


def _patch_interpreter_index() -> None:
    """Let the interpreter use runtime integers as loop bounds under NumPy >= 2.

    Triton 3.6's interpreter holds a scalar argument as a 1-element array and converts it
    with ``int(array)``, which NumPy 2 refuses for arrays of one dimension, so
    ``for i in range(0, n, BLOCK)`` fails. Its per-launch patch of ``tl.tensor`` is
    wrapped here so ``__index__`` goes through ``.item()`` instead (same value).
    """
    global _index_patched
    if _index_patched:
        return
    from triton.runtime import interpreter  # noqa: PLC0415

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor: Any, *args: Any, **kwargs: Any) -> None:
        original(
            tensor, *args, **kwargs
        )  # 3.5 passes (tensor, builder, scope), 3.6 (tensor, scope)
        tensor.__index__ = lambda self: int(self.handle.data.item())

    interpreter._patch_lang_tensor = patch_lang_tensor
    _index_patched = True


def _check_device(name: str, args: tuple, mode: str) -> None:
    """A clear error instead of Triton's when a tensor is on a device this mode can't run
    (every tensor argument: on CUDA a host address would reach the kernel)."""
    for a in args:
        if not isinstance(a, tp.Tensor):
            continue
        dev = a.device
        if dev.type != mode:
            why = triton_unavailable_reason(dev.type) or f"Triton is running in {mode} mode"
            raise RuntimeError(
                f"Triton kernel {name}: cannot launch on a {dev.type} tensor here ({why}). "
                f"Move the tensors to {mode!r}"
                + (" or set TRITON_INTERPRET=1 before importing triton" if mode == "cuda" else "")
            )


# ---- the CUDA runtime side: a torch-free driver and a TensorPlay-backed allocator --------

_runtime_lock = threading.Lock()
_driver_installed = False


_allocation: Any = None  # triton.runtime._allocation, once the driver is installed


def _ensure_cuda_runtime() -> None:
    if not _driver_installed:
        _install_driver()
    # the allocator is a ContextVar: every thread (context) needs it set once
    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        _allocation._allocator.set(_allocate)


def _allocate(size: int, alignment: int, stream: int | None) -> tp.Tensor:
    # CuPy's pool hands out 512-byte aligned blocks, more than Triton ever asks for
    del alignment, stream
    return tp.empty(size, dtype=tp.uint8, device="cuda")


def _install_driver() -> None:
    global _driver_installed, _allocation
    with _runtime_lock:
        if _driver_installed:
            return
        from triton.runtime import _allocation as allocation, driver  # noqa: PLC0415

        driver.set_active(_tensorplay_cuda_driver())
        _allocation = allocation
        _driver_installed = True


def _tensorplay_cuda_driver() -> Any:
    """Triton's CUDA driver with device, capability and stream taken from CuPy.

    Triton's ``GPUDriver.__init__`` imports torch for these four callables; everything
    else (compiling, the launcher) is Triton's own and is inherited unchanged.
    """
    import cupy as cp  # noqa: PLC0415
    from triton.backends.nvidia.driver import CudaDriver, CudaLauncher, CudaUtils  # noqa: PLC0415

    class TensorPlayCudaDriver(CudaDriver):
        def __init__(self) -> None:  # deliberately not calling GPUDriver.__init__ (torch)
            self.utils = CudaUtils()
            self.launcher_cls = CudaLauncher
            self.get_current_device = cp.cuda.runtime.getDevice
            self.set_current_device = cp.cuda.runtime.setDevice
            self.get_current_stream = _current_stream
            self.get_device_capability = _capability

        def get_benchmarker(self) -> Callable[..., Any]:  # the autotuner's timer, torch-free
            return _cupy_do_bench

    def _current_stream(device: int | None = None) -> int:
        return cp.cuda.get_current_stream().ptr

    def _capability(device: int | None = None) -> tuple[int, int]:
        cc = cp.cuda.Device(device if device is not None else 0).compute_capability
        return int(cc[:-1]), int(cc[-1])

    return TensorPlayCudaDriver()


def _cupy_do_bench(
    fn: Callable[[], Any],
    warmup: int = 25,
    rep: int = 100,
    grad_to_none: Any = None,
    quantiles: Sequence[float] | None = None,
    return_mode: str = "mean",
) -> Any:
    """``triton.testing.do_bench`` with CuPy events (Triton's own times with torch's).

    Runs ``fn`` about ``warmup`` ms, then about ``rep`` ms, flushing the L2 cache (a
    256 MB fill) before each timed run; returns the requested quantiles of the times in
    ms, or their ``return_mode`` (mean/median/min/max/all).
    """
    import statistics

    import cupy as cp  # noqa: PLC0415

    stream = cp.cuda.get_current_stream()
    fn()
    stream.synchronize()
    flush = cp.empty(64 * 1024 * 1024, dtype=cp.int32)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(5):
        flush.fill(0)
        fn()
    end.record()
    end.synchronize()
    estimate = max(cp.cuda.get_elapsed_time(start, end) / 5, 1e-3)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    events = []
    for _ in range(max(1, int(rep / estimate))):
        flush.fill(0)
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        fn()
        e.record()
        events.append((s, e))
    stream.synchronize()
    times = sorted(cp.cuda.get_elapsed_time(s, e) for s, e in events)
    if quantiles is not None:
        return [times[min(int(q * len(times)), len(times) - 1)] for q in quantiles]
    if return_mode == "all":
        return times
    pick = {"min": min, "max": max, "median": statistics.median}.get(return_mode, statistics.mean)
    return pick(times)
