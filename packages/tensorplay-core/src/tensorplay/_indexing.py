"""``tensor[index]`` and ``tensor[index] = value`` with PyTorch semantics.

Basic indexing (ints, slices with positive steps, None, ``...``) is a view:
its geometry is computed here and nothing is copied. Any tensor/list/bool
index makes it *advanced* indexing: a copy, computed by numpy/CuPy.
"""

from __future__ import annotations

import numpy as np

from tensorplay import _dtype as D
from tensorplay._tensor import Tensor, empty_tensor, make_view, strides_of


def _is_basic(item) -> bool:
    return (
        item is None
        or item is Ellipsis
        or isinstance(item, slice)
        or (isinstance(item, int) and not isinstance(item, bool))
    )


def _normalize(index) -> tuple:
    if not isinstance(index, tuple):
        index = (index,)
    return index


def _expand_ellipsis(index, ndim):
    n_used = sum(
        1
        for i in index
        if i is not None
        and i is not Ellipsis
        and not (isinstance(i, Tensor) and i.dtype is D.bool)
        and not (isinstance(i, np.ndarray) and i.dtype == bool)
    )
    n_used += sum(i.dim() for i in index if isinstance(i, Tensor) and i.dtype is D.bool)
    ell = [k for k, i in enumerate(index) if i is Ellipsis]
    if len(ell) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    fill = (slice(None),) * (ndim - n_used)
    if ell:
        k = ell[0]
        return index[:k] + fill + index[k + 1 :]
    return index + fill


def basic_geometry(t: Tensor, index: tuple):
    """(shape, stride, offset) of ``t[index]`` for a basic (view) index."""
    shape, stride, off = t._shape, strides_of(t), t._offset
    out_shape, out_stride = [], []
    d = 0
    for item in index:
        if item is None:
            out_shape.append(1)
            out_stride.append(0)
            continue
        n, s = shape[d], stride[d]
        if isinstance(item, slice):
            start, stop, step = item.start, item.stop, item.step
            step = 1 if step is None else int(step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, _ = slice(start, stop, 1).indices(n)
            length = max(0, (stop - start + step - 1) // step)
            if length:
                off += start * s
            out_shape.append(length)
            out_stride.append(s * step)
        else:
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n}")
            off += (i % n) * s
        d += 1
    return tuple(out_shape), tuple(out_stride), off


def _to_array(item, t: Tensor):
    if isinstance(item, Tensor):
        if item.dtype.category > 1:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        return item._check_data("indexing")
    if isinstance(item, (list, tuple)):
        arr = np.asarray(item)
        if arr.dtype.kind not in "iub" and arr.size:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        arr = arr.astype(np.int64) if arr.dtype.kind != "b" else arr
        if t.device.type == "cuda":
            from tensorplay._device import cupy_or_raise  # noqa: PLC0415

            return cupy_or_raise().asarray(arr)
        return arr
    return item


def _check_advanced_bounds(index, shape):
    d = 0
    for item in index:
        if item is None:
            continue
        if hasattr(item, "dtype") and item.dtype.kind == "b":
            if tuple(item.shape) != tuple(shape[d : d + item.ndim]):
                raise IndexError(
                    f"The shape of the mask {list(item.shape)} at index {d} does "
                    f"not match the shape of the indexed tensor "
                    f"{list(shape[d : d + item.ndim])}"
                )
            d += item.ndim
            continue
        if hasattr(item, "dtype") and item.size:
            n = shape[d]
            bad = (item >= n) | (item < -n)
            if bool(bad.any()):
                i = int(item[bad].reshape(-1)[0])
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n}")
        d += 1


def _differentiated(t: Tensor) -> bool:
    return t.requires_grad or "_fw_tangent" in t.__dict__


def _grad_on() -> bool:
    from tensorplay.autograd import forward_ad, grad_mode  # noqa: PLC0415

    return grad_mode.state.enabled or forward_ad.state.level is not None


def _index_op(t: Tensor, arrays: tuple) -> Tensor:
    """Advanced indexing as an op-table row (``_index``), so autograd records it."""
    from tensorplay._dispatch import OPS  # noqa: PLC0415

    return OPS["_index"].fn(t, indices=arrays)


def getitem(t: Tensor, index):
    index = _normalize(index)
    if all(_is_basic(i) for i in index):
        index = _expand_ellipsis(index, t.dim())
        geometry = basic_geometry(t, index)
        if _differentiated(t):  # through the as_strided row, so autograd records the view
            from tensorplay._dispatch import OPS  # noqa: PLC0415

            return OPS["as_strided"].fn(t, *geometry)
        return make_view(t, *geometry)
    index = _expand_ellipsis(index, t.dim())
    arrays = tuple(_to_array(i, t) for i in index)
    _check_advanced_bounds(arrays, t._shape)
    if _differentiated(t) and _grad_on():
        return _index_op(t, arrays)
    if t._data is None:
        probe = np.broadcast_to(np.empty((), np.int8), t._shape)[arrays]
        return empty_tensor(probe.shape, t.dtype, t.device)
    from tensorplay._tensor import adopt_array  # noqa: PLC0415

    return adopt_array(t._data[arrays], t.dtype, t.device)


def setitem(t: Tensor, index, value) -> None:
    from tensorplay._dispatch import check_writable  # noqa: PLC0415

    check_writable("__setitem__", t)
    index = _expand_ellipsis(_normalize(index), t.dim())
    tracked = _differentiated(t) or (isinstance(value, Tensor) and _differentiated(value))
    if tracked and _grad_on():
        _setitem_recorded(t, index, value)
        return
    if all(_is_basic(i) for i in index):
        target = make_view(t, *basic_geometry(t, index))
        target.copy_(value) if isinstance(value, Tensor) else target.fill_(value)
        return
    arrays = tuple(_to_array(i, t) for i in index)
    _check_advanced_bounds(arrays, t._shape)
    if t._data is None:
        return
    if isinstance(value, Tensor):
        if value.device is not t.device and value.dim() != 0:
            raise RuntimeError(
                f"__setitem__(): value is on {value.device} but the tensor is on {t.device}"
            )
        value = value._data if value.device is t.device else value.item()
    try:
        with np.errstate(all="ignore"):
            t._data[arrays] = value
    except ValueError as e:
        raise RuntimeError(f"__setitem__(): {e}") from None
    t._bump_version()


def _setitem_recorded(t: Tensor, index: tuple, value) -> None:
    """``t[index] = value`` as the in-place ``_index_put_`` row, so autograd records it.

    A basic index becomes the index arrays of the positions it selects (numpy's basic
    indexing is torch's for positive steps), which works for any layout of ``t``.
    """
    from tensorplay._dispatch import OPS  # noqa: PLC0415
    from tensorplay._factories import tensor  # noqa: PLC0415

    if all(_is_basic(i) for i in index):
        basic_geometry(t, index)  # bounds and step checks, with torch's messages
        positions = np.arange(t.numel()).reshape(t._shape)[index]
        arrays = tuple(_on_device(a, t) for a in np.unravel_index(positions, t._shape))
    else:
        arrays = tuple(_to_array(i, t) for i in index)
        _check_advanced_bounds(arrays, t._shape)
    if not isinstance(value, Tensor):
        value = tensor(value, dtype=t.dtype, device=t.device)
    OPS["_index_put"].inplace_fn(t, value, indices=arrays)


def _on_device(arr: np.ndarray, t: Tensor):
    if t.device.type == "cuda":
        from tensorplay._device import cupy_or_raise  # noqa: PLC0415

        return cupy_or_raise().asarray(arr)
    return arr
