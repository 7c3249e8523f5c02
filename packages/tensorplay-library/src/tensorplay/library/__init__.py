"""User-defined operators for TensorPlay (distribution ``tensorplay-library``).

``custom_op`` turns a Python function into a registered operator (``tp.ops.ns.op``)
that keeps one contract through eager execution (per-device kernels), autograd
(``register_autograd``), meta/fake execution (``register_fake``), graph capture (one
node) and the testing utilities (``opcheck``)::

    import tensorplay as tp
    from tensorplay import library

    @library.custom_op("mylib::scaled", mutates_args=())
    def scaled(x):
        return tp.mul(x, 2.0)

    @scaled.register_autograd
    def _(ctx, grad):
        return (tp.mul(grad, 2.0),)
"""

from __future__ import annotations

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.library._api import (
    custom_op,
    define,
    get_kernel,
    impl,
    impl_abstract,
    register_autocast,
    register_autograd,
    register_fake,
    register_kernel,
    register_tensorplay_dispatch,  # not in __all__: the spec's list (as _scoped_library)
    register_vmap,
    tile_lang_op,
    triton_op,
)
from tensorplay.library._kernel_wrappers import (
    TileLangKernelWrapper,
    TritonKernelWrapper,
    wrap_tilelang,
    wrap_triton,
)
from tensorplay.library._library import (  # _scoped_library: private, as in PyTorch
    Library,
    _scoped_library as _scoped_library,
)
from tensorplay.library._op import CustomOpDef
from tensorplay.library._opcheck import opcheck
from tensorplay.library._registry import get_op, has_op
from tensorplay.library._schema import infer_schema

__all__ = [
    "Library",
    "CustomOpDef",
    "custom_op",
    "triton_op",
    "tile_lang_op",
    "wrap_triton",
    "wrap_tilelang",
    "register_kernel",
    "register_fake",
    "register_autograd",
    "register_vmap",
    "register_autocast",
    "define",
    "impl",
    "impl_abstract",
    "infer_schema",
    "opcheck",
    "get_kernel",
    "get_op",
    "has_op",
    "TritonKernelWrapper",
    "TileLangKernelWrapper",
]
