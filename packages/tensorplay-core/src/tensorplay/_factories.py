"""Creating tensors: from data (``tensor``, ``from_numpy``), factories and random numbers."""

from __future__ import annotations

import math

import numpy as np

from tensorplay import _device, _dtype as D
from tensorplay._device import CPU, META, canonical
from tensorplay._storage import Storage
from tensorplay._tensor import Tensor, _new, adopt_array, contiguous_strides, empty_tensor

__all__ = [
    "tensor",
    "as_tensor",
    "from_numpy",
    "empty",
    "zeros",
    "ones",
    "full",
    "arange",
    "linspace",
    "eye",
    "empty_like",
    "zeros_like",
    "ones_like",
    "full_like",
    "rand",
    "randn",
    "randint",
    "rand_like",
    "randn_like",
    "randint_like",
    "randperm",
    "manual_seed",
    "seed",
    "initial_seed",
    "Generator",
    "default_generator",
]


def _dtype_arg(dtype, op):
    if dtype is None or isinstance(dtype, D.dtype):
        return dtype
    raise TypeError(f"{op}(): dtype must be a tensorplay dtype like tp.float32, got {dtype!r}")


def _shape_arg(size, op) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for n in size:
        if isinstance(n, bool) or not hasattr(n, "__index__"):
            raise TypeError(f"{op}(): size must be a sequence of ints, got {size!r}")
        n = n.__index__()
        if n < 0:
            raise RuntimeError(
                f"{op}(): Trying to create tensor with negative dimension {n}: {list(size)}"
            )
        out.append(n)
    return tuple(out)


def _check_fits(values: np.ndarray, dt: D.dtype, op: str, *, wrap: bool = False) -> None:
    """Integer targets must hold every value exactly (torch raises on overflow);
    ``wrap``: the values are data (``tensor``, ``arange``), where negative integers wrap
    into an unsigned dtype."""
    if dt.category != 1 or values.size == 0:
        return
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise RuntimeError(f"{op}(): value cannot be converted to type {dt.name} without overflow")
    if values.dtype.kind in "iuf":
        info = np.iinfo(dt.np)
        # NOTE: torch lets negative *integers* wrap into unsigned types (-1 -> 255), down to
        # -max: "a - b" written as "a + (-b)" must work on uint8
        least = -int(info.max) if wrap and info.min == 0 and values.dtype.kind in "iu" else info.min
        lo, hi = values.min(), values.max()
        if lo < least or hi > info.max:
            bad = (lo if lo < least else hi).item()
            raise RuntimeError(
                f"{op}(): value {bad!r} cannot be converted to type {dt.name} without overflow "
                f"({dt.name} holds {info.min}..{info.max}); pass a wider dtype"
            )


def _infer_dtype(arr: np.ndarray, data) -> D.dtype:
    kind = arr.dtype.kind
    if kind == "b":
        return D.bool
    if kind in "iu":
        if isinstance(data, np.ndarray) or isinstance(data, np.generic):
            return D.from_numpy_dtype(arr.dtype)
        return D.int64
    if kind == "f":
        if isinstance(data, (np.ndarray, np.generic)):
            return D.from_numpy_dtype(arr.dtype)
        return D.get_default_dtype()
    if kind == "c":
        if isinstance(data, (np.ndarray, np.generic)):
            return D.from_numpy_dtype(arr.dtype)
        return D.get_default_dtype().to_complex()
    if kind == "V" and arr.dtype == D.bfloat16.np:  # ml_dtypes types are kind "V"
        return D.bfloat16
    raise TypeError(f"tensor(): could not infer a dtype from data of numpy dtype {arr.dtype}")


