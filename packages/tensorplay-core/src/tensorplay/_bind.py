"""Attach the op table to ``Tensor`` (methods, in-place methods, operators) and add the
few methods that are compositions of ops rather than ops (``to``, ``copy_``, ``max``...)
or need the factories or DLPack (``Tensor(data)``, ``new_zeros``, ``__dlpack__``, pickling):
``_tensor`` imports none of those, so it stays a leaf of the import graph.
"""

from __future__ import annotations

import math

import numpy as np

from tensorplay import _device, _dispatch, _dlpack, _dtype as D, _factories, _indexing, overrides
from tensorplay._device import CPU, META, canonical
from tensorplay._device_checks import to_host
from tensorplay._dispatch import OPS, check_writable, native_fast
from tensorplay._meta import broadcast_shapes
from tensorplay._optable import ROWS, MinMax
from tensorplay._tensor import Tensor, adopt_array, empty_tensor
from tensorplay._vmap import BatchedTensor, check_write
from tensorplay.autograd import Function

_NUMBER = (bool, int, float, complex, np.generic)
_REFLECTED = {
    "__radd__",
    "__rsub__",
    "__rmul__",
    "__rtruediv__",
    "__rfloordiv__",
    "__rmod__",
    "__rpow__",
    "__rmatmul__",
    "__rand__",
    "__ror__",
    "__rxor__",
}
# reflected operators of commutative ops (same value and dtype either way round)
_COMMUTATIVE = frozenset({"__radd__", "__rmul__", "__rand__", "__ror__", "__rxor__"})


def _operator(row, dunder):
    if dunder.startswith("__i") and dunder != "__invert__":
        inplace = row.inplace_fn

        def op(self, other):
            if not isinstance(other, (Tensor,) + _NUMBER):
                return _foreign(inplace, self, other)
            return inplace(self, other)

        op.__name__ = op.__qualname__ = dunder
        return op
    fn = row.fn
    if dunder == "__rtruediv__":
        reciprocal, mul = OPS["reciprocal"].fn, OPS["mul"].fn

        def op(self, other):
            if isinstance(other, _NUMBER):
                # ``2 / x`` is ``x.reciprocal() * 2`` in torch: its float16 rounding and complex
                # zeros (nan, not inf) show the difference from div(2, x); ``0 / 0`` is
                # inf * 0 there, silently
                with np.errstate(invalid="ignore"):
                    return mul(reciprocal(self), other)
            if not isinstance(other, Tensor):
                return _foreign(fn, other, self)
            return fn(other, self)
    elif dunder in _COMMUTATIVE:
        # torch's __radd__/__rmul__/... call the op with self first (``2 * x`` is
        # ``x.mul(2)``), which is also the fast path's order
        def op(self, other):
            if isinstance(other, _NUMBER):
                return fn(self, other)
            if not isinstance(other, Tensor):
                return _foreign(fn, other, self)
            return fn(other, self)
    elif dunder in _REFLECTED:

        def op(self, other):
            if not isinstance(other, (Tensor,) + _NUMBER):
                return _foreign(fn, other, self)
            return fn(other, self)
    elif dunder in ("__neg__", "__abs__", "__invert__"):
        return fn  # the function itself (not renamed: it is also tp.neg/abs/bitwise_not)
    else:

        def op(self, other):
            if not isinstance(other, (Tensor,) + _NUMBER):
                return _foreign(fn, self, other)
            return fn(self, other)

        op.__name__ = op.__qualname__ = dunder
        return native_fast(row, op, fn)  # ``a + b`` takes the native fast path too

    op.__name__ = op.__qualname__ = dunder
    return op


def _foreign(fn, a, b):
    """An operator whose other operand is neither a Tensor nor a number.

    An operand implementing ``__tensorplay_function__`` gets the call (as ``fn``); when
    no handler accepts it, or the operand has no handler, return ``NotImplemented`` so
    Python tries the operand's own (reflected) operator, as PyTorch does.
    """
    if not overrides.has_tensorplay_function((a, b)):
        return NotImplemented
    try:
        return fn(a, b)
    except overrides.NoImplementationError:
        return NotImplemented


class _Lazy:
    """A Tensor attribute built on first access, then replaced by what it built.

    Keeps ``import tensorplay`` from generating every op's function up front.
    """

    def __init__(self, name, build):
        self.name, self.build = name, build

    def __get__(self, obj, cls=None):
        value = self.build()
        setattr(Tensor, self.name, value)
        return value if obj is None else value.__get__(obj, cls)


