"""The Triton kernels of the ``tpk`` library, in Triton's language.

Imported on the first launch (``tensorplay.kernels._ops`` asks for it), never at
``import tensorplay.kernels``: importing this module imports Triton, which first decides
between compiled CUDA kernels and the CPU interpreter (see ``_capability.import_triton``).

Conventions: pointers are typed by the tensors passed for them; ``ACC`` is the
accumulation type (float32 for half types and float32, float64 for float64); ``OP`` /
``ACT`` are strings resolved at compile time, so each variant is its own kernel.
Offsets are int64 so tensors of more than 2**31 elements index correctly; kernels that
divide offsets (broadcasting, bias) use int32 when ``wide_index`` says they fit.
"""

from __future__ import annotations

import math

from tensorplay.kernels._capability import import_triton

import_triton()  # picks the interpreter on a machine without CUDA, before tl is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import tensorplay as tp  # noqa: E402
from tensorplay.kernels._launch import kernel  # noqa: E402
from tensorplay.library import wrap_triton  # noqa: E402

# the accumulation type per tensor dtype: float64 stays, half types and float32 use float32
ACC_TYPES = {
    tp.float16: tl.float32,
    tp.bfloat16: tl.float32,
    tp.float32: tl.float32,
    tp.float64: tl.float64,
}


def elementwise_launch(n: int) -> tuple[tuple[int], dict]:
    """Grid and meta-parameters for an elementwise kernel over ``n`` elements.

    Chosen, not autotuned: an autotuner would benchmark every new size on its first call
    (hundreds of ms each, for every shape a program meets). Large tensors get 4096
    elements per program and 8 warps (16 per thread: enough loads in flight to stream at
    bandwidth); small ones 1024 and 4 warps, so they still spread over the SMs.
    """
    block, warps = (4096, 8) if n >= 1 << 22 else (1024, 4)
    return ((n + block - 1) // block,), {"BLOCK": block, "num_warps": warps}


def launch_broadcast(a, b, out, shape4, sa, sb, op: str, acc) -> None:
    """``out = op(a, b)`` over the contiguous 4-d ``shape4``, the inputs read through their
    element strides ``sa``/``sb`` (0 along broadcast dimensions; tensors or ``Pointer``s).

    A last dimension of 256 or more runs ``_binary_rows`` (per-program row indexing,
    vectorised loads); shorter ones the flat ``_binary`` over all elements.
    """
    rows = shape4[0] * shape4[1] * shape4[2]
    cols = shape4[3]
    block = min(4096, 1 << (cols - 1).bit_length())
    if cols >= 256 and (cols + block - 1) // block <= 65535:  # the grid's y-limit
        grid = (rows, (cols + block - 1) // block)
        meta = {"BLOCK": block, "num_warps": 8 if block >= 4096 else 4}
        binary_rows[grid](a, b, out, *shape4[1:], *sa, *sb, OP=op, ACC=acc, **meta)
        return
    n = rows * cols
    grid, meta = elementwise_launch(n)
    wide = wide_index(shape4, sa, sb)
    binary[grid](a, b, out, n, *shape4[1:], *sa, *sb, OP=op, ACC=acc, WIDE=wide, **meta)


INT32_MAX = (1 << 31) - 1


def wide_index(shape: tuple[int, ...], *strides: list[int]) -> bool:
    """Whether an elementwise launch over ``shape`` (inputs read with the element
    ``strides``, one list per input) can meet an offset past ``2**31 - 1``: the kernels
    then index in 64-bit (``WIDE``)."""
    if math.prod(shape) > INT32_MAX:
        return True
    return any(sum((n - 1) * abs(st) for n, st in zip(shape, sts)) > INT32_MAX for sts in strides)


def is_half(dtype: object) -> bool:
    """float16/bfloat16 (``HALF``): results rounded to half precision."""
    return dtype is tp.float16 or dtype is tp.bfloat16


# ---- elementwise ------------------------------------------------------------------------


def _one_plus_erf(z):
    # 1 + erf(z) for results that are rounded to float16/bfloat16 (HALF): Abramowitz &
    # Stegun 7.1.26, erfc(|z|) ~ t*P(t)*exp(-z*z) with t = 1/(1 + p|z|), absolute error
    # <= 1.5e-7 -- far below half-precision rounding (bfloat16 keeps ~2.4 digits). About
    # half the instructions of libdevice's erf, which made half-precision gelu
    # compute-bound on the H200 (66% of copy bandwidth); for negative z it is computed as
    # erfc directly, without the cancellation of 1 + erf.
    a = tl.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = 0.254829592 + t * (
        -0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))
    )
    erfc = t * poly * tl.exp(-a * a)
    return tl.where(z >= 0, 2.0 - erfc, erfc)