def _to_numpy(data, op: str, floating: bool = False) -> np.ndarray:
    """``data`` as a numpy array; ``floating``: the target dtype is float, complex or bool,
    so Python ints beyond int64 are read as floats (torch reads them as doubles there)."""
    if isinstance(data, Tensor):
        return data.detach().cpu().numpy()
    if isinstance(data, (list, tuple)):
        data = [_element(x, op) if isinstance(x, Tensor) else x for x in data]
    try:
        if isinstance(data, (list, tuple)) and _has_big_int(data):
            if not floating:
                raise RuntimeError(
                    f"{op}(): Overflow when unpacking long: an integer does not fit in int64; "
                    "pass dtype=tp.float64 to read it as a float"
                )
            data = _ints_as_floats(data, op)
        arr = np.asarray(data)
    except ValueError as e:
        raise ValueError(f"{op}(): could not build a tensor from the data: {e}") from None
    if arr.dtype == object:
        raise TypeError(
            f"{op}(): data must be numbers or nested sequences of numbers of "
            f"consistent shape, got {type(data).__name__}"
        )
    return arr


def _element(t: Tensor, op: str):
    # torch reads a tensor inside a list as a number (t.item()), so only one-element
    # tensors may appear there; a 0-d tensor keeps its shape
    if t.numel() != 1:
        raise ValueError(
            f"{op}(): only one element tensors can be converted to Python scalars, got a "
            f"tensor of shape {list(t.shape)} in the list; join tensors with tp.stack(list)"
        )
    return t.detach().cpu().numpy()


def _ints_as_floats(data, op: str):
    out = []
    for x in data:
        if isinstance(x, (list, tuple)):
            out.append(_ints_as_floats(x, op))
        elif isinstance(x, int) and not isinstance(x, bool) and not -(2**63) <= x < 2**63:
            out.append(_int_as_float(x, op))
        else:
            out.append(x)
    return out


def _int_as_float(x: int, op: str) -> float:
    try:
        return float(x)
    except OverflowError:
        raise OverflowError(f"{op}(): int too large to convert to float: {x:.6g}") from None


def _has_big_int(data) -> bool:
    for x in data:
        if isinstance(x, (list, tuple)):
            if _has_big_int(x):
                return True
        elif isinstance(x, int) and not isinstance(x, bool) and not -(2**63) <= x < 2**63:
            return True
    return False


