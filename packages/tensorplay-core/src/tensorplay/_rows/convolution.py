"""Convolution and pooling rows: ``conv1d``/``conv2d`` and their transposes, ``max_pool2d``,
``avg_pool2d``, ``adaptive_avg_pool2d``.

Signatures, defaults, output sizes and the shape errors follow torch 2.13. One geometry
function per family (``_conv_geo``, ``_conv_t_geo``, ``_pool_geo``) checks the arguments
and computes the output size from shapes alone: the shape rules run it on tensors (meta
tensors too), the kernels on arrays, so both refuse the same calls with the same words.

Kernels are written once for numpy and CuPy (``xp``): a convolution is an im2col through a
strided view of the (padded) input followed by one batched matmul; a transposed
convolution of stride 1 is a convolution with the flipped kernel, otherwise a matmul
followed by col2im (one strided add per kernel offset); pooling loops over the kernel
offsets. Derivatives are expressed with rows: the input gradient of a convolution is a
transposed convolution and the other way round, and the weight gradient of both is the
private row ``_conv_weight`` (the same im2col, contracted with the output gradient over
positions), whose own derivatives are the other two. Gradients are exact and
differentiable again (double backward works).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import numpy as np

from tensorplay import _dtype as D, _meta as M
from tensorplay._dispatch import OPS, OpDef, call
from tensorplay._factories import ones, tensor, zeros
from tensorplay._native import NATIVE
from tensorplay._rows import row_maker
from tensorplay._tensor import Tensor
from tensorplay.autograd._derivatives import cat, conj, total
from tensorplay.overrides import overridable

ROWS: list[OpDef] = []
op = row_maker(ROWS)

_SPATIAL = {1: "(kL)", 2: "(kH, kW)"}


# ---- argument checks shared by the rows ----------------------------------------------------


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _conv_ints(op_name: str, name: str, value, nd: int) -> tuple:
    """An int or a sequence of 1 or ``nd`` ints, as ``nd`` Python ints (torch's IntArrayRef
    rule: a single value is repeated)."""
    seq = value if isinstance(value, (list, tuple)) else (value,)
    if not all(_is_int(v) for v in seq):
        raise TypeError(
            f"{op_name}(): argument '{name}' must be an int or a tuple of {nd} ints, got {value!r}"
        )
    if len(seq) not in (1, nd):
        raise RuntimeError(
            f"expected {name} to be a single integer value or a list of {nd} values to match "
            f"the convolution dimensions, but got {name}={[int(v) for v in seq]}"
        )
    return tuple(int(v) for v in seq) * (nd // len(seq))


def _check_input(op_name: str, x, weight=None, bias=None, *, has_weight=False) -> None:
    """Tensors where torch takes tensors (the dispatcher lets numbers through as inputs)."""
    args = [("input", x)] + ([("weight", weight)] if has_weight else [])
    for name, t in args:
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{op_name}(): argument '{name}' must be a Tensor, not {type(t).__name__}"
            )
    if has_weight and bias is not None and not isinstance(bias, Tensor):
        raise TypeError(
            f"{op_name}(): argument 'bias' must be a Tensor or None, not {type(bias).__name__}"
        )


def _sizes(shape) -> str:
    """torch's ``(8 x 8)`` spelling of spatial sizes."""
    return "(" + " x ".join(str(n) for n in shape) + ")"


