"""``repr(tensor)`` in PyTorch's format, character for character.

This follows ``torch/_tensor_str.py`` with its default print options
(precision 4, threshold 1000, edgeitems 3, linewidth 80): one formatter per
tensor (two for complex: real and imaginary parts) picks integer, fixed or
scientific notation from the non-zero finite values, all elements are padded
to one width, and long rows wrap at 80 columns.
"""

from __future__ import annotations

import math

import numpy as np

from tensorplay import _dtype as D
from tensorplay._device_checks import to_host

PRECISION = 4
THRESHOLD = 1000  # more elements than this are summarized with "..."
EDGEITEMS = 3
LINEWIDTH = 80


class _Formatter:
    """Chooses the notation and the common width, like torch's ``_Formatter``."""

    def __init__(self, values: np.ndarray, floating: bool):
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(f"{v}"))
            return
        vals = flat[np.isfinite(flat) & (flat != 0)]
        if vals.size == 0:
            return  # nothing but zeros, nan and inf: integer mode, width 1
        absv = np.abs(vals.astype(np.float64))
        lo, hi = absv.min(), absv.max()
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        as_list = vals.tolist()
        # integer-valued floats still switch to scientific notation for wide ranges,
        # but never for small magnitudes (they print as "0." otherwise)
        self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or (not self.int_mode and lo < 1.0e-4)
        if self.sci_mode:
            widths = (len(f"{v:.{PRECISION}e}") for v in as_list)
        elif self.int_mode:
            widths = (len(f"{v:.0f}") + 1 for v in as_list)  # + 1 for the trailing "."
        else:
            widths = (len(f"{v:.{PRECISION}f}") for v in as_list)
        self.max_width = max(self.max_width, *widths)

    def width(self) -> int:
        return self.max_width

    def format(self, value) -> str:
        if self.floating:
            if self.sci_mode:
                s = f"{value:{self.max_width}.{PRECISION}e}"
            elif self.int_mode:
                s = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    s += "."
            else:
                s = f"{value:.{PRECISION}f}"
        else:
            s = f"{value}"
        return (self.max_width - len(s)) * " " + s


def _summarized(arr: np.ndarray) -> np.ndarray:
    """The elements that a summarized print shows (edge items of every dimension)."""
    if arr.ndim == 0:
        return arr
    if arr.ndim == 1:
        if arr.shape[0] > 2 * EDGEITEMS:
            return np.concatenate([arr[:EDGEITEMS], arr[-EDGEITEMS:]])
        return arr
    rows = list(range(arr.shape[0]))
    if arr.shape[0] > 2 * EDGEITEMS:
        rows = rows[:EDGEITEMS] + rows[-EDGEITEMS:]
    return np.stack([_summarized(arr[i]) for i in rows])


def _scalar(value, fmt1: _Formatter, fmt2: _Formatter | None) -> str:
    if fmt2 is None:
        return fmt1.format(value)
    real = fmt1.format(value.real)
    imag = (fmt2.format(value.imag) + "j").lstrip()
    # a negative (or signed zero) imaginary part brings its own sign
    return real + imag if imag[0] in "+-" else real + "+" + imag


def _vector(arr: np.ndarray, indent: int, summarize: bool, fmt1, fmt2) -> str:
    element_length = fmt1.width() + 2  # ", " between elements
    if fmt2 is not None:
        element_length += fmt2.width() + 1  # the imaginary part and its "j"
    per_line = max(1, int(math.floor((LINEWIDTH - indent) / element_length)))
    if summarize and arr.shape[0] > 2 * EDGEITEMS:
        data = (
            [_scalar(v, fmt1, fmt2) for v in arr[:EDGEITEMS].tolist()]
            + [" ..."]
            + [_scalar(v, fmt1, fmt2) for v in arr[-EDGEITEMS:].tolist()]
        )
    else:
        data = [_scalar(v, fmt1, fmt2) for v in arr.tolist()]
    lines = [", ".join(data[i : i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _body(arr: np.ndarray, indent: int, summarize: bool, fmt1, fmt2) -> str:
    if arr.ndim == 0:
        return _scalar(arr.item(), fmt1, fmt2)
    if arr.ndim == 1:
        return _vector(arr, indent, summarize, fmt1, fmt2)
    n = arr.shape[0]
    if summarize and n > 2 * EDGEITEMS:
        slices = (
            [_body(arr[i], indent + 1, summarize, fmt1, fmt2) for i in range(EDGEITEMS)]
            + ["..."]
            + [_body(arr[i], indent + 1, summarize, fmt1, fmt2) for i in range(n - EDGEITEMS, n)]
        )
    else:
        slices = [_body(arr[i], indent + 1, summarize, fmt1, fmt2) for i in range(n)]
    # one blank line between 2-D blocks of a 3-D tensor, two between 3-D blocks, ...
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _tensor_str(arr: np.ndarray, dt, indent: int) -> str:
    if arr.size == 0:
        return "[]"
    summarize = arr.size > THRESHOLD
    if dt in (D.float16, D.bfloat16):
        arr = arr.astype(np.float32)  # torch prints half types through float32 too
    shown = _summarized(arr) if summarize else arr
    if dt.is_complex:
        fmt1 = _Formatter(shown.real, True)
        fmt2 = _Formatter(shown.imag, True)
        return _body(arr, indent, summarize, fmt1, fmt2)
    return _body(arr, indent, summarize, _Formatter(shown, dt.is_floating_point), None)


def _add_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    # a suffix that would pass the line width goes on a line of its own
    parts = [text]
    last_line_len = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_len += len(suffix) + 2
    return "".join(parts) + ")"


def _device_str(t) -> str:
    if t.device.type == "cuda" and t.device.index is None and t._data is not None:
        return f"cuda:{t._data.device.id}"  # torch always names the index
    return str(t.device)


def tensor_repr(t) -> str:
    # a subclass prints its own name (torch: ``S([1., 2.])``)
    prefix = "tensor(" if type(t).__name__ == "Tensor" else f"{type(t).__name__}("
    indent = len(prefix)
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{_device_str(t)}'")
    default = D.get_default_dtype()
    if t._data is None:  # meta: no values to show
        suffixes.append(f"size={tuple(t._shape)}")
        if t.dtype is not default:
            suffixes.append(f"dtype={t.dtype}")
        body = "..."
    elif t.numel() == 0:
        if t.dim() != 1:  # like numpy, the shape of an empty tensor is shown unless (0,)
            suffixes.append(f"size={tuple(t._shape)}")
        if t.dtype is not default:  # nothing to infer the dtype from: always shown
            suffixes.append(f"dtype={t.dtype}")
        body = "[]"
    else:
        if t.dtype not in (default, default.to_complex(), D.int64, D.bool):
            suffixes.append(f"dtype={t.dtype}")
        arr = t._data if t.device.type == "cpu" else to_host(t._data)
        body = _tensor_str(arr, t.dtype, indent)
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, indent)
