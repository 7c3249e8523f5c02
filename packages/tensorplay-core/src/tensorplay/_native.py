"""The native hot paths (``tensorplay._C``) and their Python twins.

``tensorplay._C`` is compiled from ``packages/tensorplay-core/csrc/_C.cpp`` when the core
distribution is installed (pybind11 + the numpy C API; see ``hatch_native.py``). It holds
only what the benchmarks showed is hot, each piece with a readable twin here or next to
the code it speeds up:

============================  ===========================================================
native                        Python twin
============================  ===========================================================
``FastOp``                    the generated op function's fast path
                              (``_dispatch._BINARY_FAST`` / ``_UNARY_FAST``)
``plain_call``                ``_dispatch.call`` (the general path of a call with plain
                              arguments: ``execute``'s decisions kept per key by
                              ``_dispatch._plan``, then the kernel run and wrapped in C;
                              numpy allocates 64-byte aligned memory inside a CPU kernel,
                              so a result only the kernel holds becomes the storage where
                              the twin copies it)
``adopt_cuda``                ``_tensor.adopt_array``'s CUDA branch (a CuPy result, and
                              the CudaStorage of its memory, as a Tensor; plain calls and
                              the CUDA pointwise fast path adopt through it)
``make_view``                 ``_tensor.make_view`` (on CPU the numpy array of a view
                              made from the buffer's address, not numpy's constructor; on
                              CUDA a reshape or permutation, ``_derived_cuda_view``)
``watch_gate``                ``_dispatch.state.plain`` (the gate; C reads its slot)
``any_requires_grad``         ``any_requires_grad`` below
``input_edges``               ``tensorplay.autograd.graph.input_edges`` (the pass every
                              recording makes over a new backward node's inputs)
``record_node``               ``tensorplay.autograd._record.record`` (an op-table row's
                              ``OpNode`` and its ``SavedTensor`` s in the common case)
``im2col``                    ``_rows.convolution._columns_py`` (a convolution's columns
                              on the CPU: a strided view, transposed and copied)
``max_pool2d``                ``_rows.convolution._max_pool_arrays``'s loop (values and
                              argmax indices of 2-D max pooling, float32/float64)
``scatter_add``               numpy's ``add.at`` in ``_rows.indexing`` (scatter with
                              ``reduce="add"`` along one dim of contiguous arrays)
``relu``,                     the numpy kernels of rows ``relu`` and
``threshold_backward``        ``_threshold_backward`` (one pass over float32/float64
                              arrays where numpy's maximum and where take several)
``cuda_launch``               the CuPy ``Function``'s call in ``_cuda_launch.launch`` (a
                              launch of our own CUDA kernels through ``cuLaunchKernel``)
``cuda_pointwise``            ``_cuda_pointwise.run`` (the layout check, allocation and
                              launch of our pointwise kernels; natively at every size)
``cublas_gemm``               the ctypes calls of ``_cublas._gemm_ctypes`` (cuBLAS's GEMM
                              with the arguments converted in C; handles made by ctypes)
``exchange_api``              ``Tensor.__dlpack__`` (``Tensor.__dlpack_c_exchange_api__``
                              is absent without ``_C``; tvm-ffi then calls ``__dlpack__``)
============================  ===========================================================

``TENSORPLAY_PURE_PYTHON=1`` (read at import) runs the twins; so does an install that
could not compile the module (``NATIVE`` is None, ``REASON`` says why;
``python -m tensorplay`` prints it).

Measured and left in Python: the grad-mode flag (a ``threading.local`` read costs the same
~35 ns as a call into C) and the device scan of the general path (its CPU-scalar rules
are most of its cost and would have to be written twice).
"""

from __future__ import annotations

import importlib
import os
import warnings

from tensorplay import _device, _tensor
from tensorplay._device import CPU
from tensorplay._dlpack import from_dlpack
from tensorplay._storage import CudaStorage, Storage, _aligned_u8
from tensorplay._tensor import Tensor

__all__ = ["NATIVE", "REASON", "any_requires_grad"]

NATIVE = None
if os.environ.get("TENSORPLAY_PURE_PYTHON") == "1":
    REASON = "TENSORPLAY_PURE_PYTHON=1"
else:
    # imported by its full name: a missing module is then a ModuleNotFoundError naming it,
    # where ``from tensorplay import _C`` words it as a "circular import"
    try:
        NATIVE = importlib.import_module("tensorplay._C")
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == "tensorplay._C":
            REASON = (
                "tensorplay._C was not built when tensorplay-core was installed (no C++ "
                "compiler or Python headers then); reinstall tensorplay-core where g++ works "
                "(pip install -v shows why the build was skipped)"
            )
        else:
            REASON = f"tensorplay._C is installed but could not be loaded ({e})"
        warnings.warn(
            f"TensorPlay runs without its native module, so dispatch is slower: {REASON}. "
            "Set TENSORPLAY_PURE_PYTHON=1 to choose pure Python and silence this.",
            RuntimeWarning,
            stacklevel=2,
        )
    else:
        REASON = "loaded"
        NATIVE.init(Tensor, Storage, CPU, _aligned_u8)
        _tensor.register_native_view(NATIVE.make_view)
        # plain calls adopt CuPy results in C once CuPy is there (not imported before)
        _device.on_cupy_loaded(lambda cp: NATIVE.init_cuda_adopt(cp.ndarray, CudaStorage))


def _any_requires_grad(items) -> bool:
    """Some Tensor among ``items`` (or inside a list/tuple item) requires grad."""
    for x in items:
        if isinstance(x, Tensor):
            if x.requires_grad:
                return True
        elif isinstance(x, (list, tuple)):
            if any(isinstance(y, Tensor) and y.requires_grad for y in x):
                return True
    return False


any_requires_grad = NATIVE.any_requires_grad if NATIVE is not None else _any_requires_grad


def _from_capsule(capsule):
    """Kernel results handed back through the exchange table become TensorPlay tensors."""
    return from_dlpack(capsule)


def _stream_ptr(device_id: int) -> int:
    """The ``cudaStream_t`` kernels launched on TensorPlay CUDA tensors should use."""
    cp = _device.cupy_or_raise()  # CuPy's current stream is tp.cuda.current_stream()
    with cp.cuda.Device(device_id):
        return cp.cuda.get_current_stream().ptr


if NATIVE is not None:
    # tvm-ffi (cpp_jit) finds the table on the class and converts tensors in C.
    Tensor.__dlpack_c_exchange_api__ = NATIVE.exchange_api(_from_capsule, _stream_ptr)
