"""Geometry of view ops: new (shape, stride, offset) over the same storage.

Each function here is the meta rule of a view row in the op table. Nothing is
copied; ``make_view`` builds the tensor. Semantics follow PyTorch (``view``
fails where the strides do not allow it; ``reshape`` then copies).
"""

from __future__ import annotations

import math

from tensorplay._meta import wrap_dim
from tensorplay._tensor import _check_bounds, contiguous_strides, strides_of


def _geo(t):
    return t._shape, strides_of(t), t._offset


def _sizes(op, shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for n in shape:  # the common call: plain ints
        if type(n) is not int:
            break
    else:
        return tuple(shape)
    out = []
    for n in shape:
        if hasattr(n, "__index__") and not isinstance(n, bool):
            out.append(n.__index__())
        else:
            raise TypeError(f"{op}(): size must be a sequence of ints, got {shape!r}")
    return tuple(out)


def infer_size(op: str, shape, numel: int) -> tuple:
    """Resolve a single ``-1`` in ``shape`` against ``numel``."""
    if -1 not in shape and math.prod(shape) == numel and all(n >= 0 for n in shape):
        return tuple(shape)  # nothing to infer or to refuse
    shape = list(shape)
    neg = [i for i, n in enumerate(shape) if n == -1]
    if len(neg) > 1:
        raise RuntimeError(f"{op}(): only one dimension can be inferred")
    if any(n < -1 for n in shape):
        raise RuntimeError(f"{op}(): invalid shape dimension {min(shape)}")
    known = math.prod(n for n in shape if n != -1)
    if neg:
        if known == 0 or numel % known:
            raise RuntimeError(f"{op}(): shape {list(shape)} is invalid for input of size {numel}")
        shape[neg[0]] = numel // known
    elif known != numel:
        raise RuntimeError(f"{op}(): shape {list(shape)} is invalid for input of size {numel}")
    return tuple(shape)


def view_strides(old_shape, old_stride, new_shape):
    """Strides for viewing (old_shape, old_stride) as new_shape, or None (PyTorch computeStride)."""
    if math.prod(old_shape) == 0:
        return contiguous_strides(new_shape)
    if not old_shape:  # a 0-d tensor views as any shape of one element (torch computeStride)
        return (1,) * len(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_stride[-1] if old_stride else 1
    tensor_numel, view_numel = 1, 1
    for d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[d]
        if d == 0 or (old_shape[d - 1] != 1 and old_stride[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = old_stride[d - 1]
                tensor_numel, view_numel = 1, 1
    if view_d != -1:
        return None
    return tuple(new_stride)


def view(t, shape):
    shape = infer_size("view", _sizes("view", shape), math.prod(t._shape))
    if t._stride is None:  # C-contiguous: so is every view of it
        return shape, contiguous_strides(shape), t._offset
    st = view_strides(t._shape, strides_of(t), shape)
    if st is None:
        raise RuntimeError(
            "view(): view size is not compatible with input tensor's size and "
            "stride (at least one dimension spans across two contiguous subspaces). "
            "Use .reshape(...) instead."
        )
    return shape, st, t._offset


def permute(t, dims):
    dims = _sizes("permute", dims)
    n = t.dim()
    if len(dims) != n:
        raise RuntimeError(
            f"permute(): number of dims don't match in permute: input has {n} "
            f"dims but {len(dims)} were given"
        )
    axes = [wrap_dim(d, n, "permute") for d in dims]
    if len(set(axes)) != n:
        raise RuntimeError(f"permute(): repeated dim in {list(dims)}")
    shape, st, off = _geo(t)
    return tuple(shape[a] for a in axes), tuple(st[a] for a in axes), off


def transpose(t, dim0, dim1):
    n = t.dim()
    a, b = wrap_dim(dim0, n, "transpose"), wrap_dim(dim1, n, "transpose")
    shape, st, off = _geo(t)
    if a == b or not n:  # transpose(0-d, 0, -1) is the identity (torch)
        return shape, st, off
    shape, st = list(shape), list(st)
    shape[a], shape[b], st[a], st[b] = shape[b], shape[a], st[b], st[a]
    return tuple(shape), tuple(st), off


def t_(t):
    if t.dim() > 2:
        raise RuntimeError(f"t(): expects a tensor with <= 2 dimensions, but self is {t.dim()}D")
    return transpose(t, 0, -1) if t.dim() == 2 else _geo(t)


def expand(t, sizes):
    sizes = _sizes("expand", sizes)
    shape, st, off = _geo(t)
    if len(sizes) < len(shape):
        raise RuntimeError(
            f"expand(): the number of sizes provided ({len(sizes)}) must be greater "
            f"or equal to the number of dimensions in the tensor ({len(shape)})"
        )
    lead = len(sizes) - len(shape)
    out_shape, out_st = [], []
    for i, n in enumerate(sizes):
        if i < lead:
            if n < 0:
                raise RuntimeError(
                    f"expand(): the expanded size -1 is not allowed in a leading, "
                    f"non-existing dimension {i}"
                )
            out_shape.append(n)
            out_st.append(0)
            continue
        m, s = shape[i - lead], st[i - lead]
        if n == -1:
            n = m
        if m == n:
            out_shape.append(m)
            out_st.append(s)
        elif m == 1:
            out_shape.append(n)
            out_st.append(0)
        else:
            raise RuntimeError(
                f"expand(): the expanded size of the tensor ({n}) must match the "
                f"existing size ({m}) at non-singleton dimension {i}. Target sizes: "
                f"{list(sizes)}. Tensor sizes: {list(shape)}"
            )
    return tuple(out_shape), tuple(out_st), off


def expand_as(t, other):
    return expand(t, other._shape)


def squeeze(t, dim=None):
    shape, st, off = _geo(t)
    if dim is None:
        keep = [i for i, n in enumerate(shape) if n != 1]
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        drop = set()
        for d in dims:
            w = wrap_dim(d, len(shape), "squeeze")
            if w in drop:
                raise RuntimeError(f"squeeze(): dim {w} appears multiple times in the list of dims")
            drop.add(w)
        keep = [i for i, n in enumerate(shape) if not (i in drop and n == 1)]
    return tuple(shape[i] for i in keep), tuple(st[i] for i in keep), off


def unsqueeze(t, dim):
    shape, st, off = _geo(t)
    d = wrap_dim(dim, len(shape) + 1, "unsqueeze")
    new_st = st[d] * shape[d] if d < len(shape) else 1
    return shape[:d] + (1,) + shape[d:], st[:d] + (new_st,) + st[d:], off


def narrow(t, dim, start, length):
    shape, st, off = _geo(t)
    if not shape:
        raise RuntimeError("narrow(): cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, len(shape), "narrow")
    n = shape[d]
    start = int(start)
    if start < 0:
        start += n
    if not (0 <= start <= n) or length < 0 or start + length > n:
        raise IndexError(
            f"narrow(): start ({start}) + length ({length}) exceeds dimension size "
            f"({n}) of dimension {d}"
        )
    new_shape = shape[:d] + (length,) + shape[d + 1 :]
    return new_shape, st, off + start * st[d]


def select(t, dim, index):
    shape, st, off = _geo(t)
    if not shape:
        raise IndexError("select(): cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, len(shape), "select")
    n = shape[d]
    i = int(index)
    if not -n <= i < n:
        raise IndexError(
            f"select(): index {i} out of range for tensor of size {list(shape)} at dimension {d}"
        )
    i %= n
    return shape[:d] + shape[d + 1 :], st[:d] + st[d + 1 :], off + i * st[d]


def as_strided(t, size, stride, storage_offset=None):
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(
            f"as_strided(): mismatch in length of strides ({len(stride)}) and shape ({len(size)})"
        )
    off = t._offset if storage_offset is None else storage_offset
    _check_bounds(size, stride, off, t._storage.nbytes(), t.dtype, "as_strided()")
    return size, stride, off


def reshape(t, shape):
    """Like ``view``; None when the strides force a copy (the dispatcher then copies)."""
    shape = infer_size("reshape", _sizes("reshape", shape), math.prod(t._shape))
    if t._stride is None:  # C-contiguous: so is every reshape of it
        return shape, contiguous_strides(shape), t._offset
    st = view_strides(t._shape, strides_of(t), shape)
    return None if st is None else (shape, st, t._offset)


def flatten(t, start_dim=0, end_dim=-1):
    shape = t._shape
    if not shape:
        return reshape(t, (1,))
    a, b = wrap_dim(start_dim, len(shape), "flatten"), wrap_dim(end_dim, len(shape), "flatten")
    if a > b:
        raise RuntimeError("flatten(): start_dim cannot come after end_dim")
    return reshape(t, shape[:a] + (math.prod(shape[a : b + 1]),) + shape[b + 1 :])


def unflatten(t, dim, sizes):
    shape = t._shape
    d = wrap_dim(dim, len(shape), "unflatten")
    sizes = infer_size("unflatten", tuple(sizes), shape[d])
    return reshape(t, shape[:d] + sizes + shape[d + 1 :])


def movedim(t, source, destination):
    n = t.dim()
    src = (source,) if isinstance(source, int) else tuple(source)
    dst = (destination,) if isinstance(destination, int) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(
            f"movedim(): Invalid source or destination dims: source ({list(src)} "
            f"dims) should contain the same number of dims as destination "
            f"({list(dst)} dims)"
        )
    for name, given in (("source", src), ("destination", dst)):
        wrapped = [wrap_dim(d, n, "movedim") for d in given]
        if len(set(wrapped)) != len(wrapped):
            raise RuntimeError(f"movedim(): repeated dim in `{name}` ({list(given)})")
    if n == 0:  # dims 0 and -1 name a 0-d tensor's only "dim": nothing moves (torch)
        return permute(t, ())
    src = [wrap_dim(d, n, "movedim") for d in src]
    dst = [wrap_dim(d, n, "movedim") for d in dst]
    order = [None] * n
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(n) if i not in src)
    order = [o if o is not None else next(rest) for o in order]
    return permute(t, order)


def unbind(t, dim=0):
    shape = t._shape
    d = wrap_dim(dim, len(shape), "unbind")
    return [select(t, d, i) for i in range(shape[d])]


def split(t, split_size_or_sections, dim=0):
    shape = t._shape
    d = wrap_dim(dim, len(shape), "split")
    n = shape[d]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and n:
            raise RuntimeError(f"split(): split_size must be positive, got {step}")
        sizes = [min(step, n - i) for i in range(0, n, step)] if n else [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise RuntimeError(
                f"split(): split_with_sizes expects split_sizes to sum exactly to "
                f"{n} (input tensor's size at dimension {d}), but got "
                f"split_sizes={sizes}"
            )
    out, start = [], 0
    for k in sizes:
        out.append(narrow(t, d, start, k))
        start += k
    return out


def chunk(t, chunks, dim=0):
    if chunks <= 0:
        raise RuntimeError(f"chunk(): chunks must be greater than 0, got {chunks}")
    if not t._shape:
        raise RuntimeError("chunk(): expects at least a 1-dimensional tensor")
    n = t._shape[wrap_dim(dim, t.dim(), "chunk")]
    if n == 0:  # torch: as many empty chunks as asked for
        return split(t, [0] * chunks, dim)
    return split(t, -(-n // chunks), dim)


def diagonal(t, offset=0, dim1=0, dim2=1):
    shape, st, off = _geo(t)
    n = len(shape)
    a, b = wrap_dim(dim1, n, "diagonal"), wrap_dim(dim2, n, "diagonal")
    if a == b:
        raise RuntimeError("diagonal(): dim1 and dim2 cannot be identical")
    if offset >= 0:
        length = max(min(shape[a], shape[b] - offset), 0)
        start = off + offset * st[b] if length else off
    else:
        length = max(min(shape[a] + offset, shape[b]), 0)
        start = off - offset * st[a] if length else off
    keep = [i for i in range(n) if i not in (a, b)]
    return (
        tuple(shape[i] for i in keep) + (length,),
        tuple(st[i] for i in keep) + (st[a] + st[b],),
        start,
    )


def as_strided_params(t) -> dict:
    """The ``as_strided`` arguments that view ``t``'s elements from its storage (autograd
    matches a view with its base through them)."""
    return {"size": t._shape, "stride": strides_of(t), "storage_offset": t._offset}