def _from_values(data, dtype, device, op) -> Tensor:
    dtype = _dtype_arg(dtype, op)
    dev = canonical(device)
    floating = dtype is not None and dtype.category != 1
    if isinstance(data, int) and not isinstance(data, bool) and not -(2**63) <= data < 2**63:
        if not floating:
            raise RuntimeError(
                f"{op}(): Overflow when unpacking long: {data} does not fit in int64; pass "
                "dtype=tp.float64 to read it as a float"
            )
        data = _int_as_float(data, op)
    arr = _to_numpy(data, op, floating)
    dt = dtype or _infer_dtype(arr, data)
    if isinstance(data, (np.ndarray, Tensor)):
        pass  # arrays and tensors convert as .to(dtype) does: wrapping, no check (torch)
    elif arr.dtype.kind == "c" and dt.category in (1, 2):
        # Python complex numbers do not convert to a real dtype silently (torch)
        what = "an integer" if dt.category == 1 else "a real number"
        raise TypeError(
            f"{op}(): data holds complex numbers but dtype={dt} needs {what}; pass a "
            "complex dtype, or the real parts (z.real)"
        )
    else:
        _check_fits(arr, dt, op, wrap=True)
    with np.errstate(all="ignore"):
        arr = arr.astype(dt.np)
    if dev is META:
        return empty_tensor(arr.shape, dt, META)
    if dev is CPU:
        return adopt_array(arr, dt, CPU)
    cp = _device.cupy_or_raise()
    with cp.cuda.Device(dev.index):
        return adopt_array(cp.asarray(arr), dt, dev)


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (list, scalar, numpy array or Tensor).

    >>> tp.tensor([[1, 2], [3, 4]]).dtype
    tensorplay.int64
    """
    t = _from_values(data, dtype, device, "tensor")
    if requires_grad:
        t.requires_grad_(True)
    return t


def _tensor_fields(self: Tensor, data, dtype, device, requires_grad) -> None:
    # ``tp.Tensor(data)``: build as ``tensor`` would, then adopt the fields.
    src = tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
    for name in (
        "_data",
        "_storage",
        "_offset",
        "_shape",
        "_stride",
        "dtype",
        "device",
        "requires_grad",
        "grad",
        "grad_fn",
        "_base",
    ):
        setattr(self, name, getattr(src, name))


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Like ``tensor`` but returns ``data`` itself when it already matches."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device) if (dtype or device) else data
    if isinstance(data, np.ndarray) and dtype is None and device in (None, "cpu", CPU):
        try:
            return from_numpy(data)
        except (TypeError, ValueError):
            pass
    return tensor(data, dtype=dtype, device=device)


def from_numpy(arr: np.ndarray) -> Tensor:
    """A CPU tensor sharing memory with ``arr`` (writes show through both ways).

    The memory is numpy's, so it has numpy's alignment, not TensorPlay's 64 bytes.
    """
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy(): expected np.ndarray (got {type(arr).__name__})")
    dt = D.from_numpy_dtype(arr.dtype)
    return wrap_foreign(arr, dt, CPU)


def wrap_foreign(arr, dt: D.dtype, dev) -> Tensor:
    """A tensor over the memory of a numpy/CuPy array ``arr``, zero-copy."""
    isz = arr.itemsize
    if any(s < 0 for s in arr.strides):
        raise ValueError(
            "from_numpy(): at least one stride in the given array is negative; "
            "make a copy first (arr.copy())"
        )
    if any(s % isz for s in arr.strides):
        raise ValueError(
            f"from_numpy(): array strides {arr.strides} are not a multiple of the "
            f"element size {isz}"
        )
    stride = tuple(s // isz for s in arr.strides)
    span = 0 if arr.size == 0 else 1 + sum((n - 1) * s for n, s in zip(arr.shape, stride))
    if dev is CPU:
        flat = np.lib.stride_tricks.as_strided(arr, (span,), (isz,), writeable=arr.flags.writeable)
        buf = flat.view(np.uint8)
    else:
        cp = _device.cupy_or_raise()
        flat = cp.lib.stride_tricks.as_strided(arr, (span,), (isz,))
        buf = flat.view(cp.uint8)
    storage = Storage(buf, 0, span * isz, dev)
    strides = None if stride == contiguous_strides(arr.shape) else stride
    return _new(Tensor, arr, storage, 0, tuple(arr.shape), strides, dt, dev)


# ---- factories ------------------------------------------------------------------------------


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t.requires_grad_(True)
    return t


def empty(*size, dtype=None, device=None, requires_grad: bool = False, **_ignored) -> Tensor:
    shape = _shape_arg(size, "empty")
    dt = _dtype_arg(dtype, "empty") or D.get_default_dtype()
    return _finish(empty_tensor(shape, dt, canonical(device)), requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    shape = _shape_arg((size,) if isinstance(size, (tuple, list)) else (size,), "full")
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    dt = _dtype_arg(dtype, "full") or D.scalar_dtype(fill_value)
    D.check_fits("full", fill_value, dt, factory=True, rounded=math.prod(shape) == 1)
    t = empty_tensor(shape, dt, canonical(device))
    if t._data is not None:
        t._data.fill(D.scalar_array(fill_value, dt))
    return _finish(t, requires_grad)


def _filled(op: str, size: tuple, value: int, dtype, device, requires_grad: bool) -> Tensor:
    """zeros/ones: ``full`` without its value checks, since 0 and 1 are exact in every
    dtype (autograd asks for zeros on every backward pass of some ops)."""
    shape = _shape_arg(size, op)
    dt = _dtype_arg(dtype, op) or D.get_default_dtype()
    t = empty_tensor(shape, dt, canonical(device))
    if t._data is not None:
        t._data.fill(value)
    return _finish(t, requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _filled("zeros", size, 0, dtype, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _filled("ones", size, 1, dtype, device, requires_grad)


def _like(fn, name):
    def like(input: Tensor, *args, dtype=None, device=None, requires_grad=False, **kw):
        if not isinstance(input, Tensor):
            raise TypeError(
                f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}"
            )
        return fn(
            input._shape,
            *args,
            dtype=dtype or input.dtype,
            device=device or input.device,
            requires_grad=requires_grad,
            **kw,
        )

    like.__name__ = like.__qualname__ = name
    return like


def _arange_args(start, end, step) -> list:
    """start/end/step as Python numbers, checked as torch checks them."""
    vals = []
    for name, v in (("start", start), ("end", end), ("step", step)):
        v = v.item() if isinstance(v, Tensor) else v  # an int tensor stays an int (torch)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"arange(): {name} must be a real number, got {type(v).__name__}")
        if isinstance(v, int) and not -(2**63) <= v < 2**63:
            # torch reads a Python int as int64: it never becomes a float here
            raise RuntimeError(
                f"arange(): {name}={v} does not fit in int64; pass it as a float "
                f"({float(v):.6g}) for a floating point range"
            )
        vals.append(v)
    if not math.isfinite(vals[2]) or vals[2] == 0:
        raise RuntimeError(f"arange(): step must be nonzero and finite, got step={vals[2]}")
    if not (math.isfinite(vals[0]) and math.isfinite(vals[1])):
        raise RuntimeError(f"arange(): unsupported range: {vals[0]} -> {vals[1]}")
    return vals


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    vals = _arange_args(start, end, step)
    if (vals[1] - vals[0]) * vals[2] < 0:
        raise RuntimeError(
            f"arange(): upper bound and larger bound inconsistent with step sign "
            f"(start={vals[0]}, end={vals[1]}, step={vals[2]})"
        )
    if dtype is None:
        dtype = D.int64 if all(isinstance(v, int) for v in vals) else D.get_default_dtype()
    if not (dtype.is_floating_point or dtype.category == 1):
        raise NotImplementedError(
            f"arange(): not implemented for dtype {dtype} (torch has no bool or complex "
            "arange); build it as an integer or float range and convert with .to()"
        )
    if dtype.category == 1 and int(vals[2]) == 0:
        # torch steps integer ranges by int(step); for dtypes other than int64 it would
        # repeat start (arange(1, 2, 0.3, dtype=int32) is [1, 1, 1, 1]): refused here
        raise RuntimeError(f"arange(): step {vals[2]} is 0 once converted to {dtype}")
    if dtype is D.int64:
        # torch sizes an int64 range from the bounds truncated to int64, exactly:
        # arange(-2, 1.25, dtype=int64) is [-2, -1, 0] (end 1), not 4 elements
        lo, hi, st = (int(v) for v in vals)
        span = hi - lo + st - (1 if st > 0 else -1)
        n = abs(span) // abs(st) if (span < 0) == (st < 0) else 0  # C's division
    else:
        # every other dtype: ceil((end - start) / step) in double, from the bounds as given
        # (arange(-2, 1.25, dtype=int32) has 4 elements, -2 .. 1)
        n = max(math.ceil((float(vals[1]) - float(vals[0])) / float(vals[2])), 0)
    if n >= 2**63:
        raise RuntimeError(
            f"arange(): invalid size, possible overflow? ({n} elements from start={vals[0]}, "
            f"end={vals[1]}, step={vals[2]})"
        )
    if dtype.category >= 2:
        arr = vals[0] + np.arange(n, dtype=np.float64) * vals[2]
    else:  # exact: integer arithmetic (int64 in numpy can overflow silently)
        lo, step = int(vals[0]), int(vals[2])
        last = lo + (n - 1) * step if n else lo
        if not -(2**63) <= last < 2**63:
            raise RuntimeError(
                f"arange(): the range ends at {last}, beyond int64 (start={vals[0]}, "
                f"end={vals[1]}, step={vals[2]})"
            )
        arr = lo + np.arange(n, dtype=np.int64) * step
    # NOTE: values beyond a narrow integer dtype wrap, as in torch (arange(250, 255,
    # dtype=int8) is [-6 .. -2]): torch computes in int64 and casts without a check
    return _finish(_from_values(arr, dtype, device, "arange"), requires_grad)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """``steps`` values from ``start`` to ``end``, computed as torch's kernel computes them.

    That kernel converts start and end to ``dtype`` first (checked: ``int8`` refuses 300;
    an integer dtype truncates 2.5 to 2), then steps from both ends: the first half is
    ``start + step * i``, the rest ``end - step * (steps - 1 - i)``, in the dtype itself
    for floating and complex dtypes and in double for integer ones (then truncated), so
    ``linspace(1, 2.5, 6, dtype=int64)`` is ``[1, 1, 1, 1, 1, 2]``.
    """
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if steps < 0:
        raise RuntimeError(f"linspace(): number of steps must be non-negative, got {steps}")
    complex_bounds = isinstance(start, complex) or isinstance(end, complex)
    default = D.get_default_dtype()
    dt = _dtype_arg(dtype, "linspace") or (default.to_complex() if complex_bounds else default)
    if complex_bounds and not dt.is_complex:
        raise RuntimeError(
            f"linspace(): complex start/end cannot fill a {dt} tensor; pass a complex dtype"
        )
    if steps <= 1:  # torch fills start in (and reads neither bound when steps is 0)
        fill = start if steps else 0
        return full((steps,), fill, dtype=dt, device=device, requires_grad=requires_grad)
    if dt is D.bool:
        raise NotImplementedError(
            "linspace(): not implemented for bool (torch has no kernel); compare a float "
            "range instead, e.g. tp.linspace(0, 1, n) >= 0.5"
        )
    for v in (start, end):
        D.check_fits("linspace", v, dt, factory=True)
    lo, hi = (D.scalar_array(v, dt) for v in (start, end))
    if dt.is_complex:  # torch: the real and imaginary parts as two real ranges
        arr = _linspace(lo.real, hi.real, steps) + 1j * _linspace(lo.imag, hi.imag, steps)
    else:
        arr = _linspace(lo, hi, steps)
    return _finish(_from_values(arr.astype(dt.np), dt, device, "linspace"), requires_grad)


def _linspace(lo: np.ndarray, hi: np.ndarray, steps: int) -> np.ndarray:
    """torch's linspace kernel for real 0-d bounds: integers step in double (truncated
    later), floats in their own dtype; the first half counts up from lo, the rest down
    from hi."""
    work = np.dtype(np.float64) if lo.dtype.kind in "iu" else lo.dtype
    lo, hi = lo.astype(work), hi.astype(work)
    i = np.arange(steps)
    first = i < steps // 2
    k = np.where(first, i, i - (steps - 1)).astype(work)  # hi - step * (steps - 1 - i)
    base = np.where(first, lo, hi)
    with np.errstate(all="ignore"):  # inf bounds give nan, as in torch
        step = (hi - lo) / work.type(steps - 1)
        if work.itemsize >= 4:
            # torch's compiled kernel fuses base + step * k into one fma (one rounding)
            return _fma(step, k, base, work)
        return base + step * k  # float16/bfloat16 round after each operation


def _fma(a, b, c, dt: np.dtype) -> np.ndarray:
    """``a * b + c`` rounded once to ``dt``, from error-free transformations (float32: the
    product is exact in float64, the sum rounded to odd there so that rounding it to float32
    is the one correct rounding; float64: Dekker's product, exact but for ties)."""
    if dt == np.float32:
        p, c = a.astype(np.float64) * b, c.astype(np.float64)
        s, t = _two_sum(p, c)
        even = (s.view(np.int64) & 1) == 0
        toward = np.nextafter(s, np.copysign(np.inf, t))
        s = np.where((t != 0) & even & np.isfinite(s), toward, s)
        return s.astype(np.float32)
    p = a * b
    split = 134217729.0  # 2**27 + 1: Veltkamp's split of a double into two 26-bit halves
    ah = a * split - (a * split - a)
    bh = b * split - (b * split - b)
    err = ((ah * bh - p) + ah * (b - bh) + (a - ah) * bh) + (a - ah) * (b - bh)
    s, t = _two_sum(p, c)
    fused = s + (t + err)
    return np.where(np.isfinite(fused) & np.isfinite(p), fused, p + c)


def _two_sum(x, y):
    """``(s, t)`` with ``s = x + y`` rounded and ``s + t == x + y`` exactly (Knuth)."""
    s = x + y
    bp = s - x
    return s, (x - (s - bp)) + (y - bp)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    m = n if m is None else m
    if n < 0 or m < 0:
        raise RuntimeError(f"eye(): n and m must be non-negative, got {n} and {m}")
    arr = np.eye(n, m)
    return _finish(_from_values(arr, dtype or D.get_default_dtype(), device, "eye"), requires_grad)


# ---- random numbers --------------------------------------------------------------------------


class Generator:
    """Random state (numpy ``PCG64`` on CPU, CuPy's generator on CUDA)."""

    def __init__(self, device="cpu"):
        self.device = _device.device(device)
        self._seed = 67280421310721
        self._state = None  # created on first use: numpy.random costs ~10 ms to import

    @property
    def _rng(self):
        if self._state is None:
            self._state = np.random.default_rng(self._seed & (2**64 - 1))
        return self._state

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed)
        self._state = None
        return self

    def seed(self) -> int:
        s = int(np.random.SeedSequence().entropy) & (2**63 - 1)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed every generator (CPU and, when present, CUDA)."""
    default_generator.manual_seed(seed)
    if _device.cuda_unavailable_reason() is None:
        _device.cupy_or_raise().random.seed(int(seed) & (2**32 - 1))
    return default_generator


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


# Set by tensorplay._vmap while a vmap runs: ``hook(op, shape, draw)`` applies its
# ``randomness`` rule (raise, draw once, or draw a batch: ``draw(shape)`` samples).
random_hook = None


def _random(shape, dt, dev, sample, generator, op):
    if not (dt.is_floating_point or dt.is_complex) and op in ("rand", "randn"):
        raise RuntimeError(f"{op}(): expected a floating point dtype, got {dt}")
    hook = random_hook
    if hook is not None:
        return hook(op, shape, lambda s: _draw(s, dt, dev, sample, generator))
    return _draw(shape, dt, dev, sample, generator)


def _draw(shape, dt, dev, sample, generator):
    if dev is META:
        return empty_tensor(shape, dt, META)
    if dev.type == "cuda":
        cp = _device.cupy_or_raise()
        arr = sample(cp.random, shape)
        return adopt_array(arr.astype(dt.np), dt, dev)
    rng = (generator or default_generator)._rng
    return adopt_array(sample(rng, shape).astype(dt.np), dt, CPU)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Uniform samples in [0, 1)."""
    dt = dtype or D.get_default_dtype()
    t = _random(
        _shape_arg(size, "rand"), dt, canonical(device), lambda r, s: r.random(s), generator, "rand"
    )
    return _finish(t, requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Standard normal samples."""
    dt = dtype or D.get_default_dtype()
    t = _random(
        _shape_arg(size, "randn"),
        dt,
        canonical(device),
        lambda r, s: r.standard_normal(s),
        generator,
        "randn",
    )
    return _finish(t, requires_grad)


def _randint_bound(v, name: str) -> int:
    """A bound of ``randint`` as an int: torch takes ints (and integer 0-d tensors) only."""
    if isinstance(v, Tensor) and v.dim() == 0 and v.dtype.category == 1:
        return v.item()
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"randint(): argument '{name}' must be int, not {type(v).__name__}")
    return int(v)


def randint(
    low, high=None, size=None, *, generator=None, dtype=None, device=None, requires_grad=False
) -> Tensor:
    """Integers uniform in [low, high)."""
    if size is None:
        if not isinstance(high, (tuple, list)):
            raise TypeError("randint(): missing required argument 'size' (a tuple of ints)")
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    low, high = _randint_bound(low, "low"), _randint_bound(high, "high")
    if low >= high:
        raise RuntimeError(
            f"randint(): random_ expects 'from' to be less than 'to', but got "
            f"from={low} >= to={high}"
        )
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, int) and not -(2**63) <= v < 2**63:
            raise RuntimeError(f"randint(): {name}={v} does not fit in int64")
    dt = dtype or D.int64
    if dt.is_complex:
        raise RuntimeError(f"randint(): dtype {dt} is not supported; use an integer or float dtype")
    # torch's check_random_bounds: low and high - 1 must lie in the dtype (bool: 0..1), a
    # float dtype's range included (values beyond its exact integers are only rounded)
    if dt is D.bool:
        lo, hi = 0, 1
    elif dt.is_floating_point:
        lo, hi = -D._FLOAT_MAX[dt], D._FLOAT_MAX[dt]
    else:
        lo, hi = np.iinfo(dt.np).min, np.iinfo(dt.np).max
    for name, v in (("low", low), ("high - 1", high - 1)):
        if not lo <= v <= hi:
            raise RuntimeError(
                f"randint(): {name}={v} is out of bounds for {dt}, it would overflow (it "
                f"holds {lo:.6g}..{hi:.6g}); pass a dtype that holds the range"
            )

    def sample(r, s):
        if hasattr(r, "integers"):
            return r.integers(low, high, s)
        return r.randint(low, high, s)

    t = _random(_shape_arg((size,), "randint"), dt, canonical(device), sample, generator, "randint")
    return _finish(t, requires_grad)


# the largest n whose permutation a float dtype holds exactly (torch's limits)
_RANDPERM_FLOAT_MAX = {"float16": 2049, "bfloat16": 257, "float32": 2**24 + 1}


def randperm(n: int, *, generator=None, dtype=None, device=None) -> Tensor:
    """A random permutation of ``0 .. n-1``."""
    if isinstance(n, Tensor):
        n = n.item()
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"randperm(): argument 'n' must be int, not {type(n).__name__}")
    if n < 0:
        raise RuntimeError(
            f"randperm(): Trying to create tensor with negative dimension {n}: [{n}]"
        )
    dt = _dtype_arg(dtype, "randperm") or D.int64
    if dt is D.bool or dt.is_complex:
        raise NotImplementedError(
            f"randperm(): not implemented for dtype {dt}; use an integer dtype"
        )
    top = _RANDPERM_FLOAT_MAX.get(dt.name)
    if top is not None and n > top:
        raise RuntimeError(
            f"randperm(): n cannot be greater than {top} for {dt} (larger values are not "
            "exact); pass dtype=tp.int64"
        )
    _check_fits(np.array([max(n - 1, 0)]), dt, "randperm")
    rng = (generator or default_generator)._rng
    return _from_values(rng.permutation(n), dt, device, "randperm")


empty_like = _like(empty, "empty_like")
zeros_like = _like(zeros, "zeros_like")
ones_like = _like(ones, "ones_like")
full_like = _like(full, "full_like")
rand_like = _like(rand, "rand_like")
randn_like = _like(randn, "randn_like")


def randint_like(input: Tensor, low, high=None, *, dtype=None, device=None) -> Tensor:
    if high is None:
        low, high = 0, low
    return randint(
        low, high, input._shape, dtype=dtype or input.dtype, device=device or input.device
    )
