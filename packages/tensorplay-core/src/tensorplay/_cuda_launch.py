"""Launches of TensorPlay's own CUDA kernels (``_cuda_pointwise``; CuPy ``Function`` objects).

With ``tensorplay._C`` built, a launch is one call into C that converts the arguments by a
signature string and calls the driver's ``cuLaunchKernel`` (``_C.cuda_launch``). Its twin,
used by pure-Python installs, is the CuPy ``Function``'s own call, which builds a Python
object per argument and costs several times the host time.
"""

from __future__ import annotations

import numpy as np

from tensorplay import _device
from tensorplay._native import NATIVE

__all__ = ["launch", "CODES"]

# signature code -> numpy scalar type (the twin hands CuPy typed numbers)
_NUMPY = {
    "p": np.uint64,  # a device address
    "f": np.float32,
    "d": np.float64,
    "b": np.int8,
    "B": np.uint8,
    "h": np.int16,
    "i": np.int32,
    "I": np.uint32,
    "q": np.int64,
    "?": np.bool_,
}
# numpy dtype char -> the signature code of a number of that dtype
CODES = {"f": "f", "d": "d", "b": "b", "B": "B", "h": "h", "i": "i", "l": "q", "q": "q", "?": "?"}


def launch(function, grid: int, block: int, signature: str, args: tuple) -> None:
    """Launch ``function`` (a ``cupy.cuda.Function``: ``RawKernel.kernel``) over ``grid``
    blocks of ``block`` threads on CuPy's current stream; ``args`` are device addresses
    (ints) and numbers, one ``signature`` code each (p, f, d, b, B, h, i, I, q, ?)."""
    stream = _device.cupy_or_raise().cuda.get_current_stream()
    if NATIVE is not None:
        NATIVE.cuda_launch(function.ptr, grid, block, stream.ptr, signature, args)
    else:
        typed = tuple(_NUMPY[c](a) for c, a in zip(signature, args, strict=True))
        function((grid,), (block,), typed, stream=stream)
