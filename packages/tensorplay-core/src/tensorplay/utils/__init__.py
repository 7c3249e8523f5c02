"""Utilities; other distributions (tensorplay-cppjit, tensorplay-nn) add submodules here."""

import importlib
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

# submodule -> the distribution that provides it (not tensorplay-core)
_COMPONENTS = {"cpp_jit": "tensorplay-cppjit", "data": "tensorplay-nn"}


def __getattr__(name: str):
    # ``from tensorplay.utils import cpp_jit`` / ``tp.utils.cpp_jit`` land here while the
    # submodule is not imported yet: import it, or say which distribution provides it.
    dist = _COMPONENTS.get(name)
    if dist is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    full = f"{__name__}.{name}"
    try:
        return importlib.import_module(full)
    except ModuleNotFoundError as e:
        if e.name != full:
            raise  # the component is there but one of its own imports is missing
        raise ModuleNotFoundError(
            f"{full} needs the {dist} distribution: pip install ./packages/{dist} "
            f"(from a TensorPlay checkout) or pip install --no-index --find-links dist/ {dist} "
            f"(from our wheels) ({e})",
            name=full,
        ) from e
