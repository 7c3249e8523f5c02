"""Device kernels as TensorPlay operators (distribution ``tensorplay-kernels``).

Importing this module registers the ``tpk`` operator library (``tp.ops.tpk.<op>``):
Triton kernels (elementwise, row reductions, softmax, layer norm, matmul, fused
bias+activation), TileLang kernels (``gemm``, ``attention``) and one CUDA C kernel
through ``tensorplay.utils.cpp_jit`` (``axpby``). Each is a library operator with a fake
kernel, autograd where differentiable, and one opaque node under ``tp.compile``.
Triton, TileLang and the C++ toolchain are imported on first use, not here::

    import tensorplay as tp
    import tensorplay.kernels  # registers tp.ops.tpk

    y = tp.ops.tpk.softmax(x)  # Triton on CUDA; the interpreter on CPU (TRITON_INTERPRET=1)

``enable()`` routes built-in CUDA ops (``tp.add``, ``tp.softmax``, ...) to these kernels
where they are faster; ``disable()`` restores the CuPy kernels.
"""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.kernels._capability import (
    import_triton,
    interpreting,
    tilelang_unavailable_reason,
    triton_unavailable_reason,
)
from tensorplay.kernels._launch import Pointer, TritonKernel, kernel
from tensorplay.kernels._ops_cuda_c import axpby
from tensorplay.kernels._ops_matmul import matmul
from tensorplay.kernels._ops_pointwise import ACTIVATIONS, BINARY, UNARY, bias_act
from tensorplay.kernels._ops_rows import (
    layer_norm,
    layer_norm_backward,
    max_rows,
    mean_rows,
    softmax,
    softmax_backward,
    sum_rows,
)
from tensorplay.kernels._ops_tilelang import attention, gemm
from tensorplay.kernels._routing import ROUTED_OPS, disable, enable, is_enabled

__all__ = [
    "enable",
    "disable",
    "is_enabled",
    "ROUTED_OPS",
    "kernel",
    "TritonKernel",
    "Pointer",
    "import_triton",
    "interpreting",
    "triton_unavailable_reason",
    "tilelang_unavailable_reason",
    "UNARY",
    "BINARY",
    "ACTIVATIONS",
    "bias_act",
    "sum_rows",
    "max_rows",
    "mean_rows",
    "softmax",
    "softmax_backward",
    "layer_norm",
    "layer_norm_backward",
    "matmul",
    "gemm",
    "attention",
    "axpby",
]
