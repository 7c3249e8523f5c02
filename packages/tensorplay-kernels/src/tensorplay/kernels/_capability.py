"""What this process can run: Triton (compiled on CUDA, or its CPU interpreter), TileLang.

Each probe returns ``None`` when the capability is there and otherwise the reason, so a
test can ``pytest.skip(reason)`` and an op can raise an error that says what to install.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys

from tensorplay import cuda

__all__ = [
    "triton_unavailable_reason",
    "tilelang_unavailable_reason",
    "interpreting",
    "import_triton",
]


def import_triton():
    """Import Triton, choosing its mode first.

    Without CUDA, Triton can only run through its interpreter, and the interpreter has to
    be chosen before ``triton`` is imported (``triton.language``'s own ``@jit`` helpers,
    such as ``tl.sum``, are built at import time). So when nothing imported Triton yet and
    there is no GPU, this sets ``TRITON_INTERPRET=1`` first; otherwise the mode stays what
    the process chose (an explicit ``TRITON_INTERPRET=0`` keeps Triton compiling, e.g. to
    build GPU binaries ahead of time on a machine without a GPU).
    """
    if "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ:
        if cuda.unavailable_reason() is not None:
            os.environ["TRITON_INTERPRET"] = "1"
    import triton  # noqa: PLC0415 - optional dependency, imported on first use

    return triton


def interpreting() -> bool:
    """True when Triton kernels run through the CPU interpreter (``TRITON_INTERPRET=1``)."""
    triton = import_triton()
    return bool(triton.knobs.runtime.interpret)


def _install_extra(extra: str) -> str:
    # by local path: our distributions are not on an index (PyPI's `tensorplay` is unrelated)
    return f"pip install './packages/tensorplay-kernels[{extra}]' from a TensorPlay checkout"


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_unavailable_reason(device_type: str = "cpu") -> str | None:
    """Why Triton kernels cannot run on ``device_type`` here (None: they can)."""
    if not _triton_installed():
        return f"Triton is not installed ({_install_extra('triton')})"
    if device_type == "cuda":
        why = cuda.unavailable_reason()
        if why is not None:
            return f"CUDA not available: {why}"
        if interpreting():
            return "TRITON_INTERPRET=1 is set: Triton runs kernels on the CPU interpreter only"
        return None
    if device_type == "cpu":
        if not interpreting():
            return (
                "Triton runs CPU tensors only through its interpreter: set TRITON_INTERPRET=1 "
                "before the first import of triton"
            )
        return None
    return f"Triton kernels run on 'cpu' (interpreter) and 'cuda', not {device_type!r}"


@functools.cache
def tilelang_unavailable_reason() -> str | None:
    """Why TileLang kernels cannot run here (None: they can)."""
    if importlib.util.find_spec("tilelang") is None:
        return (
            f"TileLang is not installed ({_install_extra('tilelang')}; it "
            "requires torch and a CUDA GPU)"
        )
    why = cuda.unavailable_reason()
    if why is not None:
        return f"CUDA not available: {why} (TileLang kernels run on CUDA only)"
    return None