def _activation(x, ACT: tl.constexpr, HALF: tl.constexpr):
    # Written out (no tl.sigmoid / libdevice tanh) so the same code runs on the interpreter,
    # and in forms that keep full relative precision: sigmoid never computes exp of a large
    # positive number, tanh switches to its Taylor series near 0 (where 1 - exp(-2|x|)
    # would cancel).
    if ACT == "relu":
        y = tl.where(x < 0, 0.0, x)  # NaN stays NaN, like numpy's maximum
    elif ACT == "gelu":
        if HALF:
            y = 0.5 * x * one_plus_erf(x * 0.7071067811865476)
        else:
            y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif ACT == "gelu_tanh":
        z = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * z)) - 1.0))
    elif ACT == "silu" or ACT == "sigmoid":
        e = tl.exp(-tl.abs(x))
        s = tl.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        if ACT == "silu":
            y = x * s
        else:
            y = s
    elif ACT == "tanh":
        a = tl.abs(x)
        e = tl.exp(-2.0 * a)
        big = (1.0 - e) / (1.0 + e)
        x2 = x * x
        # odd Taylor series to x**11: below 0.1 its error is under float64 rounding
        poly = 62.0 / 2835.0 - x2 * (1382.0 / 155925.0)
        small = a * (1.0 - x2 * (1.0 / 3.0 - x2 * (2.0 / 15.0 - x2 * (17.0 / 315.0 - x2 * poly))))
        t = tl.where(a < 0.1, small, big)
        y = tl.where(x < 0, -t, t)
    elif ACT == "exp":
        y = tl.exp(x)
    elif ACT == "neg":
        y = -x
    elif ACT == "abs":
        y = tl.abs(x)
    elif ACT == "sqrt":
        y = tl.sqrt(x)
    else:  # "none"
        y = x
    return y


def _binary_op(a, b, OP: tl.constexpr):
    if OP == "add":
        y = a + b
    elif OP == "sub":
        y = a - b
    elif OP == "mul":
        y = a * b
    elif OP == "div":
        y = a / b
    elif OP == "maximum":
        y = tl.where((a > b) | (a != a), a, b)  # NaN propagates, like numpy
    else:  # "minimum"
        y = tl.where((a < b) | (a != a), a, b)
    return y


