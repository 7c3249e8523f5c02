"""Devices (``cpu``, ``cuda[:i]``, ``meta``) and the array module behind each.

CPU arrays are numpy, CUDA arrays are CuPy (optional: ``tensorplay-core[cuda]``),
and ``meta`` tensors hold no data at all. Device objects are interned so the
dispatcher can compare them with ``is``.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["device", "cupy_or_raise", "array_module"]

_TYPES = ("cpu", "cuda", "meta")


# Set by tensorplay.overrides: ``hook(cls, args, kwargs)`` runs a ``tp.device(...)`` call
# through the active function modes, or returns ``NotImplemented`` when none is active.
mode_hook = None


class _DeviceType(type):
    """``tp.device(...)`` passes the function modes first, as ``torch.device`` does (a mode
    can return its own object); internal code builds devices with ``_make``."""

    def __call__(cls, *args, **kwargs):
        hook = mode_hook
        if hook is not None:
            result = hook(cls, args, kwargs)
            if result is not NotImplemented:
                return result
        return cls.__new__(cls, *args, **kwargs)


class device(metaclass=_DeviceType):
    """``tp.device("cpu" | "cuda" | "cuda:0" | "meta")`` or ``tp.device("cuda", 1)``."""

    __slots__ = ("type", "index")
    _cache: dict = {}

    def __new__(cls, spec="cpu", index: int | None = None):
        if isinstance(spec, device):
            return spec
        key = (spec, index)
        hit = cls._cache.get(key)
        if hit is not None:
            return hit
        typ, idx = _parse(spec, index)
        canon = cls._cache.get((typ, idx, "canon"))
        if canon is None:
            canon = object.__new__(cls)
            canon.type, canon.index = typ, idx
            cls._cache[(typ, idx, "canon")] = canon
        cls._cache[key] = canon
        return canon

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + (
            f", index={self.index})" if self.index is not None else ")"
        )

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = _make(other)
        return self is other

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (str(self),))


def _parse(spec, index):
    if isinstance(spec, int) and not isinstance(spec, bool):
        return "cuda", spec
    if not isinstance(spec, str):
        raise TypeError(f"device(): expected a string like 'cpu' or 'cuda:0', got {spec!r}")
    typ, sep, rest = spec.partition(":")
    if typ not in _TYPES:
        raise RuntimeError(
            f"device(): unknown device type {typ!r} in {spec!r}; expected one of {list(_TYPES)}"
        )
    if sep:
        if index is not None:
            raise ValueError(f"device(): index given twice in device({spec!r}, {index})")
        if not rest.isdigit():
            raise RuntimeError(f"device(): invalid device index in {spec!r}")
        index = int(rest)
    if index is not None and (not isinstance(index, int) or index < 0):
        raise RuntimeError(f"device(): device index must be a non-negative int, got {index!r}")
    if typ == "cuda" and index is None:
        index = None  # "cuda" means the current device, like torch
    if typ != "cuda" and index not in (None, 0):
        raise RuntimeError(f"device(): {typ} has a single device, got index {index}")
    return typ, (None if typ != "cuda" else index)


def _make(spec="cpu", index: int | None = None) -> device:
    """``device(spec, index)`` without the function modes (TensorPlay's own calls)."""
    return device.__new__(device, spec, index)


CPU = _make("cpu")
META = _make("meta")


_on_load: list = []  # called with the cupy module once it imports and sees a device


def on_cupy_loaded(fn) -> None:
    """Run ``fn(cupy)`` when CuPy is first loaded (at once when it already is): how
    ``tp.cuda`` installs its allocator without importing CuPy at ``import tensorplay``."""
    _on_load.append(fn)
    if _cupy.cache_info().currsize and _cupy()[0] is not None:
        fn(_cupy()[0])


@functools.lru_cache(maxsize=1)
def _cupy():
    try:
        import cupy  # noqa: PLC0415 - optional dependency, imported on first CUDA use
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name == "cupy":
            return None, (
                "CuPy is not installed; add it with the CUDA extra of tensorplay-core: "
                "pip install './packages/tensorplay-core[cuda]' from a TensorPlay checkout"
            )
        return None, f"CuPy is installed but does not import: {type(e).__name__}: {e}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CuPy raises driver-specific errors
        return None, f"CuPy is installed but CUDA is unusable: {e}"
    if n == 0:
        return None, "CuPy is installed but no CUDA device is visible"
    for fn in _on_load:
        fn(cupy)
    return cupy, None


def cuda_unavailable_reason() -> str | None:
    """None when CUDA works, else the exact reason it does not."""
    return _cupy()[1]


def cupy_or_raise():
    mod, why = _cupy()
    if mod is None:
        raise RuntimeError(f"CUDA is not available: {why}")
    return mod


def array_module(dev: device):
    """numpy for CPU, cupy for CUDA; meta tensors have no array module."""
    if dev is CPU:
        return np
    if dev.type == "cuda":
        return cupy_or_raise()
    raise RuntimeError(f"device '{dev}' holds no data")


def canonical(dev) -> device:
    """Resolve ``dev`` (str/int/device/None) and pin ``cuda`` to the current index."""
    d = _make(dev) if dev is not None else CPU
    if d.type == "cuda":
        cp = cupy_or_raise()
        if d.index is None:
            d = _make("cuda", cp.cuda.runtime.getDevice())
    return d
