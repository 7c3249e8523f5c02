"""Forward-mode AD: dual tensors carry a tangent through every op (``row.jvp``).

    with forward_ad.dual_level():
        x = forward_ad.make_dual(primal, tangent)
        y = f(x)
        y_primal, y_tangent = forward_ad.unpack_dual(y)   # y_tangent = J_f(primal) @ tangent

One level at a time: tangents of inner computations are not themselves
differentiated in forward mode (nest reverse mode inside instead).
"""

from __future__ import annotations

import threading
from collections import namedtuple

from tensorplay import _dispatch
from tensorplay._factories import zeros, zeros_like
from tensorplay._tensor import Tensor
from tensorplay._views import as_strided_params
from tensorplay.autograd._derivatives import storage_cells as _cells

__all__ = [
    "dual_level",
    "make_dual",
    "unpack_dual",
    "UnpackedDualTensor",
    "enter_dual_level",
    "exit_dual_level",
]

UnpackedDualTensor = namedtuple("UnpackedDualTensor", ["primal", "tangent"])


class _State(threading.local):
    level: int | None = None  # the active level, None outside dual_level()
    busy = False  # True while a jvp formula runs: its own ops carry no tangents


state = _State()


def enter_dual_level() -> int:
    if state.level is not None:
        raise RuntimeError(
            "forward_ad: nested dual levels are not supported; exit the current dual_level() first"
        )
    state.level = 0
    _dispatch.state.block()  # the fast path knows nothing of tangents
    return 0


def exit_dual_level(*, level: int | None = None) -> None:
    if state.level is not None:
        state.level = None
        _dispatch.state.unblock()


class dual_level:
    """Context manager in which dual tensors exist; their tangents are dropped on exit."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()
        return False


def make_dual(tensor: Tensor, tangent: Tensor, *, level: int | None = None) -> Tensor:
    """A view of ``tensor`` whose tangent is ``tangent`` (same shape and dtype)."""
    if state.level is None:
        raise RuntimeError("make_dual(): call it inside `with forward_ad.dual_level():`")
    if not isinstance(tangent, Tensor) or tangent.shape != tensor.shape:
        raise ValueError(
            f"make_dual(): the tangent must be a Tensor of shape "
            f"{list(tensor.shape)}, got {getattr(tangent, 'shape', type(tangent))}"
        )
    if not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        raise ValueError(
            f"make_dual(): expected a floating point or complex primal, got {tensor.dtype}"
        )
    dual = tensor.view_as(tensor)
    dual._fw_tangent = tangent.to(tensor.dtype)
    return dual


def unpack_dual(tensor: Tensor, *, level: int | None = None) -> UnpackedDualTensor:
    """``(primal, tangent)``; the tangent is None for a tensor without one."""
    tangent = tensor.__dict__.get("_fw_tangent") if state.level is not None else None
    if tangent is None:
        return UnpackedDualTensor(tensor, None)
    primal = tensor.view_as(tensor)
    primal.__dict__.pop("_fw_tangent", None)  # the view op propagated it; the primal has none
    return UnpackedDualTensor(primal, tangent)


def tangent_of(x):
    if isinstance(x, Tensor):
        return x.__dict__.get("_fw_tangent")
    if isinstance(x, (list, tuple)):
        return [tangent_of(y) for y in x]
    return None


def needs_forward(items) -> bool:
    """Does any input carry a tangent (inside an active level, outside a jvp formula)?"""
    if state.level is None or state.busy:
        return False
    for x in items:
        if isinstance(x, Tensor) and "_fw_tangent" in x.__dict__:
            return True
    return False


class _Ctx:
    def __init__(self, inputs, params, out):
        self.inputs, self.params, self.out = inputs, params, out


def propagate(row, targs, params, result, target=None) -> None:
    """Attach ``row.jvp``'s output tangent to ``result`` (and to ``target`` if in place)."""
    if row.jvp is None:
        raise NotImplementedError(
            f"the forward-mode derivative (jvp) for '{row.name}' is not implemented"
        )
    seq = row.n_inputs == "seq"
    tangents = tangent_of(targs[0]) if seq else [tangent_of(x) for x in targs]
    state.busy = True
    try:
        out_tangent = row.jvp(_Ctx(targs, params, result), *tangents)
    finally:
        state.busy = False
    if out_tangent is None:
        return
    outs = result if isinstance(result, tuple) else (result,)
    tans = out_tangent if isinstance(out_tangent, tuple) else (out_tangent,)
    for o, t in zip(outs, tans):
        if t is not None and (o.dtype.is_floating_point or o.dtype.is_complex):
            if t.shape != o.shape:
                t = t.expand(*o.shape)
            o._fw_tangent = t.to(o.dtype)
    if target is not None and "_fw_tangent" in outs[0].__dict__:
        _set_tangent(target, outs[0]._fw_tangent)


def overwrite(target: Tensor, src=None) -> None:
    """``target``'s tangent after ``copy_(src)``, ``fill_(src)``, ``zero_()`` or a random
    fill: src's tangent (broadcast, cast to target's dtype and device), or zero when src
    has none (the new values do not depend on the old ones)."""
    t = tangent_of(src)
    if t is None:
        t = zeros_like(target)
    else:
        t = t.to(device=target.device, dtype=target.dtype).expand(*target.shape)
    _set_tangent(target, t)


def _set_tangent(target: Tensor, t: Tensor) -> None:
    """Give ``target`` tangent ``t`` after an in-place write; when target is a view, the
    written region of its base's tangent changes too (as torch's tangents, views of the
    base's, do). Regions are matched through storage cells, as in ``as_strided``'s jvp."""
    target._fw_tangent = t
    base = target._base
    if base is None or target.numel() == 0:
        return
    old = base.__dict__.get("_fw_tangent")
    if old is None:
        old = zeros_like(base)
    base_cells, view_cells, n = _cells(base, as_strided_params(target))
    cells = zeros(n, dtype=old.dtype, device=old.device)
    cells = cells.scatter(0, base_cells, old.reshape(-1)).scatter(0, view_cells, t.reshape(-1))
    base._fw_tangent = cells.index_select(0, base_cells).reshape(base.shape)