def _attach():
    for row in ROWS:
        if row.method == "attribute":  # a data descriptor (z.real = v): it must be there to set
            setattr(Tensor, row.name, row.fn)
        elif row.method:
            setattr(Tensor, row.name, _Lazy(row.name, lambda row=row: row.fn))
        if row.inplace:
            setattr(Tensor, row.name + "_", _Lazy(row.name + "_", lambda row=row: row.inplace_fn))
        for dunder in row.dunders:
            setattr(Tensor, dunder, _Lazy(dunder, lambda row=row, d=dunder: _operator(row, d)))
    Tensor.__hash__ = object.__hash__


# ---- overloads that pick a row --------------------------------------------------------------


def _extreme(name):
    full, dim_row, pair = OPS[f"_{name}_all"], OPS[name + "_dim"], OPS[name + "imum"]

    def extreme(input, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return pair.fn(input, dim)
        if dim is None:
            return full.fn(input)
        return MinMax(*dim_row.fn(input, dim, keepdim))

    extreme.__name__ = extreme.__qualname__ = name
    extreme.__doc__ = (
        f"{name}(input) -> Tensor; {name}(input, dim, keepdim=False) -> "
        f"(values, indices); {name}(input, other) -> {name}imum(input, other)"
    )
    return extreme


max = overrides.overridable(_extreme("max"))  # noqa: A001 - torch's public names
min = overrides.overridable(_extreme("min"))  # noqa: A001


@overrides.overridable
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """True when every element is close (``isclose``); shapes must broadcast."""
    return bool(OPS["isclose"].fn(input, other, rtol, atol, equal_nan).all().item())


@overrides.overridable
def equal(input, other) -> bool:
    """True when both tensors have the same shape and elements."""
    if input._shape != other._shape:
        return False
    return bool(OPS["eq"].fn(input, other).all().item())


def _contiguous(self, memory_format=None):
    return self if self.is_contiguous() else OPS["contiguous_copy"].fn(self)


# ---- conversions: dtype and device ------------------------------------------------------------


def _parse_to(args, kwargs):
    dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
    copy = kwargs.pop("copy", False)
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"to(): unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, D.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif isinstance(a, (str, int, _device.device)) and not isinstance(a, bool):
            device = a
        elif isinstance(a, bool):
            copy = a
        else:
            raise TypeError(f"to(): received an invalid combination of arguments: {a!r}")
    return dtype, device, copy


def _to(self, *args, **kwargs):
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``.

    Returns ``self`` when nothing changes (unless ``copy=True``), else a converted copy.
    """
    dtype, device, copy = _parse_to(args, dict(kwargs))
    dt = dtype or self.dtype
    dev = canonical(device) if device is not None else self.device
    if dt is self.dtype and dev is self.device and not copy:
        return self
    return convert(self, dt, dev)


def convert(t: Tensor, dt: D.dtype, dev) -> Tensor:
    """A copy of ``t`` with dtype ``dt`` on device ``dev``."""
    if t.requires_grad or "_fw_tangent" in t.__dict__:
        if _indexing._grad_on():
            if dev is not t.device:
                return _device_move().apply(t, dt, dev)
            return OPS["_to_copy"].fn(t, dt)
    if t._data is None and t.device is not META and dev is t.device:
        # a wrapper subclass (vmap's BatchedTensor) holds its values elsewhere: the row
        # reaches its __tensorplay_dispatch__, which casts them
        return OPS["_to_copy"].fn(t, dt)
    if dev is META or t.device is META:
        if t.device is META and dev is not META:
            raise NotImplementedError("Cannot copy out of meta tensor; no data!")
        return empty_tensor(t._shape, dt, META)
    src = t._data
    with np.errstate(all="ignore"):
        if t.device is not dev:
            if dev is CPU:
                src = to_host(src)
            else:
                cp = _device.cupy_or_raise()
                with cp.cuda.Device(dev.index):
                    src = cp.asarray(src)
        arr = src.astype(dt.np, copy=False) if src.dtype != dt.np else src
        out = empty_tensor(t._shape, dt, dev)
        if out._data.size:
            out._data[...] = arr
    return out


_MOVE = []


def _device_move():
    """The differentiable cross-device copy (``x.cuda()``, ``x.to("cpu", tp.float64)`` on a
    tensor that requires grad): gradients (and tangents) move back to the input's device
    and dtype. An autograd Function, built on first use."""
    if not _MOVE:

        class ToDevice(Function):
            generate_vmap_rule = True  # a move of the whole batch is the move of each sample

            @staticmethod
            def forward(ctx, t, dt, dev):
                ctx.back, ctx.to = (t.dtype, t.device), (dt, dev)
                return convert(t.detach(), dt, dev)

            @staticmethod
            def backward(ctx, grad):
                return convert(grad, *ctx.back), None, None

            @staticmethod
            def jvp(ctx, tangent, *_):
                return None if tangent is None else convert(tangent, *ctx.to)

        ToDevice.__name__ = ToDevice.__qualname__ = "ToCopy"
        _MOVE.append(ToDevice)
    return _MOVE[0]


def _copy_(self, src, non_blocking=False):
    """Copy ``src`` (broadcast, cast, any device) into ``self``."""
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
    if isinstance(src, BatchedTensor):  # (a batched self is a BatchedTensor: its own copy_)
        check_write("copy_", self, (src,))
    check_writable("copy_", self)
    if broadcast_shapes(self._shape, src._shape, op="copy_") != self._shape:
        raise RuntimeError(
            f"copy_(): source of shape {list(src._shape)} cannot be broadcast to "
            f"{list(self._shape)}"
        )
    if _dispatch.autograd_hooks.needs_grad((self, src)):
        _dispatch.autograd_hooks.record_write("copy_", self, src)
    if _dispatch.autograd_hooks.needs_forward((self, src)):
        _dispatch.autograd_hooks.forward_overwrite(self, src)
    return _write(self, src)


def _write(self, src):
    """The data movement of ``copy_`` (its checks and autograd recording already done)."""
    if self._data is not None and src._data is None and src.device is not META:
        # a wrapper subclass holds its values elsewhere: skipping would lose the write
        raise RuntimeError(
            f"copy_(): the source is a {type(src).__name__}, a wrapper that holds no data of "
            "its own, so its values cannot be copied into a plain tensor; copy from the "
            "tensor it wraps"
        )
    if self._data is not None and src._data is not None:
        data = src._data
        if src.device is not self.device:
            data = convert(src, src.dtype, self.device)._data
        with np.errstate(all="ignore"):
            self._data[...] = data
    self._bump_version()
    return self


def _fill_(self, value):
    return _fill(self, value, "fill_")


def _fill(self, value, name: str):
    check_writable(name, self)
    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise RuntimeError(
                f"fill_(): only supports 0-dimension value tensor but got tensor "
                f"with {value.dim()} dimensions."
            )
        if isinstance(value, BatchedTensor):  # (a batched self is a BatchedTensor: its own fill_)
            check_write("fill_", self, (value,))
        if _dispatch.autograd_hooks.needs_grad((self, value)):
            # the value's gradient is the sum of the filled elements' gradients
            _dispatch.autograd_hooks.record_write(name, self, value)
        if _dispatch.autograd_hooks.needs_forward((self, value)):
            _dispatch.autograd_hooks.forward_overwrite(self, value)
        value = value.item()
    else:
        if _dispatch.autograd_hooks.needs_grad((self,)):
            _dispatch.autograd_hooks.record_write(name, self)
        if _dispatch.autograd_hooks.needs_forward((self,)):
            _dispatch.autograd_hooks.forward_overwrite(self)
    D.check_fits(name, value, self.dtype, rounded=math.prod(self._shape) == 1)
    if self._data is not None:
        self._data[...] = D.scalar_array(value, self.dtype)
    self._bump_version()
    return self


def _zero_(self):
    return _fill(self, 0, "zero_")


def _random_(name, sample):
    def method(self, *args, generator=None):
        check_writable(name, self)
        if not self.dtype.is_floating_point:
            raise RuntimeError(f"{name}(): expected a floating point tensor, got {self.dtype}")
        if _dispatch.autograd_hooks.needs_grad((self,)):
            _dispatch.autograd_hooks.record_write(name, self)
        if _dispatch.autograd_hooks.needs_forward((self,)):
            _dispatch.autograd_hooks.forward_overwrite(self)
        if self._data is not None:
            rng = (generator or _factories.default_generator)._rng
            vals = sample(rng, self._shape, *args)
            tmp = adopt_array(np.asarray(vals).astype(self.dtype.np), self.dtype, CPU)
            _write(self, tmp)
        else:
            self._bump_version()
        return self

    method.__name__ = name
    return method


def _where(self, condition, other):
    return OPS["where"].fn(condition, self, other)


def _cast(dt):
    def method(self):
        return _to(self, dt)

    return method


def _type(self, dtype=None):
    if dtype is None:
        return f"tensorplay.{self.dtype.name.capitalize()}Tensor"
    return _to(self, dtype)


# ---- construction, new_*, DLPack, pickling: the factories' and _dlpack's part of Tensor ----------


def _init(self, data=None, *, dtype=None, device=None, requires_grad: bool = False):
    """``tp.Tensor(data)``: the same data ``tp.tensor`` accepts (an empty tensor by default)."""
    if data is None:
        data = []
    _factories._tensor_fields(self, data, dtype, device, requires_grad)


def _new_factory(name, make):
    def method(self, *size, dtype=None, device=None, requires_grad=False) -> Tensor:
        return make(
            *size,
            dtype=dtype or self.dtype,
            device=device or self.device,
            requires_grad=requires_grad,
        )

    method.__name__ = name
    return method


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    return _factories.full(
        size,
        fill_value,
        dtype=dtype or self.dtype,
        device=device or self.device,
        requires_grad=requires_grad,
    )


def _new_tensor(self, data, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _factories.tensor(
        data,
        dtype=dtype or self.dtype,
        device=device or self.device,
        requires_grad=requires_grad,
    )


def _dlpack_(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    return _dlpack.to_dlpack_capsule(
        self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
    )


def _dlpack_device_(self):
    return _dlpack.dlpack_device(self)


def _reduce_ex(self, proto):
    return (_factories.tensor, (self.detach().cpu().numpy().copy(),), None)


def _install_factory_methods():
    for name, fn in [
        ("__init__", _init),
        ("__dlpack__", _dlpack_),
        ("__dlpack_device__", _dlpack_device_),
        ("__reduce_ex__", _reduce_ex),
        ("new_empty", _new_factory("new_empty", _factories.empty)),
        ("new_zeros", _new_factory("new_zeros", _factories.zeros)),
        ("new_ones", _new_factory("new_ones", _factories.ones)),
        ("new_full", _new_full),
        ("new_tensor", _new_tensor),
    ]:
        fn.__name__, fn.__qualname__ = name, f"Tensor.{name}"
        setattr(Tensor, name, fn)


def _install_composites():
    Tensor.__getitem__ = _indexing.getitem
    Tensor.__setitem__ = _indexing.setitem
    Tensor.contiguous = _contiguous
    Tensor.to = _to
    Tensor.cpu = lambda self: _to(self, "cpu")
    Tensor.cuda = lambda self, device=None: _to(
        self, _device.device("cuda", device) if isinstance(device, int) else device or "cuda"
    )
    Tensor.copy_ = _copy_
    Tensor.fill_ = _fill_
    Tensor.zero_ = _zero_
    Tensor.uniform_ = _random_("uniform_", lambda r, s, a=0.0, b=1.0: r.uniform(a, b, s))
    Tensor.normal_ = _random_("normal_", lambda r, s, mean=0.0, std=1.0: r.normal(mean, std, s))
    Tensor.max = max
    Tensor.min = min
    Tensor.where = _where
    Tensor.allclose = allclose
    Tensor.equal = equal
    Tensor.type = _type
    Tensor.__pos__ = lambda self: self
    for name, dt in [
        ("float", D.float32),
        ("double", D.float64),
        ("half", D.float16),
        ("bfloat16", D.bfloat16),
        ("int", D.int32),
        ("long", D.int64),
        ("short", D.int16),
        ("bool", D.bool),
        ("byte", D.uint8),
        ("char", D.int8),
    ]:
        setattr(Tensor, name, _cast(dt))
    Tensor.T = property(lambda self: self.permute(*reversed(range(self.dim()))))
    Tensor.mT = property(lambda self: self.transpose(-2, -1))
    Tensor.view_as = lambda self, other: self.view(other._shape)
    Tensor.reshape_as = lambda self, other: self.reshape(other._shape)
    Tensor.type_as = lambda self, other: _to(self, other.dtype)


_attach()
_install_factory_methods()
_install_composites()
