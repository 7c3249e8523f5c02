"""Imported first by each component (tensorplay.library, .graph, .compiler, .kernels,
.utils.cpp_jit, .nn, .optim, .utils.data). It raises ImportError, naming the problem and
the fix, when the imported ``tensorplay`` is not TensorPlay's core but PyPI's unrelated
package of the same name. That beats an obscure AttributeError later. The check reads two
``sys.modules`` entries."""

from __future__ import annotations

import sys

from tensorplay.utils._install import require_core

_COMPONENTS = {
    "tensorplay.library": "tensorplay-library",
    "tensorplay.graph": "tensorplay-compile",
    "tensorplay.compiler": "tensorplay-compile",
    "tensorplay.kernels": "tensorplay-kernels",
    "tensorplay.utils.cpp_jit": "tensorplay-cppjit",
    "tensorplay.nn": "tensorplay-nn",
    "tensorplay.optim": "tensorplay-nn",
    "tensorplay.utils.data": "tensorplay-nn",
    "tensorplay.oplib": "tensorplay-oplib",
}


def _importer() -> str | None:
    """The component being imported now (its ``__init__`` imported this module)."""
    for module, dist in _COMPONENTS.items():
        spec = getattr(sys.modules.get(module), "__spec__", None)
        if getattr(spec, "_initializing", False):
            return f"{module} ({dist})"
    return None


require_core(_importer())
