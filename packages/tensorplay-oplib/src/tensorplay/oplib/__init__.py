"""Compiled operator libraries for TensorPlay (distribution ``tensorplay-oplib``).

A YAML file defines the operators of one namespace (schema, C++/CUDA kernel per device,
shape rule, derivatives, tags); ``build`` compiles the kernels (through ``cpp_jit``) and
writes the library, and a wheel of it (the hatch hook ``tensorplay-oplib``, or
``python -m tensorplay.oplib build ops.yaml -o dist/``) registers the operators on first
access to ``tp.ops.<namespace>`` wherever it is installed: no compiler, no import of the
user's package. The operators are ``custom_op`` operators. See ``docs/oplib.md``::

    from tensorplay import oplib

    folder = oplib.build("ops.yaml", "build/")   # compile and check
    lib = oplib.load(folder)                     # register (what an install does lazily)
    tp.ops.mylib.fused_bias_gelu(x, b)
"""

from __future__ import annotations

import importlib
from typing import Any

# First: ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core
from tensorplay.oplib._errors import OplibError
from tensorplay.oplib._installed import installed
from tensorplay.oplib._loader import OpLibrary, load, loaded

__all__ = ["OplibError", "OpLibrary", "build", "build_wheel", "installed", "load", "loaded"]

# The build side imports cpp_jit and PyYAML, which loading an installed library does not
# need: it is imported on first use of these names.
_BUILD = {"build": "tensorplay.oplib._build", "build_wheel": "tensorplay.oplib._wheel"}


def __getattr__(name: str) -> Any:
    module = _BUILD.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorplay.oplib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
