"""``tensor[index]`` and ``tensor[index] = value`` with PyTorch semantics.

Basic indexing (ints, slices with positive steps, None, ``...``) is a view:
its geometry is computed here and nothing is copied. Any tensor/list/bool
index makes it *advanced* indexing: a copy, computed by numpy/CuPy.
"""

from __future__ import annotations

import numpy as np

from tensorplay import _dtype as D
from tensorplay._device import CPU, cupy_or_raise
from tensorplay._device_checks import host_sync
from tensorplay._dispatch import OPS, check_writable
from tensorplay._factories import tensor
from tensorplay._tensor import Tensor, adopt_array, empty_tensor, make_view, strides_of
from tensorplay._vmap import BatchedTensor, check_write, getitem as batched_getitem
from tensorplay.autograd import forward_ad, grad_mode


def _is_int(item) -> bool:
    """An index that selects one position: a Python/numpy int or a 0-d integer tensor
    (torch selects with those, so they never take part in advanced indexing)."""
    if isinstance(item, (int, np.integer)):
        return not isinstance(item, bool)
    return isinstance(item, Tensor) and item._shape == () and item.dtype.category == 1


def _is_bool_scalar(item) -> bool:
    """``True``/``False`` (Python, numpy or a 0-d bool tensor): torch adds a dimension of
    size 1 there and indexes it with ``[0]`` (True) or ``[]`` (False)."""
    if isinstance(item, (bool, np.bool_)):
        return True
    if isinstance(item, np.ndarray):
        return item.ndim == 0 and item.dtype == bool
    return isinstance(item, Tensor) and item._shape == () and item.dtype is D.bool


def _as_tuple(index) -> tuple:
    """torch's reading of an index: a tuple is one item per dimension; so is a short list
    holding a slice, None, ``...``, a tensor or a sequence (the legacy numpy rule torch keeps,
    with a deprecation warning there); anything else is a single item."""
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and len(index) < 32:
        for i in index:
            if (
                i is None
                or i is Ellipsis
                or isinstance(i, (slice, Tensor, list, tuple, np.ndarray))
            ):
                return tuple(index)
    return (index,)


def _to_array(item, device):
    """A tensor, list or array index as a numpy/CuPy array on ``device``."""
    if isinstance(item, Tensor):
        if item.dtype.category > 1:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        arr = item._check_data("indexing")
        if item.device is not device and item.device.type == "cuda":
            arr = arr.get()
    else:
        arr = np.asarray(item)
        if arr.dtype.kind not in "iub" and arr.size:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if arr.dtype.kind != "b":
            arr = arr.astype(np.int64)
    return _on_device(arr, device)


def _n_consumed(item) -> int:
    """How many dimensions of the indexed tensor ``item`` uses up."""
    if item is None or item is Ellipsis or _is_bool_scalar(item):
        return 0
    if isinstance(item, slice) or _is_int(item):  # bools were answered above
        return 1
    if isinstance(item, Tensor):
        return item.dim() if item.dtype in (D.bool, D.uint8) else 1
    arr = np.asarray(item)
    return arr.ndim if arr.dtype.kind == "b" else 1