def _check_groups(groups) -> int:
    if not _is_int(groups):
        raise TypeError(f"argument 'groups' must be an int, got {groups!r}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    return int(groups)


def _positive(name: str, values: tuple) -> None:
    if any(v <= 0 for v in values):
        raise RuntimeError(f"non-positive {name} is not supported")


def _check_rank(op_name: str, nd: int, xs: tuple, ws: tuple) -> bool:
    """Is the input batched? (after torch's rank checks of input and weight)"""
    if len(xs) not in (nd + 1, nd + 2):
        raise RuntimeError(
            f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {op_name}, but got "
            f"input of size: {list(xs)}"
        )
    if len(ws) != nd + 2:
        raise RuntimeError(
            f"{op_name}(): expected a {nd + 2}-dimensional weight (channels, channels/groups, "
            f"{_SPATIAL[nd][1:-1]}), but got weight of size {list(ws)}"
        )
    return len(xs) == nd + 2


def _no_empty_spatial(xs: tuple, nd: int) -> None:
    if any(n == 0 for n in xs[-nd:]):
        raise RuntimeError(
            f"Only zero batch or zero channel inputs are supported, but got input shape: {list(xs)}"
        )


# ---- convolution geometry --------------------------------------------------------------------


class _ConvGeo(NamedTuple):
    batched: bool
    stride: tuple
    pads: tuple  # (before, after) per spatial dim: padding="same" may be uneven
    dilation: tuple
    groups: int
    out: tuple  # spatial sizes of the result


def _same_pads(dilation, kernel) -> tuple:
    # torch puts the odd element of an uneven total after the input
    totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
    return tuple((t // 2, t - t // 2) for t in totals)


_GEOS: dict = {}  # the geometry of calls whose arguments are plain ints, tuples of them, strs


def _plain(v) -> bool:
    t = type(v)
    return t is int or t is str or (t is tuple and all(type(i) is int for i in v))


def _conv_geo(op_name, nd, xs, ws, bs, stride, padding, dilation, groups) -> _ConvGeo:
    """The checked geometry of a convolution: a model makes the same few calls every step
    (forward, then its derivatives), each asking again; a call of plain values is kept (a
    bool or numpy int among them is checked every time: it can be an error)."""
    if not (_plain(stride) and _plain(padding) and _plain(dilation) and type(groups) is int):
        return _conv_geo_checked(op_name, nd, xs, ws, bs, stride, padding, dilation, groups)
    key = (op_name, nd, tuple(xs), tuple(ws), bs, stride, padding, dilation, groups)
    geo = _GEOS.get(key)
    if geo is None:
        geo = _conv_geo_checked(op_name, nd, xs, ws, bs, stride, padding, dilation, groups)
        if len(_GEOS) >= 4096:  # a program that keeps changing shapes: start again
            _GEOS.clear()
        _GEOS[key] = geo
    return geo


def _conv_geo_checked(op_name, nd, xs, ws, bs, stride, padding, dilation, groups) -> _ConvGeo:
    batched = _check_rank(op_name, nd, xs, ws)
    stride = _conv_ints(op_name, "stride", stride, nd)
    dilation = _conv_ints(op_name, "dilation", dilation, nd)
    groups = _check_groups(groups)
    _positive("stride", stride)
    _positive("dilation", dilation)
    kernel = ws[2:]
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            pads = _same_pads(dilation, kernel)
        else:
            raise RuntimeError(
                f"Invalid padding string: {padding!r}; expected 'same', 'valid' or ints"
            )
    else:
        p = _conv_ints(op_name, "padding", padding, nd)
        if any(v < 0 for v in p):
            raise RuntimeError("negative padding is not supported")
        pads = tuple((v, v) for v in p)
    if ws[0] < groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, "
            f"but got weight of size {list(ws)} instead"
        )
    if ws[0] % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
            f"0, but got weight of size {list(ws)} instead"
        )
    channels = xs[1] if batched else xs[0]
    if channels != ws[1] * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(ws)}, expected input{list(xs)} to "
            f"have {ws[1] * groups} channels, but got {channels} channels instead"
        )
    if bs is not None and (len(bs) != 1 or bs[0] != ws[0]):
        raise RuntimeError(
            f"Given weight of size {list(ws)}, expected bias to be 1-dimensional with "
            f"{ws[0]} elements, but got bias of size {list(bs)} instead"
        )
    _no_empty_spatial(xs, nd)
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(xs[-nd:], pads))
    reach = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel))
    if any(p < r for p, r in zip(padded, reach)):
        raise RuntimeError(
            f"Calculated padded input size per channel: {_sizes(padded)}. Kernel size: "
            f"{_sizes(reach)}. Kernel size can't be greater than actual input size"
        )
    out = tuple((p - r) // s + 1 for p, r, s in zip(padded, reach, stride))
    return _ConvGeo(batched, stride, pads, dilation, groups, out)


class _ConvTGeo(NamedTuple):
    batched: bool
    stride: tuple
    padding: tuple
    output_padding: tuple
    dilation: tuple
    groups: int
    out: tuple


def _conv_t_geo(
    op_name, nd, xs, ws, bs, stride, padding, output_padding, groups, dilation
) -> _ConvTGeo:
    batched = _check_rank(op_name, nd, xs, ws)
    if isinstance(padding, str):
        raise TypeError(
            f"{op_name}(): argument 'padding' must be an int or a tuple of {nd} ints, not "
            f"{padding!r} (transposed convolutions take no padding strings)"
        )
    stride = _conv_ints(op_name, "stride", stride, nd)
    padding = _conv_ints(op_name, "padding", padding, nd)
    output_padding = _conv_ints(op_name, "output_padding", output_padding, nd)
    dilation = _conv_ints(op_name, "dilation", dilation, nd)
    groups = _check_groups(groups)
    _positive("stride", stride)
    _positive("dilation", dilation)
    if any(v < 0 for v in padding):
        raise RuntimeError("negative padding is not supported")
    if any(v < 0 for v in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(o >= max(s, d) for o, s, d in zip(output_padding, stride, dilation)):
        raise RuntimeError(
            "output padding must be smaller than either stride or dilation, but got "
            f"output_padding={output_padding}, stride={stride} and dilation={dilation}"
        )
    if ws[0] % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
            f"0, but got weight of size {list(ws)} instead"
        )
    channels = xs[1] if batched else xs[0]
    if channels != ws[0]:
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(ws)}, expected input{list(xs)} to have "
            f"{ws[0]} channels, but got {channels} channels instead"
        )
    if bs is not None and (len(bs) != 1 or bs[0] != ws[1] * groups):
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(ws)}, expected bias to be 1-dimensional "
            f"with {ws[1] * groups} elements, but got bias of size {list(bs)} instead"
        )
    _no_empty_spatial(xs, nd)
    spatial = xs[-nd:]
    out = tuple(
        (n - 1) * s - 2 * p + d * (k - 1) + o + 1
        for n, s, p, d, k, o in zip(spatial, stride, padding, dilation, ws[2:], output_padding)
    )
    if any(n < 1 for n in out):
        raise RuntimeError(
            f"Given input size per channel: {_sizes(spatial)}. Calculated output size per "
            f"channel: {_sizes(out)}. Output size is too small"
        )
    return _ConvTGeo(batched, stride, padding, output_padding, dilation, groups, out)


def _shape_of(t):
    return None if t is None else tuple(t.shape)


# ---- convolution kernels ---------------------------------------------------------------------


def _windows(xp, a, lead: tuple, lead_strides: tuple, kernel, out, stride, dilation):
    """The strided view ``lead + kernel + out`` of ``a``'s trailing spatial dims: element
    ``[..., k, o]`` is ``a[..., o * stride + k * dilation]`` (no copy)."""
    sp = a.strides[-len(kernel) :]
    strides = (
        lead_strides
        + tuple(st * d for st, d in zip(sp, dilation))
        + tuple(st * s for st, s in zip(sp, stride))
    )
    return xp.lib.stride_tricks.as_strided(
        a, shape=lead + tuple(kernel) + tuple(out), strides=strides
    )


def _pad(xp, a, pads, value=0):
    """``a`` with its trailing dims padded by ``pads`` ((before, after) each, >= 0) of
    ``value``: a filled array and one slice assignment (``np.pad`` spends tens of
    microseconds in Python per call, more than the copy on these sizes)."""
    if not any(lo or hi for lo, hi in pads):
        return a
    lead = a.ndim - len(pads)
    inner = a.shape[lead:]
    shape = a.shape[:lead] + tuple(n + lo + hi for n, (lo, hi) in zip(inner, pads))
    out = xp.zeros(shape, a.dtype) if value == 0 else xp.full(shape, value, a.dtype)
    out[(Ellipsis,) + tuple(slice(lo, lo + n) for n, (lo, _) in zip(inner, pads))] = a
    return out


def _im2col(xp, x, kernel, out, stride, pads, dilation, groups):
    """(N, groups, C/groups * prod(kernel), prod(out)): each output position's window of
    the padded batched input, one column per position (the one copy of the input)."""
    n, c = x.shape[:2]
    cg = c // groups
    padded = _pad(xp, x, pads)
    sn, sc = padded.strides[:2]
    view = _windows(xp, padded, (n, groups, cg), (sn, cg * sc, sc), kernel, out, stride, dilation)
    return view.reshape(n, groups, cg * math.prod(kernel), math.prod(out))


def _columns_py(x, kh, kw, sh, sw, dh, dw, ph, pw, oh, ow):
    """The twin of ``tensorplay._C.im2col``: row ``(c, ki, kj)``, column ``(n, oy, ox)`` of
    the result is ``x[n, c, oy * sh - ph + ki * dh, ox * sw - pw + kj * dw]`` (0 outside)."""
    n, c, h, w = x.shape
    after = [
        max(0, (o - 1) * s + (k - 1) * d + 1 - p - m)
        for o, s, k, d, p, m in ((oh, sh, kh, dh, ph, h), (ow, sw, kw, dw, pw, w))
    ]
    padded = _pad(np, x, ((ph, after[0]), (pw, after[1])))
    sn, sc = padded.strides[:2]
    view = _windows(np, padded, (n, c), (sn, sc), (kh, kw), (oh, ow), (sh, sw), (dh, dw))
    return view.transpose(1, 2, 3, 0, 4, 5).reshape(c * kh * kw, n * oh * ow)


