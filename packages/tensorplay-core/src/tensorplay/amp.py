"""Automatic mixed precision: ``tp.autocast`` (PyTorch's ``torch.autocast`` semantics).

Inside ``with tp.autocast(device_type):`` ops on tensors of that device type run in a
precision chosen per op, from PyTorch's autocast op lists mapped onto TensorPlay's op
table:

* *lower precision* ops (matmul-like) run with their floating inputs cast to the
  autocast dtype (``cpu``: bfloat16, ``cuda``: float16 by default);
* *float32* ops (reductions, exp/log family, softmax, ...) run with their floating
  inputs cast to float32; ops that take ``dtype=`` are left alone when it is given;
* *promote* ops (cat, stack, atan2, dot, index_put) run in the widest floating input
  type;
* every other op runs unchanged.

Only float16, bfloat16 and float32 tensors on the autocast's device type are cast
(float64, integer, bool and complex tensors are not: torch's "eligible" rule);
in-place and ``out=`` calls are not autocast. Casts go through the ``_to_copy`` op, so
autograd flows back to the original (e.g. float32) leaves.

One difference from PyTorch: torch's CPU float32 list is short (it leaves ``sum``,
``softmax``, ``exp`` ... in bfloat16); TensorPlay uses the CUDA lists for both device
types, so reductions stay float32 everywhere (the TensorPlay spec).

The state is thread-local, per device type. While any autocast region is enabled,
a layer sees every call (``_dispatch.push_layer``).
"""

from __future__ import annotations

import functools
import threading

from tensorplay import _dispatch, _dtype as D
from tensorplay._tensor import Tensor
from tensorplay._tensor_op import first_tensor_device

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype"]

_DEFAULT_DTYPE = {"cpu": D.bfloat16, "cuda": D.float16}
_ALLOWED = {"cpu": (D.bfloat16, D.float16), "cuda": (D.float16, D.bfloat16)}
_ELIGIBLE = (D.float16, D.bfloat16, D.float32)
# what a TensorOp's register_autocast policy casts (torch's library.register_autocast: every
# floating tensor, float64 included)
_FLOATING = tuple(d for d in D.ALL if d.is_floating_point)

# PyTorch's autocast lists (aten/src/ATen/autocast_mode.cpp), restricted to our op rows.
LOWER_PRECISION = frozenset(
    {
        "matmul",
        "mm",
        "bmm",
        "einsum",
        "linear",
        "conv1d",
        "conv2d",
        "conv_transpose1d",
        "conv_transpose2d",
    }
)
FP32 = frozenset(
    {
        "acos",
        "asin",
        "cosh",
        "exp",
        "expm1",
        "log",
        "log10",
        "log2",
        "log1p",
        "reciprocal",
        "rsqrt",
        "sinh",
        "tan",
        "pow",
        "softplus",
        "logsumexp",
        "norm",
        # torch's "fp32_set_opt_dtype" ops: float32 unless dtype= is given
        "sum",
        "prod",
        "cumsum",
        "cumprod",
        "softmax",
        "log_softmax",
    }
)
PROMOTE = frozenset({"cat", "stack", "atan2", "dot", "_index_put"})


class _Local(threading.local):
    def __init__(self):
        # device type -> (enabled, dtype, cache_enabled)
        self.state = {dev: (False, dt, True) for dev, dt in _DEFAULT_DTYPE.items()}
        self.any_enabled = False


_local = _Local()
_lock = threading.Lock()
_active = 0  # enabled autocast regions in all threads (the layer is installed while > 0)


