"""Samples and numpy references of the ``convolution`` family's rows (merged into
``optable_samples``'s ``_NAMED`` and ``REF`` at the end of that module).

The references are written from the definitions, position by position (no strided views,
no im2col), so they share nothing with the kernels but the meaning. Pooling references
follow torch's loops: a window's first maximum wins a tie, a NaN beats anything (the last
NaN of a window wins), divisors are clipped as torch clips them.
"""

from __future__ import annotations

import numpy as np
import optable_samples as S

import tensorplay as tp

make, _s = S.make, S._s


def _tup(v, n):
    v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
    return v * (n // len(v))


# ---- samples --------------------------------------------------------------------------------


def _conv2d(row, dt, rng):
    def t(*shape, layout="contiguous"):
        return make(shape, dt, rng, layout)

    yield _s("basic", t(2, 2, 4, 4), t(3, 2, 3, 3), t(3))
    yield _s("no_bias_strided", t(1, 2, 5, 4), t(2, 2, 2, 3), None, 2)
    yield _s("padding", t(1, 2, 3, 4), t(2, 2, 3, 3), t(2), stride=(2, 1), padding=(1, 2))
    yield _s("same_uneven", t(1, 2, 4, 4), t(2, 2, 2, 3), padding="same", dilation=(2, 1))
    yield _s("valid", t(1, 1, 4, 3), t(2, 1, 2, 2), t(2), padding="valid")
    yield _s("groups_dilation", t(1, 4, 5, 5), t(4, 2, 2, 2), t(4), 1, 1, 2, 2)
    yield _s("unbatched", t(2, 4, 4), t(3, 2, 2, 2), t(3), stride=(1, 2))
    yield _s("noncontiguous", t(1, 2, 4, 4, layout="stepped"), t(2, 2, 2, 2, layout="stepped"))
    yield _s("empty_batch", t(0, 2, 4, 4), t(3, 2, 3, 3), t(3))
    yield _s("zero_channels", t(1, 0, 3, 3), t(2, 0, 2, 2), t(2))


def _conv1d(row, dt, rng):
    def t(*shape, layout="contiguous"):
        return make(shape, dt, rng, layout)

    yield _s("basic", t(2, 2, 6), t(3, 2, 3), t(3))
    yield _s("no_bias_strided", t(1, 2, 7), t(2, 2, 2), None, 2)
    yield _s("padding", t(1, 2, 5), t(2, 2, 3), t(2), stride=2, padding=2)
    yield _s("same_uneven", t(1, 2, 6), t(2, 2, 4), padding="same", dilation=1)
    yield _s("same_dilated", t(1, 2, 6), t(2, 2, 3), t(2), padding="same", dilation=2)
    yield _s("groups_dilation", t(1, 4, 8), t(6, 2, 3), t(6), 2, 1, 2, 2)
    yield _s("unbatched", t(2, 5), t(3, 2, 2), t(3), padding=[1])
    yield _s("noncontiguous", t(1, 2, 6, layout="stepped"), t(2, 2, 2, layout="stepped"))
    yield _s("empty_batch", t(0, 2, 5), t(3, 2, 3), t(3))


def _conv_transpose2d(row, dt, rng):
    def t(*shape, layout="contiguous"):
        return make(shape, dt, rng, layout)

    yield _s("basic", t(2, 2, 3, 3), t(2, 3, 2, 2), t(3))
    yield _s("strided", t(1, 2, 3, 2), t(2, 2, 3, 3), t(2), 2, 1, 1)
    yield _s("padding_tuple", t(1, 2, 3, 3), t(2, 1, 3, 2), None, (1, 2), (1, 0), (0, 1))
    yield _s(
        "groups_dilation",
        t(1, 4, 3, 3),
        t(4, 1, 2, 2),
        t(2),
        stride=(1, 2),
        output_padding=(1, 0),
        groups=2,
        dilation=(2, 1),
    )
    yield _s("unbatched", t(2, 3, 2), t(2, 2, 2, 2), t(2), stride=2)
    yield _s("noncontiguous", t(1, 2, 3, 3, layout="stepped"), t(2, 2, 2, 2, layout="stepped"))
    yield _s("empty_batch", t(0, 2, 3, 3), t(2, 3, 2, 2), t(3))


def _conv_transpose1d(row, dt, rng):
    def t(*shape, layout="contiguous"):
        return make(shape, dt, rng, layout)

    yield _s("basic", t(2, 2, 4), t(2, 3, 3), t(3))
    yield _s("strided", t(1, 2, 4), t(2, 2, 3), t(2), 3, 1, 2)
    yield _s("groups_dilation", t(1, 4, 3), t(4, 1, 2), None, 1, 0, 2, 2, 3)
    yield _s("unbatched", t(2, 3), t(2, 2, 2), t(2), padding=1)
    yield _s("noncontiguous", t(1, 2, 4, layout="stepped"), t(2, 2, 2, layout="stepped"))
    yield _s("empty_batch", t(0, 2, 3), t(2, 3, 2), t(3))


def _max_pool(with_indices_kwarg):
    def gen(row, dt, rng):
        def t(*shape, layout="contiguous"):
            return make(shape, dt, rng, layout)

        yield _s("basic", t(2, 3, 4, 4), 2)
        yield _s("ceil_padded", t(1, 2, 5, 6), 3, 2, 1, ceil_mode=True)
        yield _s("dilated", t(1, 2, 6, 7), (2, 3), None, 1, 2)
        yield _s("overlapping", t(3, 5, 5), 2, 1)
        yield _s("stride_tuple", t(1, 1, 5, 6), (3, 2), (2, 1), (1, 0))
        yield _s("noncontiguous", t(1, 2, 4, 4, layout="stepped"), 2)
        yield _s("empty_batch", t(0, 2, 4, 4), 2)
        if with_indices_kwarg:
            yield _s("indices", t(2, 2, 4, 5), 2, return_indices=True)
            yield _s("indices_ceil", t(1, 2, 5, 5), 2, ceil_mode=True, return_indices=True)

    return gen


def _avg_pool2d(row, dt, rng):
    def t(*shape, layout="contiguous"):
        return make(shape, dt, rng, layout)

    yield _s("basic", t(2, 3, 4, 4), 2)
    yield _s("ceil_padded", t(1, 2, 5, 6), 3, 2, 1, True)
    yield _s("exclude_pad", t(1, 2, 5, 5), 3, 2, 1, True, False)
    yield _s("divisor_override", t(1, 2, 4, 5), (2, 3), 1, (1, 1), divisor_override=3)
    yield _s("unbatched", t(3, 5, 5), 2, (1, 2))
    yield _s("noncontiguous", t(1, 2, 4, 4, layout="stepped"), 2)
    yield _s("empty_batch", t(0, 2, 4, 4), 2)


def _adaptive_avg_pool2d(row, dt, rng):
    def t(*shape, layout="contiguous"):
        return make(shape, dt, rng, layout)

    yield _s("int", t(2, 3, 5, 7), 3)
    yield _s("global", t(2, 3, 4, 4), 1)
    yield _s("none_keeps", t(1, 2, 5, 4), (3, None))
    yield _s("upsampling", t(2, 3, 2), [4, 3])
    yield _s("noncontiguous", t(1, 2, 5, 5, layout="stepped"), (2, 4))
    yield _s("empty_batch", t(0, 2, 4, 4), 2)


def _conv_weight(row, dt, rng):
    """input, grad_output and the geometry of the convolution they belong to (output sizes
    computed from it)."""

    def case(name, xs, o, kernel, stride, pads, dilation, groups, layout="contiguous"):
        out = tuple(
            (n + lo + hi - d * (k - 1) - 1) // s + 1
            for n, (lo, hi), d, k, s in zip(xs[2:], pads, dilation, kernel, stride)
        )
        x = make(xs, dt, rng, layout)
        g = make((xs[0], o) + out, dt, rng)
        return _s(name, x, g, kernel, stride, pads, dilation, groups)

    yield case("basic", (2, 2, 4, 4), 3, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1)
    yield case("strided", (1, 2, 5, 4), 2, (2, 3), (2, 1), ((1, 1), (0, 0)), (1, 1), 1)
    yield case("uneven_pads", (1, 2, 4, 4), 2, (2, 3), (1, 1), ((0, 1), (2, 1)), (2, 1), 1)
    yield case("groups", (1, 4, 4, 5), 4, (2, 2), (1, 2), ((0, 0), (1, 1)), (1, 1), 2)
    yield case("1d", (2, 2, 6), 3, (3,), (2,), ((1, 2),), (2,), 1, "stepped")
    yield case("empty_batch", (0, 2, 4, 4), 3, (3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1)


def _max_pool_backward(row, dt, rng):
    """grad_output shaped as the pooling of input, the input, the pooling's geometry."""

    def case(name, xs, *args, layout="contiguous", **kw):
        x = make(xs, dt, rng, layout)
        out = tp.max_pool2d(tp.zeros(xs), *args, **kw)  # (the shape, for every dtype)
        return _s(name, make(tuple(out.shape), dt, rng), x, *args, **kw)

    yield case("basic", (2, 3, 4, 4), 2)
    yield case("padded_ceil", (1, 2, 5, 6), 3, 2, 1, ceil_mode=True)
    yield case("dilated", (1, 2, 6, 7), (2, 3), 1, 0, 2)
    yield case("unbatched", (3, 5, 5), 2, (1, 2))
    yield case("noncontiguous", (1, 2, 4, 4), 2, layout="stepped")
    yield case("empty_batch", (0, 2, 4, 4), 2)


NAMED: dict = {
    "_conv_weight": _conv_weight,
    "_max_pool2d_backward": _max_pool_backward,
    "conv1d": _conv1d,
    "conv2d": _conv2d,
    "conv_transpose1d": _conv_transpose1d,
    "conv_transpose2d": _conv_transpose2d,
    "max_pool2d": _max_pool(True),
    "_max_pool2d_with_indices": _max_pool(False),
    "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d,
}


# ---- references ---------------------------------------------------------------------------


def _conv_ref(nd):
    def ref(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
        batched = x.ndim == nd + 2
        x = x if batched else x[None]
        stride, dilation, kernel = _tup(stride, nd), _tup(dilation, nd), w.shape[2:]
        if padding == "valid":
            pads = [(0, 0)] * nd
        elif padding == "same":
            totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
            pads = [(t // 2, t - t // 2) for t in totals]
        else:
            pads = [(p, p) for p in _tup(padding, nd)]
        xp = np.pad(x, [(0, 0), (0, 0)] + pads)
        n, c = x.shape[:2]
        o = w.shape[0]
        cg, og = c // groups, o // groups
        out_sp = [
            (xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
            for i in range(nd)
        ]
        out = np.zeros((n, o, *out_sp), dtype=np.result_type(x, w))
        axes = list(range(1, 2 + nd))
        for pos in np.ndindex(*out_sp):
            window = tuple(
                slice(p * s, p * s + d * (k - 1) + 1, d)
                for p, s, d, k in zip(pos, stride, dilation, kernel)
            )
            for g in range(groups):
                patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + window]
                wg = w[g * og : (g + 1) * og]
                at = (slice(None), slice(g * og, (g + 1) * og)) + pos
                out[at] = np.tensordot(patch, wg, axes=(axes, axes))
        if b is not None:
            out = out + b.reshape((-1,) + (1,) * nd)
        return out if batched else out[0]

    return ref


def _conv_t_ref(nd):
    def ref(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
        batched = x.ndim == nd + 2
        x = x if batched else x[None]
        stride, padding = _tup(stride, nd), _tup(padding, nd)
        output_padding, dilation = _tup(output_padding, nd), _tup(dilation, nd)
        kernel, spatial = w.shape[2:], x.shape[2:]
        n, c = x.shape[:2]
        cg, og = c // groups, w.shape[1]
        full = [
            (m - 1) * s + d * (k - 1) + 1 + op
            for m, s, d, k, op in zip(spatial, stride, dilation, kernel, output_padding)
        ]
        out = np.zeros((n, groups * og, *full), dtype=np.result_type(x, w))
        for pos in np.ndindex(*spatial):
            reach = tuple(
                slice(p * s, p * s + d * (k - 1) + 1, d)
                for p, s, d, k in zip(pos, stride, dilation, kernel)
            )
            for g in range(groups):
                xs = x[(slice(None), slice(g * cg, (g + 1) * cg)) + pos]  # (n, cg)
                ws = w[g * cg : (g + 1) * cg]  # (cg, og, *kernel)
                out[(slice(None), slice(g * og, (g + 1) * og)) + reach] += np.tensordot(
                    xs, ws, axes=(1, 0)
                )
        crop = tuple(slice(p, f - p) for p, f in zip(padding, full))
        out = out[(slice(None), slice(None)) + crop]
        if b is not None:
            out = out + b.reshape((-1,) + (1,) * nd)
        return out if batched else out[0]

    return ref


def _pool_out(n, k, p, s, d, ceil_mode):
    span = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    o = span // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


def _pool_args(kernel_size, stride, padding, dilation):
    k = _tup(kernel_size, 2)
    s = k if stride is None or stride == [] else _tup(stride, 2)
    return k, s, _tup(padding, 2), _tup(dilation, 2)


def _max_pool_ref(
    x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    h, w = x.shape[-2:]
    oh, ow = (_pool_out(*a, ceil_mode) for a in zip((h, w), k, p, s, d))
    vals = np.zeros(x.shape[:-2] + (oh, ow), dtype=x.dtype)
    idx = np.zeros(x.shape[:-2] + (oh, ow), dtype=np.int64)
    for i, j in np.ndindex(oh, ow):
        rows = [r for r in range(i * s[0] - p[0], i * s[0] - p[0] + d[0] * (k[0] - 1) + 1, d[0])]
        cols = [c for c in range(j * s[1] - p[1], j * s[1] - p[1] + d[1] * (k[1] - 1) + 1, d[1])]
        cells = [(r, c) for r in rows if 0 <= r < h for c in cols if 0 <= c < w]
        best = np.full(x.shape[:-2], -np.inf)
        at = np.full(x.shape[:-2], cells[0][0] * w + cells[0][1], dtype=np.int64)
        for r, c in cells:
            v = x[..., r, c]
            take = (v > best) | np.isnan(v)
            best = np.where(take, v, best)
            at = np.where(take, r * w + c, at)
        vals[..., i, j], idx[..., i, j] = best, at
    return (vals, idx) if return_indices else vals


def _avg_pool_ref(
    x,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    k, s, p, _ = _pool_args(kernel_size, stride, padding, 1)
    h, w = x.shape[-2:]
    oh, ow = (_pool_out(*a, 1, ceil_mode) for a in zip((h, w), k, p, s))
    out = np.zeros(x.shape[:-2] + (oh, ow), dtype=x.dtype)
    for i, j in np.ndindex(oh, ow):
        hs, ws = i * s[0] - p[0], j * s[1] - p[1]
        he, we = min(hs + k[0], h + p[0]), min(ws + k[1], w + p[1])
        size = (he - hs) * (we - ws)
        hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
        total = x[..., hs:he, ws:we].sum(axis=(-2, -1))
        if divisor_override is not None:
            div = divisor_override
        else:
            div = size if count_include_pad else (he - hs) * (we - ws)
        if x.dtype.kind == "i":  # C++ integer division: toward zero
            out[..., i, j] = np.sign(total) * np.sign(div) * (np.abs(total) // abs(div))
        else:
            out[..., i, j] = total / div
    return out


def _adaptive_ref(x, output_size):
    size = output_size if isinstance(output_size, (list, tuple)) else (output_size,) * 2
    h, w = x.shape[-2:]
    oh, ow = (n if v is None else v for v, n in zip(size, (h, w)))
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for i, j in np.ndindex(oh, ow):
        hs, he = i * h // oh, -(-(i + 1) * h // oh)
        ws, we = j * w // ow, -(-(j + 1) * w // ow)
        out[..., i, j] = x[..., hs:he, ws:we].mean(axis=(-2, -1))
    return out


def _conv_weight_ref(x, gout, kernel_size, stride, pads, dilation, groups):
    nd = len(kernel_size)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    n, c = x.shape[:2]
    o = gout.shape[1]
    cg, og = c // groups, o // groups
    gw = np.zeros((o, cg) + tuple(kernel_size), dtype=np.result_type(x, gout))
    for oc, ci in np.ndindex(o, cg):
        g = oc // og
        for k in np.ndindex(*kernel_size):
            for y in np.ndindex(*gout.shape[2:]):
                at = tuple(yy * s + kk * d for yy, s, kk, d in zip(y, stride, k, dilation))
                xs = xp[(slice(None), g * cg + ci) + at]
                gw[(oc, ci) + k] += (gout[(slice(None), oc) + y] * xs).sum()
    assert nd == gw.ndim - 2
    return gw


def _max_pool_backward_ref(grad, x, *args, **kw):
    """The gradient added at each window's index (the reference's own indices)."""
    _, index = _max_pool_ref(x, *args, **kw, return_indices=True)
    lead, (h, w) = x.shape[:-2], x.shape[-2:]
    out = np.zeros(lead + (h * w,), dtype=np.result_type(grad, x))
    k = int(np.prod(grad.shape[-2:]))
    g, idx = grad.reshape(lead + (k,)), index.reshape(lead + (k,))
    for at in np.ndindex(*lead):
        np.add.at(out[at], idx[at], g[at])
    return out.reshape(x.shape)


REF: dict = {
    "_conv_weight": _conv_weight_ref,
    "_max_pool2d_backward": _max_pool_backward_ref,
    "conv1d": _conv_ref(1),
    "conv2d": _conv_ref(2),
    "conv_transpose1d": _conv_t_ref(1),
    "conv_transpose2d": _conv_t_ref(2),
    "max_pool2d": _max_pool_ref,
    "_max_pool2d_with_indices": lambda *a, **kw: _max_pool_ref(*a, **kw, return_indices=True),
    "avg_pool2d": _avg_pool_ref,
    "adaptive_avg_pool2d": _adaptive_ref,
}

assert set(NAMED) == set(REF)
