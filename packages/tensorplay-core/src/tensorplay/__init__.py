"""TensorPlay: a PyTorch-style tensor framework whose extension path is first-class.

>>> import tensorplay as tp
>>> (tp.ones(2, 3) + tp.arange(3)).sum().item()
12.0
"""

import sys
from pkgutil import extend_path

# Other distributions (tensorplay-library, -compile, ...) add subpackages to this package.
__path__ = extend_path(__path__, __name__)

# ruff: noqa: E402 - the imports follow the __path__ setup above
from tensorplay import _dtype, _optable, autograd, cuda, func, overrides, profiler
from tensorplay._bind import allclose, equal, max, min
from tensorplay._capture import GraphCaptureError
from tensorplay._device import device
from tensorplay._dlpack import from_dlpack
from tensorplay._dtype import (  # torch's aliases
    bfloat16,
    bool,
    complex64,
    complex64 as cfloat,
    complex128,
    complex128 as cdouble,
    dtype,
    float16,
    float16 as half,
    float32,
    float32 as float,
    float64,
    float64 as double,
    get_default_dtype,
    int8,
    int16,
    int16 as short,
    int32,
    int32 as int,
    int64,
    int64 as long,
    promote_types,
    set_default_dtype,
    uint8,
)
from tensorplay._factories import Generator, initial_seed, manual_seed, seed
from tensorplay._meta import broadcast_shapes
from tensorplay._storage import UntypedStorage
from tensorplay._tensor import Size, Tensor
from tensorplay._version import __version__
from tensorplay._vmap import vmap
from tensorplay.amp import autocast, get_autocast_dtype, is_autocast_enabled
from tensorplay.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from tensorplay.overrides import (  # hand-written and overridable (see overrides)
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    numel,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from tensorplay.utils import _python_dispatch  # noqa: F401 - installs the dispatch-mode hook

# Every public op-table row is ``tp.<name>`` (one definition per op, in a _rows/ module); the
# function is generated on first access, by the module ``__getattr__`` below.
_PUBLIC_OPS = {
    row.name: row
    for row in _optable.ROWS
    if not row.name.endswith("_dim") and row.name != "contiguous_copy" and row.name[0] != "_"
}


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def result_type(tensor1, tensor2) -> dtype:
    """The dtype an op on ``tensor1`` and ``tensor2`` returns (PyTorch promotion)."""
    groups = ([], [], [])
    for x in (tensor1, tensor2):
        if isinstance(x, Tensor):
            groups[0 if x.dim() else 1].append(x.dtype)
        else:
            groups[2].append(_dtype.scalar_dtype(x))
    return _dtype.result_type_of(*groups)


def can_cast(from_: dtype, to: dtype) -> bool:  # noqa: A002
    return _dtype.can_cast(from_, to)


_LAZY = {
    "library": "tensorplay-library",
    "compile": "tensorplay-compile",
    "compiler": "tensorplay-compile",
    "graph": "tensorplay-compile",
    "kernels": "tensorplay-kernels",
    "nn": "tensorplay-nn",
    "optim": "tensorplay-nn",
    "save": "tensorplay-nn",
    "load": "tensorplay-nn",
}
# Lazy names that are a function of a component's module: name -> that module.
_LAZY_FUNCTIONS = {"compile": "compiler", "save": "serialization", "load": "serialization"}


def __getattr__(name: str):
    row = _PUBLIC_OPS.get(name)
    if row is not None:
        globals()[name] = row.fn
        return row.fn
    if name == "ops":  # tp.ops.<namespace>.<op>: operators registered by tensorplay.library
        from tensorplay._ops import ops

        globals()["ops"] = ops
        return ops
    # Components are separate distributions: resolve them on first use, never at import.
    if name in _LAZY:
        import importlib

        mod_name = _LAZY_FUNCTIONS.get(name, name)
        try:
            mod = importlib.import_module(f"tensorplay.{mod_name}")
        except ImportError as e:
            raise ImportError(
                f"tensorplay.{name} needs the {_LAZY[name]} distribution: "
                f"pip install ./packages/{_LAZY[name]} ({e})"
            ) from e
        return getattr(mod, name) if name in _LAZY_FUNCTIONS else mod
    raise AttributeError(f"module 'tensorplay' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC_OPS))


# Last: every module has added its Tensor methods; make the hand-written ones overridable.
overrides.install(sys.modules[__name__])