def _unary(
    x_ptr,
    out_ptr,
    n,
    ACT: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
    HALF: tl.constexpr = False,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(ACC)
    y = activation(x, ACT, HALF)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _binary_contig(
    a_ptr, b_ptr, out_ptr, n, OP: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr
):
    # same-shape contiguous operands: the common case gets a kernel with few arguments,
    # which keeps the launch cheap
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(ACC)
    b = tl.load(b_ptr + offs, mask=mask, other=1).to(ACC)
    y = _combine(a, b, OP)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _binary(
    a_ptr,
    b_ptr,
    out_ptr,
    n,
    s1,
    s2,
    s3,
    as0,
    as1,
    as2,
    as3,
    bs0,
    bs1,
    bs2,
    bs3,
    OP: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
    WIDE: tl.constexpr = True,
):
    # The output is contiguous with shape (s0, s1, s2, s3); inputs are read through their
    # own element strides (0 along broadcast dimensions), so nothing is expanded in memory.
    # Index arithmetic is 32-bit unless an offset can pass 2**31 - 1 (WIDE, see
    # ``wide_index``): 64-bit division is emulated on GPUs and made half-precision
    # broadcasting compute-bound.
    if WIDE:
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i3 = offs % s3
    r = offs // s3
    i2 = r % s2
    r = r // s2
    i1 = r % s1
    i0 = r // s1
    a_off = i0 * as0 + i1 * as1 + i2 * as2 + i3 * as3
    b_off = i0 * bs0 + i1 * bs1 + i2 * bs2 + i3 * bs3
    a = tl.load(a_ptr + a_off, mask=mask).to(ACC)
    b = tl.load(b_ptr + b_off, mask=mask, other=1).to(ACC)  # 1: no 0/0 in masked lanes
    y = _combine(a, b, OP)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _binary_rows(
    a_ptr,
    b_ptr,
    out_ptr,
    s1,
    s2,
    s3,
    as0,
    as1,
    as2,
    as3,
    bs0,
    bs1,
    bs2,
    bs3,
    OP: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Broadcasting with a long last dimension: one program per (output row, block of the
    # last dimension). The row index splits into (i0, i1, i2) once per program, not per
    # element, and along the last dimension each input is read at its own stride: when
    # that is 1 (Triton then knows it) or 0, the loads are contiguous and vectorised --
    # the per-element index arithmetic and scalar loads of ``_binary`` made
    # half-precision broadcasting compute-bound.
    row = tl.program_id(0)
    i2 = row % s2
    r = row // s2
    i1 = r % s1
    i0 = r // s1
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < s3
    a_row = i0.to(tl.int64) * as0 + i1.to(tl.int64) * as1 + i2.to(tl.int64) * as2
    b_row = i0.to(tl.int64) * bs0 + i1.to(tl.int64) * bs1 + i2.to(tl.int64) * bs2
    a = tl.load(a_ptr + a_row + cols.to(tl.int64) * as3, mask=mask).to(ACC)
    b = tl.load(b_ptr + b_row + cols.to(tl.int64) * bs3, mask=mask, other=1).to(ACC)
    y = _combine(a, b, OP)
    tl.store(out_ptr + row.to(tl.int64) * s3 + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _bias_act(
    x_ptr,
    b_ptr,
    out_ptr,
    n,
    n_cols,
    ACT: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
    HALF: tl.constexpr = False,
    WIDE: tl.constexpr = True,
):
    if WIDE:  # as in _binary: 32-bit offsets (and modulo) when they fit
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(ACC)
    b = tl.load(b_ptr + offs % n_cols, mask=mask).to(ACC)
    y = activation(x + b, ACT, HALF)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


# ---- row kernels: one program per row of a contiguous (rows, n_cols) view ----------------
# SINGLE: the row fits one block and is read once; otherwise the row is walked in chunks.


def _row_reduce(x_ptr, out_ptr, n_cols, OP: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * n_cols
    if OP == "max":
        acc = tl.full([BLOCK], float("-inf"), ACC)
        nan = tl.zeros([BLOCK], tl.int32)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(base + offs, mask=offs < n_cols, other=float("-inf")).to(ACC)
            nan = nan | (x != x).to(tl.int32)
            acc = tl.where(x > acc, x, acc)
        r = tl.max(acc, 0)
        r = tl.where(tl.max(nan, 0) > 0, float("nan"), r)  # any NaN makes the max NaN
    else:
        acc = tl.zeros([BLOCK], ACC)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(base + offs, mask=offs < n_cols, other=0.0).to(ACC)
        r = tl.sum(acc, 0)
        if OP == "mean":
            r = r / n_cols
    tl.store(out_ptr + row, r.to(out_ptr.dtype.element_ty))


def _softmax(x_ptr, out_ptr, n_cols, SINGLE: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    if SINGLE:
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(ACC)
        e = tl.exp(x - tl.max(x, 0))
        e = tl.where(mask, e, 0.0)
        tl.store(o_row + offs, (e / tl.sum(e, 0)).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        # online pass: running max m and the sum s of exp(x - m), rescaled when m grows
        m = tl.full([BLOCK], float("-inf"), ACC)
        s = tl.zeros([BLOCK], ACC)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf")).to(ACC)
            m_new = tl.maximum(m, x)
            scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
            s = s * scale + tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
            m = m_new
        m_row = tl.max(m, 0)
        s_row = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - m_row)), 0)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(ACC)
            y = tl.exp(x - m_row) / s_row
            tl.store(o_row + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _softmax_backward(
    g_ptr, y_ptr, out_ptr, n_cols, SINGLE: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr
):
    # dx = y * (g - sum(g * y)) along the row
    row = tl.program_id(0).to(tl.int64)
    g_row = g_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    if SINGLE:
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        g = tl.load(g_row + offs, mask=mask, other=0.0).to(ACC)
        y = tl.load(y_row + offs, mask=mask, other=0.0).to(ACC)
        dot = tl.sum(g * y, 0)
        tl.store(o_row + offs, (y * (g - dot)).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], ACC)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            g = tl.load(g_row + offs, mask=mask, other=0.0).to(ACC)
            y = tl.load(y_row + offs, mask=mask, other=0.0).to(ACC)
            acc += g * y
        dot = tl.sum(acc, 0)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            g = tl.load(g_row + offs, mask=mask, other=0.0).to(ACC)
            y = tl.load(y_row + offs, mask=mask, other=0.0).to(ACC)
            tl.store(o_row + offs, (y * (g - dot)).to(out_ptr.dtype.element_ty), mask=mask)


def _layer_norm(
    x_ptr,
    w_ptr,
    b_ptr,
    out_ptr,
    n_cols,
    eps,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    SINGLE: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    o_row = out_ptr + row * n_cols
    if SINGLE:
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(ACC)
        mean = tl.sum(x, 0) / n_cols
        d = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, 0) / n_cols + eps)
        y = d * rstd
        if HAS_W:
            y = y * tl.load(w_ptr + offs, mask=mask, other=0.0).to(ACC)
        if HAS_B:
            y = y + tl.load(b_ptr + offs, mask=mask, other=0.0).to(ACC)
        tl.store(o_row + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], ACC)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(ACC)
        mean = tl.sum(acc, 0) / n_cols
        acc = tl.zeros([BLOCK], ACC)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(ACC)
            d = tl.where(mask, x - mean, 0.0)
            acc += d * d
        rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / n_cols + eps)
        for start in range(0, n_cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(ACC)
            y = (x - mean) * rstd
            if HAS_W:
                y = y * tl.load(w_ptr + offs, mask=mask, other=0.0).to(ACC)
            if HAS_B:
                y = y + tl.load(b_ptr + offs, mask=mask, other=0.0).to(ACC)
            tl.store(o_row + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _layer_norm_backward_dx(
    g_ptr,
    x_ptr,
    w_ptr,
    dx_ptr,
    mean_ptr,
    rstd_ptr,
    n_cols,
    eps,
    HAS_W: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # dx = rstd * (wg - mean(wg) - xhat * mean(wg * xhat)), wg = w * g; the row statistics
    # are recomputed (cheaper than saving them) and stored for the weight/bias kernel.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    g_row = g_ptr + row * n_cols
    acc = tl.zeros([BLOCK], ACC)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(ACC)
    mean = tl.sum(acc, 0) / n_cols
    acc = tl.zeros([BLOCK], ACC)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        d = tl.where(mask, tl.load(x_row + offs, mask=mask, other=0.0).to(ACC) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / n_cols + eps)
    c1 = tl.zeros([BLOCK], ACC)
    c2 = tl.zeros([BLOCK], ACC)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        xhat = (tl.load(x_row + offs, mask=mask, other=0.0).to(ACC) - mean) * rstd
        wg = tl.load(g_row + offs, mask=mask, other=0.0).to(ACC)
        if HAS_W:
            wg = wg * tl.load(w_ptr + offs, mask=mask, other=0.0).to(ACC)
        c1 += tl.where(mask, xhat * wg, 0.0)
        c2 += wg
    c1s = tl.sum(c1, 0) / n_cols
    c2s = tl.sum(c2, 0) / n_cols
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_cols
        xhat = (tl.load(x_row + offs, mask=mask, other=0.0).to(ACC) - mean) * rstd
        wg = tl.load(g_row + offs, mask=mask, other=0.0).to(ACC)
        if HAS_W:
            wg = wg * tl.load(w_ptr + offs, mask=mask, other=0.0).to(ACC)
        dx = (wg - xhat * c1s - c2s) * rstd
        tl.store(dx_ptr + row * n_cols + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


def _layer_norm_backward_dwdb(
    g_ptr,
    x_ptr,
    mean_ptr,
    rstd_ptr,
    dw_ptr,
    db_ptr,
    n_rows,
    n_cols,
    ACC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # one program per block of columns, walking all rows: dw = sum(g * xhat), db = sum(g)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < n_cols
    dw = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    db = tl.zeros([BLOCK_M, BLOCK_N], ACC)
    for start in range(0, n_rows, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < n_rows
        mask = rmask[:, None] & cmask[None, :]
        idx = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        g = tl.load(g_ptr + idx, mask=mask, other=0.0).to(ACC)
        x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(ACC)
        mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0).to(ACC)
        rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0).to(ACC)
        dw += g * (x - mean[:, None]) * rstd[:, None]
        db += g
    tl.store(dw_ptr + cols, tl.sum(dw, 0).to(dw_ptr.dtype.element_ty), mask=cmask)
    tl.store(db_ptr + cols, tl.sum(db, 0).to(db_ptr.dtype.element_ty), mask=cmask)


# ---- matmul -------------------------------------------------------------------------------


def _matmul(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    ACC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # Programs are ordered in groups of GROUP_M row-blocks so neighbouring programs share
    # tiles of B in L2 (the classic Triton matmul schedule); accumulation is float32
    # (float64 for float64), the result is cast to C's type. Rows of A and columns of B
    # past the edge are read wrapped around (``% M``, ``% N``) instead of masked: the
    # loads stay unmasked along M/N (vectorised, pipelined) and the store drops them.
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_n
    first_m = (pid // in_group) * GROUP_M
    group_size = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_size
    pid_n = (pid % in_group) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rm % M).to(tl.int64)[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + (rn % N).to(tl.int64)[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if UPCAST:  # the CPU interpreter has no bfloat16 dot: multiply in float32
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=ACC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


_MM_CONFIGS = [
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 2, "num_stages": 4},
]
_FMA_CONFIGS = [
    {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 3},
]

# device functions the kernels above call
activation = triton.jit(_activation)
one_plus_erf = triton.jit(_one_plus_erf)
_combine = triton.jit(_binary_op)
unary = wrap_triton(kernel(_unary))
binary = wrap_triton(kernel(_binary))
binary_contig = wrap_triton(kernel(_binary_contig))
binary_rows = wrap_triton(kernel(_binary_rows))
bias_act = wrap_triton(kernel(_bias_act))
row_reduce = wrap_triton(kernel(_row_reduce))
softmax = wrap_triton(kernel(_softmax))
softmax_backward = wrap_triton(kernel(_softmax_backward))
layer_norm = wrap_triton(kernel(_layer_norm))
layer_norm_backward_dx = wrap_triton(kernel(_layer_norm_backward_dx))
layer_norm_backward_dwdb = wrap_triton(kernel(_layer_norm_backward_dwdb))
_MM_CPU = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4}
matmul = wrap_triton(kernel(_matmul, configs=_MM_CONFIGS, key=["M", "N", "K"], cpu_meta=_MM_CPU))
# IEEE float32 and float64 run on CUDA cores (no tensor cores): small tiles, which also
# keep the autotuner's compile time in seconds instead of minutes
matmul_fma = wrap_triton(
    kernel(_matmul, configs=_FMA_CONFIGS, key=["M", "N", "K"], cpu_meta=_MM_CPU)
)