def _check_device(device_type: str) -> str:
    if not isinstance(device_type, str) or device_type not in _DEFAULT_DTYPE:
        raise ValueError(
            f"autocast: unsupported device_type {device_type!r}; expected one of "
            f"{sorted(_DEFAULT_DTYPE)}"
        )
    return device_type


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Autocast is enabled for ``device_type`` in this thread (no argument: ``"cuda"``)."""
    return _local.state[_check_device(device_type)][0]


def get_autocast_dtype(device_type: str) -> D.dtype:
    """The dtype lower-precision ops run in for ``device_type`` (in this thread)."""
    return _local.state[_check_device(device_type)][1]


def _install() -> None:
    global _active
    with _lock:
        _active += 1
        if _active == 1:
            _dispatch.push_layer(_layer)


def _uninstall() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            _dispatch.pop_layer(_layer)


class autocast:  # noqa: N801 - torch's name
    """``tp.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``.

    A context manager and a decorator; nestable; the state is per thread and per
    device type (``"cpu"``: bfloat16 by default, ``"cuda"``: float16).
    """

    def __init__(
        self,
        device_type: str,
        dtype: D.dtype | None = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ):
        self.device_type = _check_device(device_type)
        if dtype is None:
            dtype = _DEFAULT_DTYPE[device_type]
        allowed = _ALLOWED[device_type]
        if dtype not in allowed:
            names = ", ".join(d.name for d in allowed)
            raise ValueError(
                f"autocast: dtype {getattr(dtype, 'name', dtype)} is not supported for "
                f"device_type {device_type!r}; supported dtypes: {names}"
            )
        self.fast_dtype = dtype
        self.enabled = bool(enabled)
        self.cache_enabled = True if cache_enabled is None else bool(cache_enabled)
        self._saved: list = []

    def __enter__(self):
        st = _local.state
        self._saved.append((st[self.device_type], _local.any_enabled))
        st[self.device_type] = (self.enabled, self.fast_dtype, self.cache_enabled)
        _local.any_enabled = any(v[0] for v in st.values())
        if self.enabled:
            _install()
        return self

    def __exit__(self, *exc) -> None:
        prev, any_enabled = self._saved.pop()
        _local.state[self.device_type] = prev
        _local.any_enabled = any_enabled
        if self.enabled:
            _uninstall()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # a fresh context per call: the decorated function may recurse or run in threads
            with autocast(self.device_type, self.fast_dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)

        return wrapper


# ---- the dispatch layer ---------------------------------------------------------------


def _cast(x, dtype: D.dtype, dev_type: str, only=_ELIGIBLE):
    if isinstance(x, Tensor) and x.dtype in only and x.dtype is not dtype:
        if x.device.type == dev_type:
            return _dispatch.OPS["_to_copy"].fn(x, dtype)
    return x


def _cast_all(row, targs: tuple, dtype: D.dtype, dev_type: str, only=_ELIGIBLE) -> tuple:
    if row.n_inputs == "seq":
        seq = targs[0]
        if isinstance(seq, (list, tuple)):
            return (type(seq)(_cast(x, dtype, dev_type, only) for x in seq), *targs[1:])
        return targs
    return tuple(_cast(x, dtype, dev_type, only) for x in targs)


def _device_type(row, targs: tuple):
    items = targs[0] if row.n_inputs == "seq" and isinstance(targs[0], (list, tuple)) else targs
    for x in items:
        if isinstance(x, Tensor):
            return x.device.type
    return None


def _layer(nxt, row, targs, params, out, inplace):
    if row.kind == "tensor_op":
        return _tensor_op_layer(nxt, row, targs, params)
    name = row.name
    if (
        not _local.any_enabled
        or out is not None
        or inplace is not None
        or (name not in LOWER_PRECISION and name not in FP32 and name not in PROMOTE)
    ):
        return nxt(row, targs, params, out, inplace)
    dev_type = _device_type(row, targs)
    st = _local.state.get(dev_type)
    if st is None or not st[0]:
        return nxt(row, targs, params, out, inplace)
    if name in LOWER_PRECISION:
        targs = _cast_all(row, targs, st[1], dev_type)
    elif name in FP32:
        if params.get("dtype") is None:
            targs = _cast_all(row, targs, D.float32, dev_type, (D.float16, D.bfloat16))
    else:  # promote: the widest eligible floating input type
        items = targs[0] if row.n_inputs == "seq" else targs
        widest = None
        for x in items:
            if isinstance(x, Tensor) and x.dtype in _ELIGIBLE and x.device.type == dev_type:
                widest = x.dtype if widest is None else D.promote_types(widest, x.dtype)
        if widest is not None:
            targs = _cast_all(row, targs, widest, dev_type)
    return nxt(row, targs, params, out, inplace)


def _tensor_op_layer(nxt, op, args: tuple, kwargs: dict):
    """A ``TensorOp`` with a policy for the device of its first tensor argument
    (``register_autocast``): its floating tensor arguments on that device type are cast to
    the policy's dtype, and its kernel runs with autocast off (torch's
    ``library.register_autocast``)."""
    if not op._autocast or not _local.any_enabled:
        return nxt(op, args, kwargs)
    dev = first_tensor_device(args, kwargs)
    cast_to = op._autocast.get(dev.type) if dev is not None else None
    if cast_to is None or not _local.state[dev.type][0]:
        return nxt(op, args, kwargs)

    def cast(x):
        if type(x) is list or type(x) is tuple:
            return type(x)(_cast(y, cast_to, dev.type, _FLOATING) for y in x)
        return _cast(x, cast_to, dev.type, _FLOATING)

    args, kwargs = tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
    with autocast(dev.type, enabled=False):
        return nxt(op, args, kwargs)