def plan(shape: tuple, stride: tuple, offset: int, index, device):
    """Split a torch index into a view and the advanced indices applied to it.

    torch indexes in two steps, and so does this: ints, slices, None, ``...`` and bool
    scalars make a view (an int selects, removing its dimension); then the tensor, list
    and mask indices index that view, each on the view dimension it stood at. (numpy
    instead treats an int next to an array as one more advanced index, which moves the
    advanced dimensions to the front: ``x[1, :, [0, 1]]`` would come out transposed.)

    Returns ``((shape, stride, offset), arrays)``: the view's geometry, and a tuple of
    index arrays and ``slice(None)`` over the view's dimensions (empty when the index is
    basic). Masks arrive as their nonzero positions, one array per masked dimension.
    """
    index = _as_tuple(index)
    ndim = len(shape)
    consumed = sum(_n_consumed(i) for i in index)
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    out_shape: list = []
    out_stride: list = []
    advanced: dict = {}
    # torch checks index tensors as it reads through them: an empty result checks nothing
    # (x[:0, [5]] is empty even where dimension 1 has 2 elements)
    first_bad = None
    d = 0
    seen_ellipsis = False
    for item in index:
        if item is Ellipsis:
            if seen_ellipsis:
                raise IndexError("an index can only have a single ellipsis ('...')")
            seen_ellipsis = True
            for _ in range(ndim - consumed):
                out_shape.append(shape[d])
                out_stride.append(stride[d])
                d += 1
        elif item is None:
            out_shape.append(1)
            out_stride.append(0)
        elif _is_bool_scalar(item):
            advanced[len(out_shape)] = _on_device(np.zeros(int(bool(item)), np.int64), device)
            out_shape.append(1)
            out_stride.append(0)
        elif _is_int(item):
            n = shape[d]
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n}")
            offset += (i % n) * stride[d]
            d += 1
        elif isinstance(item, slice):
            n, s = shape[d], stride[d]
            step = 1 if item.step is None else int(item.step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, _ = slice(item.start, item.stop, 1).indices(n)
            length = max(0, (stop - start + step - 1) // step)
            if length:
                offset += start * s
            out_shape.append(length)
            out_stride.append(s * step)
            d += 1
        else:
            arr = _to_array(item, device)
            if arr.dtype.kind == "b" or (isinstance(item, Tensor) and item.dtype is D.uint8):
                mask_shape = tuple(shape[d : d + arr.ndim])
                if tuple(arr.shape) != mask_shape:
                    raise IndexError(
                        f"The shape of the mask {list(arr.shape)} at index {d} does not match "
                        f"the shape of the indexed tensor {list(mask_shape)}"
                    )
                if device.type == "cuda":  # where the mask is true decides the shape
                    host_sync("masked selection x[mask] (its shape depends on the mask)")
                for pos in arr.nonzero():
                    advanced[len(out_shape)] = pos
                    out_shape.append(shape[d])
                    out_stride.append(stride[d])
                    d += 1
            else:
                n = shape[d]
                if arr.size and first_bad is None:
                    bad = (arr >= n) | (arr < -n)
                    if bool(bad.any()):
                        i = int(arr[bad].reshape(-1)[0])
                        first_bad = f"index {i} is out of bounds for dimension {d} with size {n}"
                        if n:  # read nowhere if the result is empty; numpy checks anyway
                            arr = arr.clip(-n, n - 1)
                advanced[len(out_shape)] = arr
                out_shape.append(n)
                out_stride.append(stride[d])
                d += 1
    out_shape.extend(shape[d:])
    out_stride.extend(stride[d:])
    if first_bad is not None and _reads_something(out_shape, advanced):
        raise IndexError(first_bad)
    arrays = ()
    if advanced:
        last = max(advanced)
        arrays = tuple(advanced.get(k, slice(None)) for k in range(last + 1))
    return (tuple(out_shape), tuple(out_stride), offset), arrays


def _reads_something(out_shape, advanced) -> bool:
    """Is the result of advanced indexing non-empty (its dims, the index arrays' broadcast
    shape in place of the dims they index)?"""
    kept = [n for k, n in enumerate(out_shape) if k not in advanced]
    try:
        picked = np.broadcast_shapes(*(a.shape for a in advanced.values()))
    except ValueError:
        return True  # mismatched index shapes: the bounds error comes first
    return 0 not in kept and 0 not in picked


def _differentiated(t: Tensor) -> bool:
    return t.requires_grad or "_fw_tangent" in t.__dict__


def _grad_on() -> bool:
    return grad_mode.state.enabled or forward_ad.state.level is not None


def _index_op(t: Tensor, arrays: tuple) -> Tensor:
    """Advanced indexing as an op-table row (``_index``), so autograd records it."""
    return OPS["_index"].fn(t, indices=arrays)


def _view(t: Tensor, geometry) -> Tensor:
    """``t`` viewed with ``geometry``; ``t`` itself when the view would be all of it."""
    shape, stride, offset = geometry
    if shape == t._shape and offset == t._offset and stride == strides_of(t):
        return t
    if _differentiated(t):  # through the as_strided row, so autograd records the view
        return OPS["as_strided"].fn(t, *geometry)
    return make_view(t, *geometry)


def _batched_items(index) -> bool:
    """Does the index hold a tensor batched by ``vmap`` (a sample's index into a tensor
    the batch shares)? Such an index has no data of its own to read here."""
    if isinstance(index, BatchedTensor):
        return True
    return isinstance(index, (tuple, list)) and any(isinstance(i, BatchedTensor) for i in index)


def getitem(t: Tensor, index):
    if _batched_items(index):
        return batched_getitem(t, index)
    geometry, arrays = plan(t._shape, strides_of(t), t._offset, index, t.device)
    if not arrays:
        if _differentiated(t):  # a view even when it covers all of t (x[...] is x's view)
            return OPS["as_strided"].fn(t, *geometry)
        return make_view(t, *geometry)
    v = _view(t, geometry)
    if _differentiated(v) and _grad_on():
        return _index_op(v, arrays)
    if v._data is None:
        probe = np.broadcast_to(np.empty((), np.int8), v._shape)[arrays]  # meta: host index arrays
        return empty_tensor(probe.shape, t.dtype, t.device)

    return adopt_array(v._data[arrays], t.dtype, t.device)


def setitem(t: Tensor, index, value) -> None:
    if isinstance(value, BatchedTensor) or _batched_items(index):
        # (a batched t is a BatchedTensor, with its own __setitem__): every sample would
        # write into the one tensor
        items = index if isinstance(index, (tuple, list)) else (index,)
        check_write("__setitem__", t, (value, *items))
    check_writable("__setitem__", t)
    if not isinstance(value, Tensor):
        # torch makes a number a 0-d tensor of t's dtype first (its one-element path), then
        # writes that: negative ints wrap into uint8 (-2 -> 254) whatever the index, and
        # float16 takes 65519 (-> 65504) even where fill_ of many elements refuses it
        D.check_fits("__setitem__", value, t.dtype, rounded=True)
        value = D.scalar_array(value, t.dtype).item()
    geometry, arrays = plan(t._shape, strides_of(t), t._offset, index, t.device)
    tracked = _differentiated(t) or (isinstance(value, Tensor) and _differentiated(value))
    if tracked and _grad_on():
        _setitem_recorded(t, index, value)
        return
    target = make_view(t, *geometry)
    if not arrays:
        target.copy_(value) if isinstance(value, Tensor) else target.fill_(value)
        return
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
            target._data[arrays] = value
    except ValueError as e:
        raise RuntimeError(f"__setitem__(): {e}") from None
    t._bump_version()


def _setitem_recorded(t: Tensor, index, value) -> None:
    """``t[index] = value`` as the in-place ``_index_put_`` row, so autograd records it.

    The index is applied to an array of ``t``'s flat positions (with the same plan, so the
    same rules); the positions it selects become index arrays over ``t``, which works for
    any index and any layout of ``t``.
    """
    flat = np.arange(t.numel()).reshape(t._shape)
    (shape, stride, offset), arrays = plan(
        t._shape, tuple(s // flat.itemsize for s in flat.strides), 0, index, CPU
    )
    positions = np.lib.stride_tricks.as_strided(
        flat.reshape(-1)[offset:],
        shape,
        tuple(s * flat.itemsize for s in stride),
    )
    if arrays:
        positions = positions[arrays]
    if not isinstance(value, Tensor):
        value = tensor(value, dtype=t.dtype, device=t.device)
    if t._shape == ():
        # every position is the one element (numpy cannot index a 0-d array with arrays):
        # the last value written to it wins, as with repeated indices
        if positions.size == 0:
            return
        value = value.expand(positions.shape).reshape(-1)[-1]
        OPS["_index_put"].inplace_fn(t, value, indices=())
        return
    index_arrays = tuple(_on_device(a, t.device) for a in np.unravel_index(positions, t._shape))
    OPS["_index_put"].inplace_fn(t, value, indices=index_arrays)


def _on_device(arr, device):
    if device.type == "cuda" and isinstance(arr, np.ndarray):
        return cupy_or_raise().asarray(arr)
    return arr