_columns = NATIVE.im2col if NATIVE is not None else _columns_py


def _as_2d(x, kernel, out, stride, pads, dilation):
    """A 1-D convolution's arguments as a 2-D one's of height 1."""
    if len(kernel) == 2:
        return x, tuple(kernel), tuple(out), tuple(stride), tuple(pads), tuple(dilation)
    return (x[:, :, None], (1, *kernel), (1, *out), (1, *stride), ((0, 0), *pads), (1, *dilation))


def _cpu_columns(x, kernel, out, stride, pads, dilation):
    """(C * prod(kernel), N * prod(out)): every output position's window of the batched
    CPU input ``x``, one column each, in one native pass (zero padding included)."""
    x, kernel, out, stride, pads, dilation = _as_2d(x, kernel, out, stride, pads, dilation)
    x = np.ascontiguousarray(x)
    return _columns(x, *kernel, *stride, *dilation, pads[0][0], pads[1][0], *out)


def _conv_arrays(xp, x, w, b, g: _ConvGeo):
    """Batched ``x`` (N, C, *S) with ``w`` (O, C/groups, *K): im2col, then one matmul per
    (sample, group) pair (numpy hands each to BLAS). Ungrouped on the CPU: the columns of
    all samples side by side, one matmul."""
    n, o, k = x.shape[0], w.shape[0], w.shape[2:]
    if xp is np and g.groups == 1 and len(k) <= 2:
        cols = _cpu_columns(x, k, g.out, g.stride, g.pads, g.dilation)
        r = np.dot(w.reshape(o, cols.shape[0]), cols)  # (O, N * positions)
        if b is not None:
            r += b.reshape(o, 1)
        return r.reshape((o, n) + g.out).swapaxes(0, 1)
    cols = _im2col(xp, x, k, g.out, g.stride, g.pads, g.dilation, g.groups)
    r = xp.matmul(w.reshape(g.groups, o // g.groups, cols.shape[2]), cols)
    r = r.reshape((n, o) + g.out)
    if b is not None:
        r += b.reshape((1, o) + (1,) * len(k))
    return r


def _conv_t_unit_stride(xp, x, w, b, g: _ConvTGeo):
    """A transposed convolution of stride 1 is a convolution: the kernel flipped, its two
    channel dims swapped (per group), the input padded by the dilated kernel's reach less
    the padding (cropped where that is negative) and by the output padding after."""
    nd, groups = len(g.stride), g.groups
    reach = [d * (k - 1) for d, k in zip(g.dilation, w.shape[2:])]
    before = [r - p for r, p in zip(reach, g.padding)]
    after = [lo + op for lo, op in zip(before, g.output_padding)]
    keep = tuple(
        slice(max(0, -lo), n - max(0, -hi)) for lo, hi, n in zip(before, after, x.shape[2:])
    )
    x = x[(slice(None), slice(None)) + keep]
    pads = tuple((max(0, lo), max(0, hi)) for lo, hi in zip(before, after))
    cin, og, k = w.shape[0], w.shape[1], tuple(w.shape[2:])
    flipped = w[(slice(None), slice(None)) + (slice(None, None, -1),) * nd]
    wf = flipped.reshape((groups, cin // groups, og) + k).swapaxes(1, 2)
    wf = wf.reshape((groups * og, cin // groups) + k)
    geo = _ConvGeo(True, (1,) * nd, pads, g.dilation, groups, g.out)
    return _conv_arrays(xp, x, wf, b, geo)


def _conv_t_cpu(x, w, b, g: _ConvTGeo):
    """An ungrouped 1-D/2-D transposed convolution of float32/float64 CPU arrays: the input's
    columns through the weight (one matmul), then ``tensorplay._C.col2im`` adds them into
    the output in one pass (the adjoint of the convolution's im2col); None where the native
    route does not apply."""
    if NATIVE is None or g.groups != 1 or len(g.stride) > 2 or x.dtype.char not in "fd":
        return None
    if x.dtype != w.dtype or (b is not None and b.dtype != x.dtype):
        return None
    one_d = len(g.stride) == 1
    if one_d:  # as 2-D of height 1
        x, w = x[:, :, None], w[:, :, None]
        g = g._replace(
            stride=(1, *g.stride),
            padding=(0, *g.padding),
            dilation=(1, *g.dilation),
            out=(1, *g.out),
        )
    n, cin, hin, win = x.shape
    cout, (kh, kw) = w.shape[1], w.shape[2:]
    xm = np.ascontiguousarray(x.reshape(n, cin, hin * win).transpose(1, 0, 2))
    cols = np.dot(w.reshape(cin, cout * kh * kw).T, xm.reshape(cin, n * hin * win))
    r = NATIVE.col2im(cols, n, cout, *g.out, kh, kw, *g.stride, *g.dilation, *g.padding, hin, win)
    if r is None:
        return None
    if b is not None:
        r += b.reshape(1, cout, 1, 1)
    return r.reshape(n, cout, r.shape[-1]) if one_d else r


def _conv_t_arrays(xp, x, w, b, g: _ConvTGeo):
    """Batched transposed convolution: each input position's contribution to its kernel
    window (one matmul), then col2im, one strided add per kernel offset. With stride 1 (the
    input gradient of most convolutions) it is a convolution, which is faster. On the CPU,
    ungrouped 1-D/2-D float ones take ``_conv_t_cpu`` (col2im in one native pass)."""
    if xp is np:
        r = _conv_t_cpu(x, w, b, g)
        if r is not None:
            return r
    if all(s == 1 for s in g.stride):
        return _conv_t_unit_stride(xp, x, w, b, g)
    n, c = x.shape[:2]
    groups, spatial = g.groups, x.shape[2:]
    cg, og, k = c // groups, w.shape[1], tuple(w.shape[2:])
    # kernel offsets outermost: the block each offset adds is contiguous
    wt = w.reshape(groups, cg, og, math.prod(k)).transpose(0, 3, 2, 1)
    wt = wt.reshape(groups, math.prod(k) * og, cg)
    cols = xp.matmul(wt, x.reshape(n, groups, cg, math.prod(spatial)))
    cols = cols.reshape((n, groups) + k + (og,) + tuple(spatial))
    full = tuple(
        (m - 1) * s + d * (kk - 1) + 1 + op
        for m, s, d, kk, op in zip(spatial, g.stride, g.dilation, k, g.output_padding)
    )
    buf = xp.zeros((n, groups, og) + full, dtype=cols.dtype)
    lead = (slice(None),) * 2
    for at in itertools.product(*(range(kk) for kk in k)):
        into = tuple(
            slice(i * d, i * d + (m - 1) * s + 1, s)
            for i, d, m, s in zip(at, g.dilation, spatial, g.stride)
        )
        buf[lead + (slice(None),) + into] += cols[lead + at]
    crop = tuple(slice(p, p + m) for p, m in zip(g.padding, g.out))
    r = buf[lead + (slice(None),) + crop].reshape((n, groups * og) + g.out)
    if b is not None:
        r = r + b.reshape((1, groups * og) + (1,) * len(k))
    return r


def _batched(fn, geo, xp, x, *rest):
    """``fn`` on a batch of one for an unbatched input."""
    if geo.batched:
        return fn(xp, x, *rest, geo)
    return fn(xp, x[None], *rest, geo)[0]


# ---- convolution derivatives -----------------------------------------------------------------


def _conv_input_grad(nd, grad, w, spatial, g: _ConvGeo):
    """d(conv)/d(input)^T grad: the transposed convolution of ``grad`` (batched), cropped
    to the input. It runs with the smaller pad of each side and an output padding that
    restores the positions no window reached, so uneven ("same") pads work too."""
    pad, out_pad, offset = [], [], []
    for n, (lo, hi), s, d, k, o in zip(spatial, g.pads, g.stride, g.dilation, w.shape[2:], g.out):
        q = min(lo, hi)
        pad.append(q)
        out_pad.append(n + lo + hi - ((o - 1) * s + d * (k - 1) + 1))
        offset.append(lo - q)
    params = dict(
        stride=g.stride,
        padding=tuple(pad),
        output_padding=tuple(out_pad),
        groups=g.groups,
        dilation=g.dilation,
    )
    r = call(OPS[f"conv_transpose{nd}d"], (grad, w, None), params)
    for i, (off, n) in enumerate(zip(offset, spatial)):
        if off or r.shape[2 + i] != n:
            r = r.narrow(2 + i, off, n)
    return r


def _weight_grad(x, gout, kernel, stride, pads, dilation, groups):
    """The weight gradient of a convolution of batched ``x`` whose output gradient is
    ``gout`` (row ``_conv_weight``)."""
    params = dict(
        kernel_size=tuple(kernel),
        stride=tuple(stride),
        pads=tuple(pads),
        dilation=tuple(dilation),
        groups=groups,
    )
    return call(_CONV_WEIGHT, (x, gout), params)


def _bias_grad(grad, nd):
    """The bias gradient: ``grad`` (batched) summed over samples and positions."""
    return grad.sum(dim=(0,) + tuple(range(2, 2 + nd)))


def _conv_vjp(nd):
    name = f"conv{nd}d"

    def vjp(ctx, grad):
        x, w, b = ctx.inputs
        need = ctx.needs_input_grad
        g = _conv_geo(name, nd, tuple(x.shape), tuple(w.shape), _shape_of(b), **ctx.params)
        if not g.batched:
            x, grad = x.unsqueeze(0), grad.unsqueeze(0)
        gx = gw = gb = None
        if need[0]:
            gx = _conv_input_grad(nd, grad, conj(w), tuple(x.shape[2:]), g)
            gx = gx if g.batched else gx.squeeze(0)
        if need[1]:
            kernel = tuple(w.shape[2:])
            gw = _weight_grad(conj(x), grad, kernel, g.stride, g.pads, g.dilation, g.groups)
        if b is not None and need[2]:
            gb = _bias_grad(grad, nd)
        return gx, gw, gb

    return vjp


def _conv_t_vjp(nd):
    name = f"conv_transpose{nd}d"

    def vjp(ctx, grad):
        x, w, b = ctx.inputs
        need = ctx.needs_input_grad
        g = _conv_t_geo(name, nd, tuple(x.shape), tuple(w.shape), _shape_of(b), **ctx.params)
        if not g.batched:
            x, grad = x.unsqueeze(0), grad.unsqueeze(0)
        gx = gw = gb = None
        if need[0]:
            # the adjoint of a transposed convolution is the convolution with the same weight
            params = dict(stride=g.stride, padding=g.padding, dilation=g.dilation, groups=g.groups)
            gx = call(OPS[f"conv{nd}d"], (grad, conj(w), None), params)
            for i, m in enumerate(x.shape[2:]):
                if gx.shape[2 + i] != m:  # an output padding >= stride adds a last window
                    gx = gx.narrow(2 + i, 0, m)
            gx = gx if g.batched else gx.squeeze(0)
        if need[1]:
            pads = tuple((p, p) for p in g.padding)
            kernel = tuple(w.shape[2:])
            gw = _weight_grad(grad, conj(x), kernel, g.stride, pads, g.dilation, g.groups)
        if b is not None and need[2]:
            gb = _bias_grad(grad, nd)
        return gx, gw, gb

    return vjp


def _bilinear_jvp(name, nd):
    """out = f(x, w) (+ b), f bilinear: f(tx, w) + f(x, tw) (+ tb, broadcast over the
    positions of an ``nd``-d result)."""

    def jvp(ctx, tx, tw, tb=None):
        x, w = ctx.inputs[0], ctx.inputs[1]
        no_bias = (None,) * (len(ctx.inputs) - 2)
        row = OPS[name]
        return total(
            [
                call(row, (tx, w, *no_bias), ctx.params) if tx is not None else None,
                call(row, (x, tw, *no_bias), ctx.params) if tw is not None else None,
                tb.reshape((-1,) + (1,) * nd) if tb is not None else None,
            ]
        )

    return jvp


# ---- convolution rows ------------------------------------------------------------------------


def _conv_shape(nd):
    name = f"conv{nd}d"

    def shape(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        _check_input(name, input, weight, bias, has_weight=True)
        xs, ws = input._shape, weight._shape
        g = _conv_geo(name, nd, xs, ws, _shape_of(bias), stride, padding, dilation, groups)
        return ((xs[0],) if g.batched else ()) + (ws[0],) + g.out

    return shape


def _conv_kernel(nd):
    name = f"conv{nd}d"

    def kernel(xp, x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
        g = _conv_geo(name, nd, x.shape, w.shape, _shape_of(b), stride, padding, dilation, groups)
        return _batched(_conv_arrays, g, xp, x, w, b)

    return kernel


def _conv_t_shape(nd):
    name = f"conv_transpose{nd}d"

    def shape(
        input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
    ):
        _check_input(name, input, weight, bias, has_weight=True)
        xs, ws = input._shape, weight._shape
        g = _conv_t_geo(
            name, nd, xs, ws, _shape_of(bias), stride, padding, output_padding, groups, dilation
        )
        return ((xs[0],) if g.batched else ()) + (ws[1] * g.groups,) + g.out

    return shape


def _conv_t_kernel(nd):
    name = f"conv_transpose{nd}d"

    def kernel(xp, x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
        g = _conv_t_geo(
            name,
            nd,
            x.shape,
            w.shape,
            _shape_of(b),
            stride,
            padding,
            output_padding,
            groups,
            dilation,
        )
        return _batched(_conv_t_arrays, g, xp, x, w, b)

    return kernel


def _integer_only_int64(op_name):
    """torch's CPU kernel dispatches int64 among the integer dtypes, and no other."""

    def rule(d, params):
        if d.category == 1 and d is not D.int64:
            raise NotImplementedError(
                f'"{op_name}" not implemented for {d.name}; convert the input with .long() '
                "or .float() first"
            )
        return M.same(d, params)

    return rule


for _nd in (1, 2):
    op(
        f"conv{_nd}d",
        "input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1",
        kind="other",
        n_inputs=3,
        kernel=_conv_kernel(_nd),
        shape=_conv_shape(_nd),
        dtype=M.same,
        promote="same",
        allow="ifc",
        method=False,
        vjp=_conv_vjp(_nd),
        jvp=_bilinear_jvp(f"conv{_nd}d", _nd),
        doc=f"conv{_nd}d(input, weight, bias=None, stride=1, padding=0, dilation=1, "
        f"groups=1): {_nd}-D cross-correlation of (N, C, ...) or unbatched input with weight "
        f"(out_channels, C/groups, ...); padding is ints or 'same'/'valid' (torch's).",
    )
for _nd in (1, 2):
    op(
        f"conv_transpose{_nd}d",
        "input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1",
        kind="other",
        n_inputs=3,
        kernel=_conv_t_kernel(_nd),
        shape=_conv_t_shape(_nd),
        dtype=_integer_only_int64(f"conv_transpose{_nd}d"),
        promote="same",
        allow="ifc",
        method=False,
        vjp=_conv_t_vjp(_nd),
        jvp=_bilinear_jvp(f"conv_transpose{_nd}d", _nd),
        doc=f"conv_transpose{_nd}d(input, weight, bias=None, stride=1, padding=0, "
        f"output_padding=0, groups=1, dilation=1): the adjoint of conv{_nd}d with weight "
        f"(in_channels, out_channels/groups, ...) (torch's).",
    )


# ---- the weight gradient -------------------------------------------------------------------


def _conv_weight_arrays(xp, x, gout, kernel_size, stride, pads, dilation, groups):
    """sum over samples n and positions y of gout[n, o, y] * x_padded[n, c, y * stride +
    k * dilation]: the forward im2col of x, contracted with gout over positions (the long
    axis, where BLAS is fast), then summed over samples."""
    n, o = gout.shape[:2]
    out = tuple(gout.shape[2:])
    if xp is np and groups == 1 and len(out) <= 2:
        cols = _cpu_columns(x, kernel_size, out, stride, pads, dilation)
        g = gout.swapaxes(0, 1).reshape(o, cols.shape[1])  # (O, N * positions), as cols
        return np.dot(g, cols.T).reshape((o, x.shape[1]) + tuple(kernel_size))
    cols = _im2col(xp, x, kernel_size, out, stride, pads, dilation, groups)
    g = gout.reshape(n, groups, o // groups, math.prod(out))
    r = xp.matmul(g, cols.transpose(0, 1, 3, 2)).sum(axis=0)
    return r.reshape((o, x.shape[1] // groups) + tuple(kernel_size))


def _conv_weight_shape(input, grad_output, kernel_size, stride, pads, dilation, groups):
    nd = len(kernel_size)
    if input.dim() != nd + 2 or grad_output.dim() != nd + 2:
        raise RuntimeError(
            f"_conv_weight(): expected batched {nd + 2}-D input and grad_output, got "
            f"{list(input._shape)} and {list(grad_output._shape)}"
        )
    if input._shape[1] % groups or grad_output._shape[1] % groups:
        raise RuntimeError(
            f"_conv_weight(): channels {input._shape[1]} and {grad_output._shape[1]} are not "
            f"divisible by groups={groups}"
        )
    return (grad_output._shape[1], input._shape[1] // groups) + tuple(kernel_size)


def _symmetric_conv(x, w, spatial, stride, pads, dilation, groups):
    """conv(x, w) with per-side pads (conv rows pad both sides alike): zeros appended where
    the pad after exceeds the pad before, extra positions cropped where it falls short."""
    nd = len(pads)
    for i, (lo, hi) in enumerate(pads):
        if hi > lo:
            shape = list(x.shape)
            shape[2 + i] = hi - lo
            x = cat([x, zeros(shape, dtype=x.dtype, device=x.device)], 2 + i)
    params = dict(
        stride=tuple(stride), padding=tuple(lo for lo, _ in pads), dilation=dilation, groups=groups
    )
    r = call(OPS[f"conv{nd}d"], (x, w, None), params)
    for i, m in enumerate(spatial):
        if r.shape[2 + i] != m:
            r = r.narrow(2 + i, 0, m)
    return r


def _conv_weight_vjp(ctx, grad):
    # bilinear in (input, grad_output): its adjoints are the convolution's other two
    # derivatives, with ``grad`` (weight-shaped) as the weight
    x, gout = ctx.inputs
    p, need = ctx.params, ctx.needs_input_grad
    nd = len(p["kernel_size"])
    out = tuple(gout.shape[2:])
    gx = ggout = None
    if need[0]:
        g = _ConvGeo(True, p["stride"], p["pads"], p["dilation"], p["groups"], out)
        gx = _conv_input_grad(nd, conj(gout), grad, tuple(x.shape[2:]), g)
    if need[1]:
        ggout = _symmetric_conv(
            conj(x), grad, out, p["stride"], p["pads"], p["dilation"], p["groups"]
        )
    return gx, ggout


_CONV_WEIGHT = op(
    "_conv_weight",
    "input, grad_output, kernel_size, stride, pads, dilation, groups",
    kind="other",
    n_inputs=2,
    kernel=_conv_weight_arrays,
    shape=_conv_weight_shape,
    dtype=M.same,
    promote="same",
    allow="ifc",
    method=False,
    vjp=_conv_weight_vjp,
    jvp=_bilinear_jvp("_conv_weight", None),
)


# ---- pooling geometry ------------------------------------------------------------------------

_WORDS = {
    "kernel_size": "must either be a single int, or a tuple of two ints",
    "stride": "must either be omitted, a single int, or a tuple of two ints",
    "padding": "must either be a single int, or a tuple of two ints",
    "dilation": "must be either a single int, or a tuple of two ints",
}


def _pool_ints(op_name: str, name: str, value) -> tuple:
    seq = value if isinstance(value, (list, tuple)) else (value,)
    if len(seq) not in (1, 2):
        raise RuntimeError(f"{op_name}: {name} {_WORDS[name]}")
    if not all(_is_int(v) for v in seq):
        raise TypeError(f"{op_name}(): {name} {_WORDS[name]}, got {value!r}")
    return tuple(int(v) for v in seq) * (2 // len(seq))


class _PoolGeo(NamedTuple):
    batched: bool
    kernel: tuple
    stride: tuple
    padding: tuple
    dilation: tuple
    out: tuple


def _pool_len(n, k, p, s, d, ceil_mode) -> int:
    """torch's pooling_output_shape: with ceil_mode a last window may start in the input
    or the left padding, never in the right padding."""
    span = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pool_geo(op_name, xs, kernel_size, stride, padding, dilation, ceil_mode) -> _PoolGeo:
    k = _pool_ints(op_name, "kernel_size", kernel_size)
    empty = stride is None or (isinstance(stride, (list, tuple)) and len(stride) == 0)
    s = k if empty else _pool_ints(op_name, "stride", stride)
    p = _pool_ints(op_name, "padding", padding)
    d = _pool_ints(op_name, "dilation", dilation)
    if min(k) <= 0:
        raise RuntimeError(
            f"kernel size should be greater than zero, but got kH: {k[0]} kW: {k[1]}"
        )
    if min(s) <= 0:
        raise RuntimeError(f"stride should be greater than zero, but got dH: {s[0]} dW: {s[1]}")
    if min(d) <= 0:
        raise RuntimeError(
            f"dilation should be greater than zero, but got dilationH: {d[0]} dilationW: {d[1]}"
        )
    for pi, ki, di in zip(p, k, d):
        if pi < 0:
            raise RuntimeError(f"pad must be non-negative, but got pad: {pi}")
        if pi > (di * (ki - 1) + 1) // 2:
            raise RuntimeError(
                "pad should be at most half of effective kernel size, but got "
                f"pad={pi}, kernel_size={ki} and dilation={di}"
            )
    if len(xs) not in (3, 4) or 0 in xs[-3:]:
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
            f"but got:{list(xs)}"
        )
    if any(pi > ki // 2 for pi, ki in zip(p, k)):
        # torch checks the kernel itself too, not only the dilated one
        raise RuntimeError(
            "pad should be smaller than or equal to half of kernel size, but got "
            f"padW = {p[1]}, padH = {p[0]}, kW = {k[1]}, kH = {k[0]}"
        )
    out = tuple(_pool_len(n, *a, ceil_mode) for n, *a in zip(xs[-2:], k, p, s, d))
    if min(out) < 1:
        c, h, w = xs[-3:]
        raise RuntimeError(
            f"Given input size: ({c}x{h}x{w}). Calculated output size: "
            f"({c}x{out[0]}x{out[1]}). Output size is too small"
        )
    return _PoolGeo(len(xs) == 4, k, s, p, d, out)


def _pool_shape(geo: _PoolGeo, xs: tuple) -> tuple:
    return tuple(xs[:-2]) + geo.out


def _padded_windows(xp, a, g: _PoolGeo, value):
    """``a`` padded with ``value`` before (the pad) and after (up to the last window's end,
    which ceil_mode may push past the pad), and a function giving the strided slice of
    kernel offset (i, j): element [.., oh, ow] is the padded input at (oh * sH + i * dH, ...)."""
    after = [
        max(0, (o - 1) * s + d * (k - 1) + 1 - p - n)
        for o, s, d, k, p, n in zip(g.out, g.stride, g.dilation, g.kernel, g.padding, a.shape[-2:])
    ]
    ap = _pad(xp, a, tuple(zip(g.padding, after)), value)

    def at(i, j):
        (sh, sw), (dh, dw), (oh, ow) = g.stride, g.dilation, g.out
        return ap[
            ..., i * dh : i * dh + (oh - 1) * sh + 1 : sh, j * dw : j * dw + (ow - 1) * sw + 1 : sw
        ]

    return at


# ---- max pooling ---------------------------------------------------------------------------


def _first_valid(o, s, p, d):
    """The first input position inside each window (torch starts its index there)."""
    start = np.arange(o) * s - p
    return np.where(start < 0, start + (-start + d - 1) // d * d, start)


_NATIVE_POOL = (np.dtype(np.float32), np.dtype(np.float64))


def _max_pool_arrays(xp, a, g: _PoolGeo):
    """(values, flat indices into each H*W plane): a running maximum over the kernel
    offsets. As torch's loop: the first maximum wins a tie, and a NaN replaces anything
    (the last NaN of a window is the one picked); padding never wins."""
    h, w = a.shape[-2:]
    if xp is np and NATIVE is not None and a.dtype in _NATIVE_POOL:
        planes = np.ascontiguousarray(a).reshape(-1, h, w)
        geo = (*g.kernel, *g.stride, *g.dilation, *g.padding, *g.out)
        best, index = NATIVE.max_pool2d(planes, *geo)
        shape = a.shape[:-2] + g.out
        return best.reshape(shape), index.reshape(shape)
    floating = a.dtype.kind == "f"
    lowest = -np.inf if floating else np.iinfo(a.dtype).min
    at = _padded_windows(xp, a, g, lowest)
    rows = _first_valid(g.out[0], g.stride[0], g.padding[0], g.dilation[0])
    cols = _first_valid(g.out[1], g.stride[1], g.padding[1], g.dilation[1])
    shape = a.shape[:-2] + g.out
    best = xp.full(shape, lowest, dtype=a.dtype)
    index = xp.broadcast_to(xp.asarray(rows[:, None] * w + cols[None, :]), shape).copy()
    oh = np.arange(g.out[0]) * g.stride[0] - g.padding[0]
    ow = np.arange(g.out[1]) * g.stride[1] - g.padding[1]
    for i in range(g.kernel[0]):
        for j in range(g.kernel[1]):
            v = at(i, j)
            take = v > best
            if floating:
                take |= xp.isnan(v)
            pos = (oh + i * g.dilation[0])[:, None] * w + (ow + j * g.dilation[1])[None, :]
            best = xp.where(take, v, best)
            index = xp.where(take, xp.asarray(pos), index)
    return best, index


def _max_pool_kernel(
    xp, a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    g = _pool_geo("max_pool2d", a.shape, kernel_size, stride, padding, dilation, ceil_mode)
    return _max_pool_arrays(xp, a, g)


def _max_pool_values(
    xp, a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """The values alone: an elementwise maximum over the kernel offsets (it propagates NaN,
    as torch's loop does)."""
    g = _pool_geo("max_pool2d", a.shape, kernel_size, stride, padding, dilation, ceil_mode)
    lowest = -np.inf if a.dtype.kind == "f" else np.iinfo(a.dtype).min
    at = _padded_windows(xp, a, g, lowest)
    best = at(0, 0).copy()
    for i, j in itertools.product(range(g.kernel[0]), range(g.kernel[1])):
        if i or j:
            xp.maximum(best, at(i, j), out=best)
    return best


def _max_pool_shape(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    _check_input("max_pool2d", input)
    g = _pool_geo("max_pool2d", input._shape, kernel_size, stride, padding, dilation, ceil_mode)
    return _pool_shape(g, input._shape)


def _max_pool_params(params) -> dict:
    return {k: v for k, v in params.items() if k != "return_indices"}


def _argmax_of(x, params):
    """The indices output, recomputed (autograd keeps only the values)."""
    return call(_WITH_INDICES, (x.detach(),), _max_pool_params(params))[1]


def _max_pool_backward_arrays(
    xp, grad, a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False
):
    """max_pool2d's input gradient: each window's gradient added at its maximum (windows
    sharing one add up, as torch's). Float CPU arrays: one native pass that finds each
    maximum again; else the indices (``_max_pool_arrays``) and a scatter-add of the
    gradient at them."""
    g = _pool_geo("max_pool2d", a.shape, kernel_size, stride, padding, dilation, ceil_mode)
    (h, w), lead = a.shape[-2:], a.shape[:-2]
    planes, positions = math.prod(lead), math.prod(g.out)
    if xp is np and NATIVE is not None and a.dtype in _NATIVE_POOL and grad.dtype == a.dtype:
        geo = (*g.kernel, *g.stride, *g.dilation, *g.padding, *g.out)
        x3 = np.ascontiguousarray(a).reshape(planes, h, w)
        g3 = np.ascontiguousarray(grad).reshape(planes, *g.out)
        return NATIVE.max_pool2d_backward(x3, g3, *geo).reshape(a.shape)
    index = _max_pool_arrays(xp, a, g)[1].reshape(planes, positions)
    flat = xp.zeros((planes, h * w), dtype=grad.dtype)
    src = grad.reshape(planes, positions)
    return OPS["scatter"].kernel(xp, flat, 1, index, src, reduce="add").reshape(a.shape)


def _max_pool_backward_shape(grad_output, input, *args, **kwargs):
    want = _max_pool_shape(input, *args, **kwargs)
    if tuple(grad_output._shape) != tuple(want):
        raise RuntimeError(
            f"_max_pool2d_backward(): grad_output has shape {list(grad_output._shape)}, but "
            f"the pooling of input {list(input._shape)} gives {list(want)}"
        )
    return input._shape


def _max_pool_backward_vjp(ctx, gg):
    # linear in grad_output (at the maxima the input picks; piecewise constant in input):
    # its adjoint reads gg at those maxima
    if not ctx.needs_input_grad[0]:
        return None, None
    x = ctx.inputs[1]
    index = _argmax_of(x, ctx.params)
    return gg.flatten(-2).gather(-1, index.flatten(-2)).reshape(tuple(index.shape)), None


def _max_pool_vjp(ctx, grad):
    x = ctx.inputs[0]
    g = grad[0] if isinstance(grad, tuple) else grad
    return (_MAX_POOL_BACKWARD.fn(g, x, **_max_pool_params(ctx.params)),)


def _max_pool_tangent(ctx, t):
    if t is None:
        return None
    x = ctx.inputs[0]
    index = _argmax_of(x, ctx.params)
    return t.flatten(-2).gather(-1, index.flatten(-2)).reshape(tuple(index.shape))


def _max_pool_jvp(ctx, t):
    return _max_pool_tangent(ctx, t)


def _with_indices_jvp(ctx, t):
    tv = _max_pool_tangent(ctx, t)
    return None if tv is None else (tv, None)


_POOL_PARAMS = "input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False"


@overridable
def max_pool2d(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    """max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
    return_indices=False): the maximum of each window of (N, C, H, W) or (C, H, W) input;
    with return_indices, (values, indices) where indices are flat positions in each H*W
    plane (torch's)."""
    params = dict(
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        ceil_mode=ceil_mode,
    )
    if return_indices:
        return call(_WITH_INDICES, (input,), params)
    return call(_MAX_POOL, (input,), dict(params, return_indices=False))


max_pool2d.__module__ = "tensorplay"

_MAX_POOL = op(
    "max_pool2d",
    _POOL_PARAMS + ", return_indices=False",
    kind="other",
    kernel=_max_pool_values,
    shape=_max_pool_shape,
    allow="if",
    method=False,
    vjp=_max_pool_vjp,
    jvp=_max_pool_jvp,
    _fn=max_pool2d,  # hand-written: return_indices picks the row with the indices output
)
_WITH_INDICES = op(
    "_max_pool2d_with_indices",
    _POOL_PARAMS,
    kind="other",
    kernel=_max_pool_kernel,
    shape=lambda input, *args, **kw: (_max_pool_shape(input, *args, **kw),) * 2,
    dtype=lambda d, params: (M.same(d, params)[0], (d, D.int64)),
    multi=True,
    allow="if",
    method=False,
    vjp=_max_pool_vjp,
    jvp=_with_indices_jvp,
)


_MAX_POOL_BACKWARD = op(
    "_max_pool2d_backward",
    "grad_output, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False",
    kind="other",
    n_inputs=2,
    kernel=_max_pool_backward_arrays,
    shape=_max_pool_backward_shape,
    dtype=M.same,
    promote="same",
    allow="if",
    method=False,
    vjp=_max_pool_backward_vjp,
    jvp=lambda ctx, tg, tx: (
        None if tg is None else _MAX_POOL_BACKWARD.fn(tg, ctx.inputs[1], **ctx.params)
    ),
)


# ---- average pooling ---------------------------------------------------------------------------


def _avg_lengths(n, o, k, s, p, count_include_pad):
    """Per output position along one dim, the divisor factor: the window clipped to the
    padded input (count_include_pad) or to the input itself."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    if count_include_pad:
        return end - start
    return np.minimum(end, n) - np.maximum(start, 0)


def _avg_divisor(g: _PoolGeo, hw, count_include_pad, divisor_override):
    if divisor_override is not None:
        return np.int64(divisor_override)
    lh, lw = (
        _avg_lengths(n, o, k, s, p, count_include_pad)
        for n, o, k, s, p in zip(hw, g.out, g.kernel, g.stride, g.padding)
    )
    return lh[:, None] * lw[None, :]


def _avg_geo(xs, kernel_size, stride, padding, ceil_mode, divisor_override) -> _PoolGeo:
    if divisor_override is not None:
        if not _is_int(divisor_override):
            raise TypeError(
                f"avg_pool2d(): divisor_override must be an int or None, got {divisor_override!r}"
            )
        if divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
    return _pool_geo("avg_pool2d", xs, kernel_size, stride, padding, 1, ceil_mode)


def _avg_pool_kernel(
    xp,
    a,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    g = _avg_geo(a.shape, kernel_size, stride, padding, ceil_mode, divisor_override)
    at = _padded_windows(xp, a, g, 0)
    total_ = at(0, 0).copy()
    for i, j in itertools.product(range(g.kernel[0]), range(g.kernel[1])):
        if i or j:
            total_ += at(i, j)
    div = _avg_divisor(g, a.shape[-2:], count_include_pad, divisor_override)
    if a.dtype.kind in "iu":
        # integer division truncates toward zero (C++), as torch's int64 kernel does
        div = xp.asarray(div)
        q = xp.abs(total_) // xp.abs(div)
        return xp.where((total_ < 0) != (div < 0), -q, q)
    return total_ / xp.asarray(div.astype(a.dtype))


def _avg_pool_shape(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    _check_input("avg_pool2d", input)
    g = _avg_geo(input._shape, kernel_size, stride, padding, ceil_mode, divisor_override)
    return _pool_shape(g, input._shape)


def _avg_pool_vjp(ctx, grad):
    """Each window's gradient, divided by its divisor, spread evenly over the window: the
    transposed convolution with a kernel of ones, cropped to the input."""
    x, p = ctx.inputs[0], ctx.params
    xs = tuple(x.shape)
    g = _avg_geo(
        xs, p["kernel_size"], p["stride"], p["padding"], p["ceil_mode"], p["divisor_override"]
    )
    div = _avg_divisor(g, xs[-2:], p["count_include_pad"], p["divisor_override"])
    scaled = grad / tensor(div, dtype=grad.dtype, device=grad.device)
    planes = scaled.reshape(-1, 1, *g.out)
    reach = [(o - 1) * s + k for o, s, k in zip(g.out, g.stride, g.kernel)]
    # positions after the last window that the input still has (a remainder < stride)
    out_pad = tuple(max(0, pp + n - r) for pp, n, r in zip(g.padding, xs[-2:], reach))
    kernel = ones(1, 1, *g.kernel, dtype=grad.dtype, device=grad.device)
    params = dict(stride=g.stride, padding=0, output_padding=out_pad, groups=1, dilation=1)
    spread = call(OPS["conv_transpose2d"], (planes, kernel, None), params)
    spread = spread.narrow(2, g.padding[0], xs[-2]).narrow(3, g.padding[1], xs[-1])
    return (spread.reshape(xs),)


def _linear_jvp(name):
    def jvp(ctx, t):
        return None if t is None else call(OPS[name], (t,), ctx.params)

    return jvp


op(
    "avg_pool2d",
    "input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, "
    "divisor_override=None",
    kind="other",
    kernel=_avg_pool_kernel,
    shape=_avg_pool_shape,
    dtype=_integer_only_int64("avg_pool2d"),
    allow="if",
    method=False,
    vjp=_avg_pool_vjp,
    jvp=_linear_jvp("avg_pool2d"),
    doc="avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, "
    "count_include_pad=True, divisor_override=None): the mean of each window of (N, C, H, W) "
    "or (C, H, W) input (torch's divisor rules).",
)


# ---- adaptive average pooling ------------------------------------------------------------------


def _adaptive_size(output_size, xs) -> tuple:
    seq = output_size if isinstance(output_size, (list, tuple)) else (output_size,) * 2
    if len(seq) != 2:
        raise RuntimeError("adaptive_avg_pool2d: output_size must be 2")
    if not all(v is None or _is_int(v) for v in seq):
        raise TypeError(
            "adaptive_avg_pool2d(): output_size must be an int, None or a tuple of two of "
            f"them, got {output_size!r}"
        )
    if len(xs) not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(xs)}")
    for i in (-2, -1):
        if xs[i] == 0:
            raise RuntimeError(
                "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
                f"dimensions, but input has sizes {list(xs)} with dimension {len(xs) + i} "
                "being empty"
            )
    out = tuple(n if v is None else int(v) for v, n in zip(seq, xs[-2:]))
    if min(out) < 0:
        raise RuntimeError(
            "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 "
            f"but received {{{out[0]}, {out[1]}}}"
        )
    return out


@functools.lru_cache(maxsize=64)
def _adaptive_matrix(n: int, o: int) -> np.ndarray:
    """(o, n): row i averages input positions [floor(i n / o), ceil((i + 1) n / o))."""
    m = np.zeros((o, n))
    for i in range(o):
        lo, hi = i * n // o, -(-(i + 1) * n // o)
        m[i, lo:hi] = 1.0 / (hi - lo)
    m.flags.writeable = False
    return m


def _adaptive_kernel(xp, a, output_size):
    oh, ow = _adaptive_size(output_size, a.shape)
    mh = xp.asarray(_adaptive_matrix(a.shape[-2], oh).astype(a.dtype))
    mw = xp.asarray(_adaptive_matrix(a.shape[-1], ow).astype(a.dtype))
    # a window mean is separable: rows, then columns
    return xp.matmul(xp.matmul(mh, a), mw.T)


def _adaptive_shape(input, output_size):
    _check_input("adaptive_avg_pool2d", input)
    return tuple(input._shape[:-2]) + _adaptive_size(output_size, input._shape)


def _adaptive_vjp(ctx, grad):
    x = ctx.inputs[0]
    h, w = x.shape[-2:]
    oh, ow = grad.shape[-2:]
    mh = tensor(_adaptive_matrix(h, oh), dtype=grad.dtype, device=grad.device)
    mw = tensor(_adaptive_matrix(w, ow), dtype=grad.dtype, device=grad.device)
    return (mh.mT @ grad @ mw,)


op(
    "adaptive_avg_pool2d",
    "input, output_size",
    kind="other",
    kernel=_adaptive_kernel,
    shape=_adaptive_shape,
    allow="f",
    method=False,
    vjp=_adaptive_vjp,
    jvp=_linear_jvp("adaptive_avg_pool2d"),
    doc="adaptive_avg_pool2d(input, output_size): the mean over torch's adaptive windows of "
    "(N, C, H, W) or (C, H, W) input; output_size is an int, or two ints or Nones (None keeps "
    "that input size).",
)
