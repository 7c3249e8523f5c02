"""``repr(tensor)`` in PyTorch's format."""

from __future__ import annotations

import numpy as np

from tensorplay import _dtype as D

_SUMMARIZE = 1000
_EDGE = 3


def _defaults_hidden(t) -> bool:
    return t.dtype in (D.get_default_dtype(), D.int64, D.bool) or (
        t.dtype is D.get_default_dtype().to_complex())


def _fmt_float(values: np.ndarray):
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return lambda v: _special(v) or f"{v:.4f}"
    ints = bool(np.all(finite == np.round(finite)))
    amax, amin = np.abs(finite).max(), np.abs(finite).min()
    sci = amax >= 1e8 or (amin != 0 and amin < 1e-4) or (amin != 0 and amax / amin > 1000 and
                                                         not ints)
    if ints and not sci:
        return lambda v: _special(v) or f"{v:.0f}."
    if sci:
        return lambda v: _special(v) or f"{v:.4e}"
    return lambda v: _special(v) or f"{v:.4f}"


def _special(v) -> str | None:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return None


def _formatter(arr: np.ndarray, dt):
    if dt is D.bool:
        return lambda v: "True" if v else "False"
    if dt.category == 1:
        return lambda v: str(int(v))
    if dt.is_complex:
        re, im = _fmt_float(arr.real.astype(np.float64)), _fmt_float(arr.imag.astype(np.float64))
        return lambda v: f"{re(v.real)}{'+' if not v.imag < 0 else '-'}{im(abs(v.imag))}j"
    return _fmt_float(arr.astype(np.float64))


def _summary(arr: np.ndarray) -> np.ndarray:
    if arr.ndim == 0:
        return arr
    if arr.shape[0] > 2 * _EDGE:
        arr = np.concatenate([arr[:_EDGE], arr[-_EDGE:]])
    return np.stack([_summary(a) for a in arr]) if arr.ndim > 1 else arr


def _body(arr, fmt, width, indent, summarize) -> str:
    if arr.ndim == 0:
        return fmt(arr.item()).rjust(width)
    n = arr.shape[0]
    idx = list(range(n))
    if summarize and n > 2 * _EDGE:
        idx = list(range(_EDGE)) + [None] + list(range(n - _EDGE, n))
    if arr.ndim == 1:
        parts = ["..." if i is None else fmt(arr[i].item()).rjust(width) for i in idx]
        return "[" + ", ".join(parts) + "]"
    sep = "," + "\n" * (arr.ndim - 1) + " " * (indent + 1)
    parts = ["..." if i is None else _body(arr[i], fmt, width, indent + 1, summarize)
             for i in idx]
    return "[" + sep.join(parts) + "]"


def tensor_repr(t) -> str:
    suffix = []
    if t.device.type != "cpu":
        suffix.append(f"device='{t.device}'")
    if t._data is None:
        body = "..."
        suffix.insert(0, f"size={tuple(t._shape)}")
        suffix.append(f"dtype={t.dtype}")
    else:
        arr = t._data if t.device.type == "cpu" else t._data.get()
        if t.dtype in (D.bfloat16, D.float16):
            arr = arr.astype(np.float32)
        summarize = arr.size > _SUMMARIZE
        shown = _summary(arr) if summarize else arr
        fmt = _formatter(shown, t.dtype)
        width = max((len(fmt(v)) for v in shown.reshape(-1).tolist()), default=0)
        body = _body(arr, fmt, width, len("tensor("), summarize)
        if t.numel() == 0 and t.dim() != 1:
            suffix.insert(0, f"size={tuple(t._shape)}")
        if not _defaults_hidden(t):
            suffix.append(f"dtype={t.dtype}")
    if t.grad_fn is not None:
        suffix.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffix.append("requires_grad=True")
    return "tensor(" + ", ".join([body] + suffix) + ")"
