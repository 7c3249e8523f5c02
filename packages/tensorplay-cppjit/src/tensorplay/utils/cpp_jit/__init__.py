"""C++/CUDA JIT and AOT for TensorPlay (distribution ``tensorplay-cppjit``).

Will hold ``load_inline`` / ``load``-style builders over ``apache-tvm-ffi``
(``tvm_ffi.cpp``, built with ``ninja``) whose kernels take and return TensorPlay tensors
through DLPack.
"""

from __future__ import annotations

__all__: list[str] = []
