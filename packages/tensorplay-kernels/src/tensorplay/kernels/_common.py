"""Argument checks and small helpers shared by the ``tpk`` operator modules."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import tensorplay as tp
from tensorplay.kernels._capability import triton_unavailable_reason

__all__ = [
    "FLOATS",
    "triton_src",
    "acc_type",
    "check_tensor",
    "check_same",
    "ensure_triton",
    "fake_like",
]

FLOATS = (tp.float16, tp.bfloat16, tp.float32, tp.float64)


@functools.cache
def _load_src() -> ModuleType:
    from tensorplay.kernels import _triton_src  # noqa: PLC0415 - imports Triton

    return _triton_src


def triton_src() -> ModuleType:
    """The kernel module (imports Triton on first use)."""
    return _load_src()


_ready: set[str] = set()  # device types Triton was found able to run on (it stays able)


def ensure_triton(op: str, device_type: str) -> ModuleType:
    """The kernel module, or a clear error when Triton cannot run on this device here."""
    if device_type not in _ready:
        why = triton_unavailable_reason(device_type)
        if why is not None:
            raise RuntimeError(f"{op}: cannot run the Triton kernel on {device_type}: {why}")
        _ready.add(device_type)
    return _load_src()


def acc_type(dtype: tp.dtype) -> Any:
    """The Triton accumulation type for ``dtype``: float64 stays, the rest use float32."""
    return _load_src().ACC_TYPES[dtype]


def check_tensor(op: str, name: str, x: Any, dtypes: tuple = FLOATS, min_dim: int = 0) -> None:
    """``x`` is a tensor of one of ``dtypes`` with at least ``min_dim`` dimensions."""
    if not isinstance(x, tp.Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(x).__name__}")
    if x.dtype not in dtypes:
        names = ", ".join(str(d).split(".")[-1] for d in dtypes)
        raise TypeError(
            f"{op}: {name} has dtype {x.dtype}; supported: {names}. Convert it first, e.g. "
            f"{name}.to(tp.float32)"
        )
    if x.ndim < min_dim:
        raise ValueError(
            f"{op}: {name} must have at least {min_dim} dimension(s), got shape {tuple(x.shape)}"
        )


def check_same(op: str, names: tuple[str, str], a: tp.Tensor, b: tp.Tensor) -> None:
    """``a`` and ``b`` share dtype and device (the kernels do not promote or copy)."""
    if a.dtype is not b.dtype:
        raise TypeError(
            f"{op}: {names[0]} is {a.dtype} but {names[1]} is {b.dtype}; cast one, e.g. "
            f"{names[1]}.to({names[0]}.dtype)"
        )
    if a.device is not b.device:  # devices are interned (device.__eq__ is identity)
        raise ValueError(
            f"{op}: {names[0]} is on {a.device} but {names[1]} is on {b.device}; move them to "
            "one device"
        )


def fake_like(x: tp.Tensor, shape: tuple[int, ...] | None = None) -> tp.Tensor:
    """A data-free result on ``x``'s device with ``x``'s dtype (for fake kernels)."""
    return x.new_empty(tuple(x.shape) if shape is None else shape)
