"""``tp.vmap``: a function of one sample, run on a batch.

Inside ``vmap`` each batched input is a ``BatchedTensor``: a wrapper subclass (see
``utils._python_dispatch``) that shows the sample's shape and holds the whole batch,
batch first, in ``elem``. Every op on it reaches ``BatchedTensor.__tensorplay_dispatch__``
below autograd, which runs the op once on the batch through the row's batching rule, or,
for a row without one, once per sample (a loop, with a one-time ``PerformanceWarning``
naming the op): never a different answer. Nested ``vmap`` calls stack levels: a wrapper's
``elem`` may be the wrapper of an outer level, and an op takes the innermost level among
its arguments (arguments of outer levels are plain values at that level).

Batching rules by family (``_rule``):

* elementwise rows (the pointwise shape rule, no ``dim``): the batched operands get the
  batch in front of their broadcast dims, unbatched ones broadcast as they are;
* rows with dimension arguments (reductions, softmax, cumulative ops, views that take a
  ``dim``): the dims are wrapped against the sample's rank and shifted past the batch;
* views given a shape (``reshape``, ``view``, ``expand``, ``permute``): the batch is
  prepended;
* ``matmul`` (and ``mm``, ``bmm``, ``dot``, ``outer``) and ``linear``: batch-first
  layouts that the op broadcasts itself;
* ``cat``/``stack`` and the rows that index along a dim (``gather``, ``scatter``,
  ``index_select``, ``index_add``, ...): shared tensors expanded to the batch, the dim
  shifted; a batched index of ``index_select`` becomes a ``gather``;
* convolutions and pooling: the batch folded into the op's own batch dim N;
* indexing (``x[...]``, not an op row): spelled as select/narrow/unsqueeze/index_select,
  also for a tensor the batch shares indexed by a batched index (``table[idx]``);
* custom ops: their ``register_vmap`` rule (``info``, ``in_dims``, the arguments).

A write of a batched value into a tensor not batched at its level (``plain.copy_(v)``, an
in-place op, ``plain[i] = v``, ``fill_``) raises torch's error (``check_write``): the
samples' values cannot all land in the one tensor.

Autograd records around the handler, so ``vmap`` of a function that calls
``tp.autograd.grad`` gives per-sample gradients; forward mode does too (a wrapper carries
its own tangent, batched or not), so ``vmap`` of ``jvp`` batches the tangents.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
import warnings
from collections.abc import Callable
from typing import Any

from tensorplay import _factories, _meta
from tensorplay._dispatch import OPS
from tensorplay._tensor import Tensor
from tensorplay.autograd import engine, forward_ad, function, grad_mode
from tensorplay.autograd.function import Function
from tensorplay.autograd.grad_mode import is_grad_enabled
from tensorplay.utils import _python_dispatch
from tensorplay.utils._python_dispatch import flat as _flat

__all__ = ["vmap", "BatchedTensor", "PerformanceWarning"]


class PerformanceWarning(UserWarning):
    """An op ran as a loop over the batch inside ``vmap`` (no batching rule)."""


class _State(threading.local):
    def __init__(self):
        self.levels: list = []  # (level, batch size, randomness), innermost last


_state = _State()
_warned: set = set()
# Every vmap call gets a level of its own, larger than any before it: a backward pass that
# runs through a finished vmap (grad of a function that used vmap, jacrev of jacrev) brings
# that level's wrappers back next to the running ones, and the two must not be confused.
_level_ids = itertools.count(1)


class BatchedTensor(Tensor):
    """A sample's view of a batch inside ``vmap``: ``elem`` is the batch (dim 0) at
    ``level``. Its shape, dtype and device are the sample's."""

    @staticmethod
    def __new__(cls, elem, level: int):
        t = _python_dispatch.new_wrapper(cls, elem._shape[1:], elem.dtype, elem.device)
        t.elem, t.level = elem, level
        return t

    def __init__(self, elem, level: int):  # (all of it is in __new__)
        pass

    def __repr__(self) -> str:
        return f"BatchedTensor(level={self.level}, batch={self.elem.shape[0]}, {self.elem!r})"

    # Indexing is not an op row (``Tensor.__getitem__`` computes a view's geometry from the
    # tensor's own memory, which a wrapper has none of): a sample's index is spelled here
    # in rows that have batching rules, so autograd and forward mode see them too.
    def __getitem__(self, index):
        return getitem(self, index)

    def __setitem__(self, index, value):
        _setitem(self, index, value)

    # (the same for the writes that are not op rows either)
    def copy_(self, src, non_blocking=False):
        if not isinstance(src, Tensor):
            raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
        _setitem(self, Ellipsis, src, "copy_")
        return self

    def fill_(self, value):
        if isinstance(value, Tensor) and value.dim() != 0:
            raise RuntimeError(
                "fill_(): only supports 0-dimension value tensor but got tensor with "
                f"{value.dim()} dimensions."
            )
        _setitem(self, Ellipsis, value, "fill_")
        return self

    def zero_(self):
        _setitem(self, Ellipsis, 0)
        return self

    @classmethod
    def __tensorplay_dispatch__(cls, func, types, args=(), kwargs=None):
        return _batched(func, args, kwargs or {})


def _batched(func, args: tuple, kwargs: dict):
    """The op on the batch: ``args``/``kwargs`` are the user's call or the dispatcher's
    (tensor inputs, every parameter by name: ``register_row_handler``), both of which
    ``func`` takes as they are. The rules run below autograd, as ``func`` does: autograd
    records this op around the handler, so the rules' own reshapes of shared tensors that
    require grad would only add graph nodes nobody reads."""
    fw, gm = forward_ad.state, grad_mode.state
    if fw.busy and not gm.enabled:  # a rule's call inside a rule (nested vmap)
        return _batched_rule(func, args, kwargs)
    busy, fw.busy = fw.busy, True
    enabled, gm.enabled = gm.enabled, False
    try:
        return _batched_rule(func, args, kwargs)
    finally:
        fw.busy, gm.enabled = busy, enabled


def _batched_rule(func, args: tuple, kwargs: dict):
    at = _innermost(args, None)
    if kwargs:
        at = _innermost(kwargs.values(), at)
    level = at.level
    size = at.elem._shape[0]  # (from the wrapper: a backward pass may run after vmap)
    row = func.row
    if kwargs.get("out") is not None:
        # a plain out= would receive the whole batch (and change shape under the
        # sample's code); a batched one has no memory of its own to write (as torch)
        raise RuntimeError(
            f"vmap: {func.name}(..., out=...) is not supported inside vmap (as in PyTorch: "
            "out= ops have no batching rule); use the result of the out-of-place call"
        )
    if row.name == "as_strided":
        raise RuntimeError(
            "vmap: as_strided inside vmap is not supported (its storage offset and "
            "strides are absolute, not per sample); use view, reshape, narrow or select"
        )
    if row.kind == "tensor_op":
        rule = getattr(row, "_vmap", None)
        if rule is not None:
            return _custom_rule(rule, func, level, size, args, kwargs)
        return _loop(func, level, size, args, kwargs)
    rule = _rule(row, func)
    if rule is not None:
        result = rule(func, level, size, args, kwargs)
        if result is not NotImplemented:
            return result
    return _loop(func, level, size, args, kwargs)


_python_dispatch.register_row_handler(BatchedTensor, _batched)


# ---- helpers -------------------------------------------------------------------------------


def _innermost(values, at):
    """The wrapper of the innermost level among ``values`` (and their list items) and
    ``at``: the level an op runs at (every op asks: plain loops)."""
    for a in values:
        if isinstance(a, BatchedTensor):
            if at is None or a.level > at.level:
                at = a
        elif type(a) is list or type(a) is tuple:
            at = _innermost(a, at)
    return at


def _like(template, items: list):
    """A list/tuple of ``items`` of ``template``'s type (named tuples too)."""
    return type(template)(*items) if hasattr(template, "_fields") else type(template)(items)


def _map(fn, value):
    if isinstance(value, (list, tuple)):
        return _like(value, [_map(fn, v) for v in value])
    if isinstance(value, dict):
        return {k: _map(fn, v) for k, v in value.items()}
    return fn(value)


def _at(x, level: int) -> bool:
    return isinstance(x, BatchedTensor) and x.level == level


def _wrap(result, level: int):
    if type(result) is Tensor:
        return BatchedTensor(result, level)
    return _map(lambda r: BatchedTensor(r, level) if isinstance(r, Tensor) else r, result)


def _loop(func, level, size, args, kwargs):
    """The op once per sample, the results stacked: right for every op, slow."""
    name = func.name
    if func.inplace and not _at(args[0], level):
        raise inplace_error(name)  # (before the warning: nothing runs)
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"vmap: {name} has no batching rule, so it runs as a loop over the batch (the "
            "same values, slower)",
            PerformanceWarning,
            stacklevel=4,
        )
    if func.inplace:
        self = args[0]
        for b in range(size):
            func(*_sample(args, level, b), **_sample(kwargs, level, b))
        return self
    outs = [func(*_sample(args, level, b), **_sample(kwargs, level, b)) for b in range(size)]
    return _stack(outs, level)


def inplace_error(name: str) -> RuntimeError:
    """torch's error for a write of a batched value into a tensor that is not batched at the
    value's level: each sample would write its own value into the one tensor."""
    return RuntimeError(
        f"vmap: {name}(self, *extra_args) is not possible because there exists a Tensor "
        "`other` in extra_args that has more elements than `self`. This happened due to "
        "`other` being vmapped over but `self` not being vmapped over in a vmap (self is not "
        f"batched). Please use out-of-place operators instead of {name} (e.g. "
        "x = x + other instead of x.add_(other), tp.where or tp.cat instead of x[i] = v)"
    )


def check_write(name: str, target, values) -> None:
    """Raise ``inplace_error`` when a value among ``values`` (and their list items) is
    batched at a level ``target`` is not batched at: the in-place ops, ``copy_``,
    ``fill_`` and ``x[i] = v`` of plain tensors ask, so that no write is silently lost."""
    missing = _levels_of(values) - _levels_of((target,))
    if missing:
        raise inplace_error(name)


def _levels_of(values) -> set:
    levels = set()
    for a in values:
        while isinstance(a, BatchedTensor):
            levels.add(a.level)
            a = a.elem
        if type(a) is list or type(a) is tuple:
            levels |= _levels_of(a)
    return levels


def _sample(value, level, b):
    return _map(lambda x: x.elem[b] if _at(x, level) else x, value)


def _stack(outs: list, level: int):
    stack = OPS["stack"].fn
    first = outs[0]
    if isinstance(first, Tensor):
        return BatchedTensor(stack(outs), level)
    if isinstance(first, (list, tuple)):
        return _like(first, [_stack([o[i] for o in outs], level) for i in range(len(first))])
    if all(o == first for o in outs):
        return first
    raise RuntimeError(
        "vmap: an op returned a Python value that differs across the batch "
        f"({outs[:3]}...); return tensors from a vmapped function"
    )


# ---- batching rules ------------------------------------------------------------------------


def _rule(row, func) -> Callable | None:
    """The row's batching rule (None: the loop), looked up once per row."""
    key = (row, func.inplace)
    rule = _rules.get(key, _UNSET)
    if rule is _UNSET:
        rule = _rules[key] = _find_rule(row, func.inplace)
    return rule


_rules: dict = {}
_UNSET = object()


def _find_rule(row, inplace: bool) -> Callable | None:
    if inplace:
        return _elementwise if _is_elementwise(row) else None
    name = row.name
    if _is_elementwise(row):
        return _elementwise
    if name in _DIM_ARGS:
        return _dims
    if name in ("reshape", "view", "expand"):
        return _shaped
    if name == "expand_as":
        return _expand_as
    if name == "permute":
        return _permute
    if name in _MATMUL_RANKS:
        return _matmul
    if name in ("outer", "ger"):
        return _outer
    if name in _TRAILING:
        return _trailing
    if name == "linear":
        return _linear
    if name in ("cat", "stack"):
        return _seq
    if name in _ALONG_DIM:
        return _along_dim
    if name == "index_select":
        return _index_select
    if name in ("index_add", "index_copy"):
        return _index_add
    if name == "masked_fill":
        return _masked_fill
    if name in _FOLD:
        return _fold
    return None


def _is_elementwise(row) -> bool:
    """An op of broadcast elements: a numpy ufunc behind it, or the pointwise shape rule."""
    if "dim" in row.params or row.n_inputs == "seq":
        return False
    shape = row.shape
    pointwise = isinstance(shape, functools.partial) and shape.func is _meta.pointwise_shape
    return pointwise or row.ufunc is not None or row.name in _ELEMENTWISE


def _elementwise(func, level, size, args, kwargs):
    """Batched operands get the batch in front of their broadcast dims."""
    if func.inplace and not _at(args[0], level):
        return NotImplemented  # the loop's error
    if kwargs:
        # parameters at their defaults are left out (the dispatcher's form names them all):
        # the op's plain call then takes its fast path
        defaults = func.row.defaults
        kwargs = {k: v for k, v in kwargs.items() if v is not defaults.get(k, _UNSET)}
    rank = 0  # the broadcast rank
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, Tensor) and len(a._shape) > rank:
            rank = len(a._shape)
    aligned = [_align(x, level, rank) for x in args]
    if kwargs:
        out = func(*aligned, **{k: _align(v, level, rank) for k, v in kwargs.items()})
    else:
        out = func(*aligned)
    return args[0] if func.inplace else _wrap(out, level)


def _align(x, level: int, rank: int):
    """A batched operand's batch, with 1s after the batch up to ``rank`` sample dims."""
    if isinstance(x, BatchedTensor) and x.level == level:
        e = x.elem
        pad = rank - len(x._shape)
        return e.reshape(e._shape[0], *([1] * pad), *e._shape[1:]) if pad else e
    return x


# elementwise rows whose shape rule checks more than broadcasting (the rule still holds)
_ELEMENTWISE = {
    "pow", "clamp", "clamp_min", "clamp_max", "addcmul", "addcdiv", "lerp", "clone",
    "contiguous_copy", "_to_copy",
}  # fmt: skip
# rows acting on the trailing dims of an input that may have leading batch dims
_TRAILING = {"tril", "triu"}

# row -> (its dim parameters, how many dims its result adds: unsqueeze's dim may be one past)
_DIM_ARGS: dict[str, tuple] = {
    **{
        n: (("dim",), 0)
        for n in (
            "sum", "mean", "amax", "amin", "argmax", "argmin", "std", "var", "logsumexp",
            "prod", "all", "any", "nansum", "softmax", "log_softmax", "cumsum", "cumprod",
            "logcumsumexp", "select", "narrow", "unbind", "split", "chunk", "squeeze",
            "cummax", "cummin", "max_dim", "min_dim", "sort", "argsort", "topk", "unflatten",
            "norm",
        )
    },
    "flip": (("dims",), 0),
    "unsqueeze": (("dim",), 1),
    "transpose": (("dim0", "dim1"), 0),
    "flatten": (("start_dim", "end_dim"), 0),
    "movedim": (("source", "destination"), 0),
    "diagonal": (("dim1", "dim2"), 0),
}  # fmt: skip
# reductions that take a tuple of dims: dim=None (all of the sample's dims) is the tuple
_ALL_DIMS = {"sum", "mean", "amax", "amin", "std", "var", "nansum", "logsumexp"}
# rows that read a 0-d sample as one element along the dim they reduce or scan: the batch
# of them is a column (batch, 1) reduced or scanned along dim 1
_SCALAR_SAMPLES = {
    "sum", "mean", "amax", "amin", "argmax", "argmin", "std", "var", "logsumexp", "prod",
    "all", "any", "nansum", "softmax", "log_softmax", "cumsum", "cumprod", "logcumsumexp",
    "cummax", "cummin", "max_dim", "min_dim", "sort", "argsort", "norm",
}  # fmt: skip


def _dims(func, level, size, args, kwargs):
    """Dims wrapped against the sample's rank, then shifted past the batch."""
    row = func.row
    names, extra = _DIM_ARGS[row.name]
    b = _bind(row, args, kwargs)
    first = next(iter(_defaults(row)))
    x = b[first]
    if not _at(x, level):
        return NotImplemented
    for k, v in b.items():
        if k != first and _at(v, level):
            return NotImplemented
    rank = len(x._shape) + extra
    if not rank:
        if row.name not in _SCALAR_SAMPLES:
            return NotImplemented  # a dim of a 0-d sample names no dim of the batch: the loop
        d = b.get("dim")
        if isinstance(d, (tuple, list)) and len(d) != 1 or d not in (None, 0, -1, (0,), (-1,)):
            return NotImplemented  # the loop raises the op's own error
        b["dim"] = (1,) if isinstance(d, (tuple, list)) else 1
        b[first] = x.elem.unsqueeze(1)
        out = func(**b)
        return _map(lambda o: BatchedTensor(o.reshape(size), level), out)
    for name in names:
        d = b.get(name, _defaults(row)[name])
        if d is None:
            if name != "dim":
                return NotImplemented
            if row.name == "squeeze":
                d = tuple(i for i, n in enumerate(x._shape) if n == 1)
            elif row.name in _ALL_DIMS and x._shape:
                d = tuple(range(len(x._shape)))
            elif row.name == "norm" and not b.get("keepdim"):
                # (one vector of all the sample's elements: a tuple of dims could make it a
                # matrix norm)
                b["input"] = x.elem.reshape(size, -1)
                b["dim"] = 1
                return _wrap(func(**b), level)
            else:
                return NotImplemented
        if isinstance(d, (tuple, list)):
            d = tuple(_meta.wrap_dim(i, rank, row.name) + 1 for i in d)
        else:
            d = _meta.wrap_dim(d, rank, row.name) + 1
        b[name] = d
    b[first] = x.elem
    return _wrap(func(**b), level)


def _shaped(func, level, size, args, kwargs):
    """reshape/view/expand: the batch prepended to the requested shape."""
    x, *shape = args
    if not _at(x, level) or kwargs or any(isinstance(s, Tensor) for s in shape):
        return NotImplemented
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = list(shape[0])
    e = x.elem
    if func.row.name == "expand":
        pad = len(shape) - len(x._shape)
        e = e.reshape(size, *([1] * pad), *e._shape[1:]) if pad > 0 else e
    return BatchedTensor(func(e, (size, *shape)), level)


def _expand_as(func, level, size, args, kwargs):
    b = _bind(func.row, args, kwargs)
    x, other = b["input"], b["other"]
    x = x if _at(x, level) else BatchedTensor(_expanded(x, level, size), level)
    return _shaped(_handle("expand"), level, size, (x, tuple(other._shape)), {})


def _permute(func, level, size, args, kwargs):
    x, *dims = args
    if not _at(x, level) or kwargs:
        return NotImplemented
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = list(dims[0])
    n = len(x._shape)
    order = (0, *(_meta.wrap_dim(d, n, "permute") + 1 for d in dims))
    return BatchedTensor(func(x.elem, order), level)


# matmul and its fixed-rank forms (sample ranks they accept), all batched as matmul
_MATMUL_RANKS = {"matmul": None, "mm": (2, 2), "bmm": (3, 3), "dot": (1, 1)}


def _matmul(func, level, size, args, kwargs):
    """Vectors become matrices (squeezed again at the end), and a batched operand gets 1s
    after its batch up to the larger rank, so matmul's own broadcasting of leading dims
    keeps the batch in front. Two layouts skip that: samples times a shared matrix are one
    product of the batch with it, and a shared matrix times sample vectors is the batch of
    vectors times its transpose (``linear``): one matrix product each, not one per sample."""
    a, b = args
    na, nb = len(a._shape), len(b._shape)
    if kwargs or not na or not nb:
        return NotImplemented  # (matmul refuses 0-d operands: the loop raises it)
    ranks = _MATMUL_RANKS[func.row.name]
    if ranks is not None:
        if (na, nb) != ranks or a.dtype is not b.dtype:
            return NotImplemented  # the loop raises the op's own error
        func = _handle("matmul")
    at_a, at_b = _at(a, level), _at(b, level)
    if at_a and not at_b and nb == 2:
        return BatchedTensor(func(a.elem, b), level)
    if at_b and not at_a and na == 2 and nb == 1 and a.dtype is b.dtype:
        return BatchedTensor(_handle("linear")(b.elem, a), level)  # (one x @ a.T)
    ea, eb = (a.elem if at_a else a), (b.elem if at_b else b)
    ra, rb = max(na, 2), max(nb, 2)
    if na == 1:
        ea = ea.unsqueeze(-2)
    if nb == 1:
        eb = eb.unsqueeze(-1)
    r = max(ra, rb)
    if at_a and ra < r:
        ea = ea.reshape(size, *([1] * (r - ra)), *ea._shape[1:])
    if at_b and rb < r:
        eb = eb.reshape(size, *([1] * (r - rb)), *eb._shape[1:])
    if ea._shape[-1] == 1 and ea.dtype is eb.dtype:
        # NOTE: a contraction of length 1 (per-sample outer products, as in the weight
        # gradients of per-sample grads) is a broadcast product: numpy's batched matmul
        # leaves BLAS for it and loops
        out = _handle("mul")(ea, eb)
    else:
        out = func(ea, eb)
    if na == 1:  # a's row first: with both vectors, (..., 1, 1) -> (..., 1) -> (...)
        out = out.squeeze(-2)
    if nb == 1:
        out = out.squeeze(-1)
    return BatchedTensor(out, level)


def _outer(func, level, size, args, kwargs):
    """outer/ger: a column times a row, broadcast (the batch stays in front)."""
    a, b = args
    if kwargs or len(a._shape) != 1 or len(b._shape) != 1:
        return NotImplemented
    ea = a.elem.unsqueeze(-1) if _at(a, level) else a.unsqueeze(-1)
    eb = b.elem.unsqueeze(-2) if _at(b, level) else b.unsqueeze(0)
    return BatchedTensor(_handle("mul")(ea, eb), level)


def _expanded(x, level: int, size: int):
    """``x``'s batch at this level: its own, or ``x`` repeated (a broadcast view) when it is
    the same for every sample."""
    if _at(x, level):
        return x.elem
    return x.unsqueeze(0).expand(size, *x._shape)


def _seq(func, level, size, args, kwargs):
    """cat/stack: every tensor batch-first (shared ones expanded), the dim shifted."""
    b = _bind(func.row, args, kwargs)
    tensors, dim = b["tensors"], b.get("dim", 0)
    if not tensors or isinstance(dim, Tensor):
        return NotImplemented
    ranks = {len(t._shape) for t in tensors}
    if len(ranks) != 1 or not next(iter(ranks)) and func.row.name == "cat":
        return NotImplemented  # cat's legacy skipping of empty 1-d tensors, or 0-d: the loop
    rank = len(tensors[0]._shape) + (func.row.name == "stack")
    d = _meta.wrap_dim(dim, rank, func.row.name) + 1
    return BatchedTensor(func([_expanded(t, level, size) for t in tensors], d), level)


# row -> its tensor parameters, which all have the first one's rank and are read at the
# same positions along every dim but ``dim``: with the batch in front of each, dim shifts
# by one (the softmax backward rows: gradient and output of one shape, reduced along dim)
_ALONG_DIM = {
    "gather": ("input", "index"),
    "scatter": ("input", "index", "src"),
    "scatter_reduce": ("input", "index", "src"),
    "_softmax_backward_data": ("grad_output", "output"),
    "_log_softmax_backward_data": ("grad_output", "output"),
}


def _along_dim(func, level, size, args, kwargs):
    names = _ALONG_DIM[func.row.name]
    b = _bind(func.row, args, kwargs)
    x, dim = b[names[0]], b["dim"]
    if not x._shape or isinstance(dim, Tensor):
        return NotImplemented
    for k, v in b.items():
        if isinstance(v, Tensor) and k not in names:
            return NotImplemented  # a batched value= (scatter): the loop
    b["dim"] = _meta.wrap_dim(dim, len(x._shape), func.row.name) + 1
    for k in names:
        v = b.get(k)
        if isinstance(v, Tensor):
            if len(v._shape) != len(x._shape):
                return NotImplemented
            b[k] = _expanded(v, level, size)
    return BatchedTensor(func(**b), level)


def _index_select(func, level, size, args, kwargs):
    """A shared index: one index_select past the batch; a batched index: a gather (each
    sample picks its own), or, for a shared input, one index_select of all the indices."""
    b = _bind(func.row, args, kwargs)
    x, dim, index = (b[k] for k in ("input", "dim", "index"))
    if not x._shape or len(index._shape) != 1 or isinstance(dim, Tensor):
        return NotImplemented
    d = _meta.wrap_dim(dim, len(x._shape), "index_select")
    if not _at(index, level):
        return BatchedTensor(func(x.elem, d + 1, index), level)
    k = index._shape[0]
    if not _at(x, level):
        picked = func(x, d, index.elem.reshape(-1))  # (..., size * k, ...)
        return BatchedTensor(picked.unflatten(d, (size, k)).movedim(d, 0), level)
    shape = (size, *x._shape[:d], k, *x._shape[d + 1 :])
    idx = index.elem.reshape(size, *([1] * d), k, *([1] * (len(x._shape) - d - 1))).expand(*shape)
    return BatchedTensor(_handle("gather")(x.elem, d + 1, idx), level)


def _index_add(func, level, size, args, kwargs):
    """index_add/index_copy with a shared index: input and source batch-first."""
    b = _bind(func.row, args, kwargs)
    x, dim, index = (b[k] for k in ("input", "dim", "index"))
    if _at(index, level) or not x._shape or isinstance(dim, Tensor):
        return NotImplemented
    if any(_at(v, level) for k, v in b.items() if k not in ("input", "source")):
        return NotImplemented
    if b["source"].dim() != len(x._shape):
        return NotImplemented
    b["dim"] = _meta.wrap_dim(dim, len(x._shape), func.row.name) + 1
    b["input"] = _expanded(x, level, size)
    b["source"] = _expanded(b["source"], level, size)
    return BatchedTensor(func(**b), level)


def _masked_fill(func, level, size, args, kwargs):
    """The input batch-first; a batched mask gets 1s after its batch up to the input's rank
    (the mask broadcasts to the input)."""
    b = _bind(func.row, args, kwargs)
    x, mask, value = (b[k] for k in ("input", "mask", "value"))
    if len(mask._shape) > len(x._shape):
        return NotImplemented
    if _at(value, level):  # a value per sample: where(mask, value, input)
        if value.dtype is not x.dtype:
            return NotImplemented
        return _elementwise(_handle("where"), level, size, (mask, value, x), {})
    if _at(mask, level):
        e = mask.elem
        mask = e.reshape(size, *([1] * (len(x._shape) - len(mask._shape))), *e._shape[1:])
    return BatchedTensor(func(_expanded(x, level, size), mask, value), level)


# convolutions and pooling: rows whose leading tensor arguments have a leading batch dim N
# (or none: one sample), and whose other tensors (weights) apply to every entry of N alike;
# the value: how many leading arguments are such tensors (a pooling's backward has two,
# grad_output and input), and their rank without N
_FOLD = {
    "conv1d": (1, 2), "conv2d": (1, 3), "conv_transpose1d": (1, 2), "conv_transpose2d": (1, 3),
    "max_pool2d": (1, 3), "_max_pool2d_with_indices": (1, 3), "avg_pool2d": (1, 3),
    "adaptive_avg_pool2d": (1, 3), "_max_pool2d_backward": (2, 3),
}  # fmt: skip


def _fold(func, level, size, args, kwargs):
    """The batch folded into N of every leading tensor (one of them unbatched: expanded
    across the batch first): one call on (size * N, ...). Batched weights: the loop."""
    count, unbatched = _FOLD[func.row.name]
    tensors, rest = args[:count], args[count:]
    if len(tensors) < count or any(_at(v, level) for v in _flat((rest, kwargs))):
        return NotImplemented
    ranks = {len(t._shape) for t in tensors}
    if len(ranks) != 1 or ranks.pop() not in (unbatched, unbatched + 1):
        return NotImplemented  # the loop raises the op's own error
    elems = [_expanded(t, level, size) for t in tensors]
    if len(tensors[0]._shape) == unbatched:  # each sample is one entry of N: the batch is N
        return _wrap(func(*elems, *rest, **kwargs), level)
    n = tensors[0]._shape[0]
    out = func(*(e.reshape(size * n, *e._shape[2:]) for e in elems), *rest, **kwargs)
    return _map(lambda o: BatchedTensor(o.unflatten(0, (size, n)), level), out)


# ---- indexing ------------------------------------------------------------------------------


def getitem(x, index):
    """``x[index]`` for a sample, as select/narrow/unsqueeze/index_select (torch's two steps:
    ints, slices, None and ``...`` make a view, then the tensor indices index it). Also for a
    tensor ``x`` the batch shares indexed by a batched index (``table[idx]``: the one
    index_select of every sample's indices, through its batching rule), which
    ``_indexing.getitem`` hands here."""
    items = list(index) if isinstance(index, tuple) else _listed(index)
    items = [_as_index_tensor(i, x.device) for i in items]
    used = sum(_dims_used(i) for i in items)
    if items.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items[k : k + 1] = [slice(None)] * (x.dim() - used)
    elif used > x.dim():
        raise IndexError(f"too many indices for tensor of dimension {x.dim()}")
    out, d, advanced = x, 0, []
    for item in items:
        if item is None or isinstance(item, bool):
            out = out.unsqueeze(d)
            if item is False:
                out = out.narrow(d, 0, 0)
            d += 1
        elif isinstance(item, int):
            n = out.shape[d]
            if not -n <= item < n:
                raise IndexError(f"index {item} is out of bounds for dimension {d} with size {n}")
            out = out.select(d, item)
        elif isinstance(item, slice):
            n = out.shape[d]
            start, stop, step = item.indices(n)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            if (start, stop, step) != (0, n, 1):
                if step == 1:
                    out = out.narrow(d, start, max(stop - start, 0))
                else:
                    pick = _factories.arange(start, stop, step, device=x.device)
                    out = out.index_select(d, pick)
            d += 1
        elif item.dtype.category == 0:  # a mask: its nonzero positions, one index per dim
            if isinstance(item, BatchedTensor):
                raise RuntimeError(
                    "vmap: indexing with a boolean mask that differs across the batch gives "
                    "each sample a result of its own size, which cannot be batched (as in "
                    "PyTorch); use tp.where(mask, x, other) to keep the shape"
                )
            for i, col in enumerate(item.nonzero().unbind(1)):
                advanced.append((d + i, col))
            d += item.dim()
        else:
            advanced.append((d, item))
            d += 1
    return _advanced(out, advanced) if advanced else out


def _listed(index) -> list:
    """torch's reading of a list index: a sequence of per-dim items when it holds a slice,
    None, ``...`` or a sequence; otherwise one tensor index."""
    if isinstance(index, list) and any(
        i is None or i is Ellipsis or isinstance(i, (slice, Tensor, list, tuple)) for i in index
    ):
        return list(index)
    return [index]


def _as_index_tensor(item, device):
    """Lists become index tensors; 0-d integer tensors that hold the same index for every
    sample become ints."""
    if isinstance(item, (list, tuple)):
        return _factories.tensor(item, device=device)
    if isinstance(item, Tensor) and not isinstance(item, BatchedTensor) and item.dim() == 0:
        if item.dtype.category == 1:
            return int(item)
        if item.dtype.category == 0:
            return bool(item)
    if isinstance(item, Tensor) and item.dtype.category > 1:
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    return item


def _dims_used(item) -> int:
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    if isinstance(item, Tensor) and item.dtype.category == 0:
        return item.dim()
    return 1


def _advanced(out, advanced: list):
    """The tensor indices, at their dims of the view: broadcast together, they pick through
    one index_select of the flattened dims they cover. Indices at adjacent dims put their
    shape there; otherwise it goes first (numpy's and torch's rule)."""
    dims = [d for d, _ in advanced]
    index = [i for _, i in advanced]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    if not adjacent:
        out = out.movedim(dims, list(range(len(dims))))
        dims = list(range(len(dims)))
    first = dims[0]
    sizes = [out.shape[d] for d in dims]
    shape = _meta.broadcast_shapes(*(tuple(i.shape) for i in index))
    linear = None
    for i, n in zip(index, sizes):
        _check_bounds(i, n)
        i = i + (i < 0) * n  # negative indices count from the end
        linear = i if linear is None else linear * n + i
    linear = linear.expand(*shape) if tuple(linear.shape) != shape else linear
    flat = out.flatten(first, first + len(dims) - 1) if len(dims) > 1 else out
    picked = flat.index_select(first, linear.reshape(-1))
    return picked.reshape(*out.shape[:first], *shape, *out.shape[first + len(dims) :])


def _check_bounds(index, n: int) -> None:
    data = index
    while isinstance(data, BatchedTensor):
        data = data.elem
    if data.numel() and not bool(((data >= -n) & (data < n)).all()):
        bad = data[(data < -n) | (data >= n)].reshape(-1)[0].item()
        raise IndexError(f"index {bad} is out of bounds for dimension with size {n}")


def _setitem(x, index, value, name: str = "__setitem__") -> None:
    """``x[index] = value`` for a sample: the batch's write, with the batch dim in front of
    the index (and of a batched value's dims)."""
    level = x.level
    items = tuple(index) if isinstance(index, tuple) else tuple(_listed(index))
    if any(_at(i, level) for i in items):
        raise RuntimeError(
            "vmap: x[index] = value with an index that differs across the batch is not "
            "supported; use scatter or index_put"
        )
    if is_grad_enabled() and (x.requires_grad or getattr(value, "requires_grad", False)):
        raise RuntimeError(
            "vmap: x[index] = value on tensors that require grad is not supported inside "
            "vmap; build the result out of place (tp.where, scatter, cat)"
        )
    check_write(name, x, (value,))
    if _at(value, level):
        target_rank = x[index].dim()
        e = value.elem
        value = e.reshape(e.shape[0], *([1] * (target_rank - value.dim())), *e.shape[1:])
        if any(isinstance(i, (Tensor, list)) for i in items) and _getitem_moves(items):
            raise RuntimeError(
                "vmap: x[index] = value with a batched value and tensor indices at dims that "
                "are not adjacent is not supported; index adjacent dims"
            )
    x.elem[(slice(None), *items)] = value


def _getitem_moves(items) -> bool:
    """Do the tensor indices stand apart (their result dims then go first)?"""
    spots = [k for k, i in enumerate(items) if isinstance(i, (Tensor, list))]
    return spots != list(range(spots[0], spots[0] + len(spots))) if spots else False


@functools.cache
def _handle(name: str):
    """Op ``name`` as a rule calls it: below autograd, as ``func`` is."""
    return _python_dispatch.OpHandle(OPS[name])


def _trailing(func, level, size, args, kwargs):
    x = args[0]
    if not _at(x, level) or any(_at(v, level) for v in _flat((args[1:], kwargs))):
        return NotImplemented
    return BatchedTensor(func(x.elem, *args[1:], **kwargs), level)


def _linear(func, level, size, args, kwargs):
    """A batched input alone: linear takes leading dims itself. A batched weight or bias:
    matmul with the transposed weight, plus the bias, by their rules."""
    b = _bind(func.row, args, kwargs)
    x, w, b = (b.get(k) for k in ("input", "weight", "bias"))
    if not _at(w, level) and not _at(b, level):
        return BatchedTensor(func(x.elem, w, b), level)
    if len(w._shape) != 2 or not x._shape:
        return NotImplemented
    wt = BatchedTensor(w.elem.transpose(1, 2), level) if _at(w, level) else w.t()
    if _at(x, level) or _at(w, level):
        out = _matmul(_handle("matmul"), level, size, (x, wt), {})
    else:
        out = _handle("matmul")(x, wt)
    return out if b is None else _elementwise(_handle("add"), level, size, (out, b), {})


def _bind(row, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by parameter name (those given): what a rule reads and edits,
    then passes on as keywords."""
    b = dict(zip(_defaults(row), args))
    if kwargs:
        b.update(kwargs)
    return b


@functools.cache
def _defaults(row) -> dict:
    """The row's parameters in order, each with its default (``inspect.Parameter.empty``
    when it has none)."""
    return {k: p.default for k, p in inspect.signature(row.fn).parameters.items()}


def _custom_rule(rule, func, level, size, args, kwargs):
    """A custom op's ``register_vmap`` rule: ``rule(info, in_dims, *args, **kwargs)`` ->
    ``(outputs, out_dims)``, with the batch of each batched argument at dim 0."""
    randomness = next((r for lv, _, r in _state.levels if lv == level), "error")
    info = VmapInfo(size, randomness)
    in_dims = tuple(0 if _at(a, level) else None for a in args)
    plain = _map(lambda x: x.elem if _at(x, level) else x, args)
    out, out_dims = rule(info, in_dims, *plain, **kwargs)
    if isinstance(out, tuple):
        dims = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(out)
        return tuple(_to_level(o, d, level, size) for o, d in zip(out, dims))
    return _to_level(out, out_dims, level, size)


def _to_level(out, dim, level, size):
    if not isinstance(out, Tensor):
        return out
    if dim is None:  # the same for every sample
        return BatchedTensor(out.unsqueeze(0).expand(size, *out.shape), level)
    return BatchedTensor(out.movedim(dim, 0), level)


class VmapInfo:
    """What a custom op's vmap rule learns: ``batch_size`` and ``randomness``."""

    __slots__ = ("batch_size", "randomness")

    def __init__(self, batch_size: int, randomness: str):
        self.batch_size, self.randomness = batch_size, randomness

    def __repr__(self) -> str:
        return f"VmapInfo(batch_size={self.batch_size}, randomness={self.randomness!r})"


# ---- randomness ----------------------------------------------------------------------------


def _random_hook(op, shape, draw):
    level, size, randomness = _state.levels[-1]
    if randomness == "error":
        raise RuntimeError(
            f"vmap: called random operation {op}() while in randomness error mode; pass "
            "randomness='different' (each sample draws its own) or 'same' (one draw shared "
            "by the batch) to vmap"
        )
    if randomness == "same":
        return draw(shape)
    return BatchedTensor(draw((size, *shape)), level)


# ---- vmap ----------------------------------------------------------------------------------


def vmap(
    func: Callable,
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
) -> Callable:
    """``func`` of one sample, applied to a batch (PyTorch's ``torch.vmap``).

    ``in_dims``: for each argument (or one int for all), the dim holding the batch, None
    for an argument shared by the whole batch; nested like the arguments (tuples, lists,
    dicts). ``out_dims``: where each output's batch goes. ``randomness``: "error" (random
    ops raise), "different" (each sample draws its own), "same" (one draw for the batch).
    ``chunk_size``: run the batch this many samples at a time (less memory).
    """
    if not callable(func):
        raise TypeError(f"vmap(func): func must be callable, got {type(func).__name__}")
    if randomness not in ("error", "different", "same"):
        raise ValueError(f"vmap(randomness={randomness!r}): must be 'error', 'different' or 'same'")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap(chunk_size={chunk_size!r}): a positive int or None")

    @functools.wraps(func)
    def batched(*args, **kwargs):
        dims = _broadcast_dims(in_dims, args)
        size = _batch_size(args, dims)
        if chunk_size is None or chunk_size >= size:
            return _run(func, args, kwargs, dims, size, out_dims, randomness)
        cat = OPS["cat"].fn
        parts = []
        for start in range(0, size, chunk_size):
            n = min(chunk_size, size - start)
            chunk = _map2(lambda x, d, s=start, n=n: x.narrow(d, s, n) if d is not None else x,
                          args, dims)  # fmt: skip
            parts.append(_run(func, chunk, kwargs, dims, n, out_dims, randomness))
        flat_parts = [_leaves(p) for p in parts]
        odims = _out_dims(out_dims, parts[0])
        odims_flat = _leaves(odims) if isinstance(odims, (tuple, list, dict)) else None
        joined = []
        for i in range(len(flat_parts[0])):
            d = odims_flat[i] if odims_flat is not None else odims
            joined.append(cat([fp[i] for fp in flat_parts], dim=d))
        return _rebuild(parts[0], iter(joined))

    return batched


def _run(func, args, kwargs, dims, size, out_dims, randomness):
    level = next(_level_ids)
    wrapped = _map2(lambda x, d: _enter(x, d, level) if d is not None else x, args, dims)
    _state.levels.append((level, size, randomness))
    previous = _factories.random_hook
    _factories.random_hook = _random_hook
    function.vmap_hook = _function_rule
    try:
        out = func(*wrapped, **kwargs)
    finally:
        _state.levels.pop()
        _factories.random_hook = previous if _state.levels else None
        function.vmap_hook = _function_rule if _state.levels else None
    odims = _out_dims(out_dims, out)
    return _map2(lambda o, d: _unwrap(o, d, level, size), out, odims)


def _unwrap(o, d, level, size):
    if not isinstance(o, Tensor):
        raise ValueError(
            f"vmap: the function must return tensors (or nested tuples, lists and dicts of "
            f"them), got {type(o).__name__}"
        )
    if d is None:
        if _at(o, level):
            raise ValueError(
                "vmap: out_dims=None for an output that varies across the batch; give the "
                "dim to put its batch in"
            )
        return o
    if _at(o, level):
        d = _meta.wrap_dim(d, len(o._shape) + 1, "vmap")
        if o.requires_grad and is_grad_enabled():
            return _Leave.apply(o, d)
        out = o.elem.movedim(0, d) if d else o.elem
        if forward_ad.needs_forward((o,)):
            out._fw_tangent = _tangent_out(forward_ad.tangent_of(o), d, level, size)
        return out
    # the same for every sample (it did not depend on a batched input): expand it
    d = _meta.wrap_dim(d, o.dim() + 1, "vmap")
    return o.unsqueeze(d).expand(*o.shape[:d], size, *o.shape[d:])


def _enter(x, d, level):
    """``x`` with its batch at ``d`` as this level's BatchedTensor; attached to x's graph
    when x requires grad (so ``grad`` of a vmapped function reaches x)."""
    e = x.movedim(d, 0) if d else x
    if e.requires_grad and is_grad_enabled():
        return _Enter.apply(e, level)
    wrapper = BatchedTensor(e, level)
    if forward_ad.needs_forward((e,)):
        wrapper._fw_tangent = BatchedTensor(forward_ad.tangent_of(e), level)
    return wrapper


# Forward mode across a level's boundary: a dual argument's tangent is batched at the level
# as its primal is; a result's tangent leaves the level as its primal does.


def _tangent_out(t, d, level, size):
    if _at(t, level):
        return t.elem.movedim(0, d)
    d = _meta.wrap_dim(d, t.dim() + 1, "vmap")  # the same for every sample
    return t.unsqueeze(d).expand(*t.shape[:d], size, *t.shape[d:])


class _Enter(Function):
    """The batch -> its wrapper; backward: the wrapper's gradient -> the batch's."""

    generate_vmap_rule = True  # (an outer level's batch passes through)

    @staticmethod
    def forward(ctx, e, level):
        ctx.level, ctx.shape = level, tuple(e.shape)
        return BatchedTensor(e.detach(), level)

    @staticmethod
    def backward(ctx, g):
        if _at(g, ctx.level):
            return g.elem, None
        return g.unsqueeze(0).expand(*ctx.shape), None  # the same for every sample

    @staticmethod
    def jvp(ctx, t, _level):
        return BatchedTensor(t, ctx.level)


class _Leave(Function):
    """A wrapper -> the batch with its batch at ``d``; backward: the inverse."""

    generate_vmap_rule = True

    @staticmethod
    def forward(ctx, o, d):
        ctx.level, ctx.d, ctx.size = o.level, d, o.elem.shape[0]
        return o.elem.movedim(0, d)

    @staticmethod
    def backward(ctx, g):
        return BatchedTensor(g.movedim(ctx.d, 0), ctx.level), None

    @staticmethod
    def jvp(ctx, t, _d):
        return _tangent_out(t, ctx.d, ctx.level, ctx.size)


def _function_rule(cls, args, kwargs):
    """``Function.apply`` on batched arguments (``autograd.function.vmap_hook``)."""
    batched = [a for a in _flat((args, kwargs)) if isinstance(a, BatchedTensor)]
    if not batched or cls.generate_vmap_rule:
        return NotImplemented  # plain arguments, or a forward that batches itself
    if cls.vmap is None:
        raise RuntimeError(
            f"vmap: {cls.__name__} is an autograd.Function called on batched tensors; give it "
            "a vmap staticmethod (vmap(info, in_dims, *args) -> (outputs, out_dims)) or set "
            "generate_vmap_rule = True if its forward uses only TensorPlay ops"
        )
    if is_grad_enabled() and any(a.requires_grad for a in _flat((args, kwargs))
                                 if isinstance(a, Tensor)):  # fmt: skip
        raise NotImplementedError(
            f"vmap: {cls.__name__}.vmap with inputs that require grad is not supported yet; "
            "set generate_vmap_rule = True (its forward is then batched and differentiated)"
        )
    level = max(a.level for a in batched)
    size = next(a for a in batched if a.level == level).elem.shape[0]
    randomness = next((r for lv, _, r in _state.levels if lv == level), "error")
    in_dims = tuple(0 if _at(a, level) else None for a in args)
    plain = _map(lambda x: x.elem if _at(x, level) else x, args)
    out, out_dims = cls.vmap(VmapInfo(size, randomness), in_dims, *plain, **kwargs)
    if isinstance(out, tuple):
        dims = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(out)
        return tuple(_to_level(o, d, level, size) for o, d in zip(out, dims))
    return _to_level(out, out_dims, level, size)


def _reduce_batched(g, target, accumulate: bool):
    """``g`` (a gradient for ``target``) with the batch of each finished vmap level that
    ``target`` is not batched at summed out; inside a running vmap ``autograd.grad`` keeps
    the per-sample gradients, and accumulating them into a shared ``.grad`` is an error."""
    active = {lv for lv, _, _ in _state.levels}
    while isinstance(g, BatchedTensor) and not (
        isinstance(target, BatchedTensor) and target.level >= g.level
    ):
        if g.level in active:
            if accumulate:
                raise RuntimeError(
                    "vmap: backward() inside vmap would add every sample's gradient into "
                    "one .grad; call tp.autograd.grad inside the function (per-sample "
                    "gradients) or backward() on the result outside vmap"
                )
            return g
        g = g.elem.sum(0)
    return g


engine.reduce_batched = _reduce_batched


def _broadcast_dims(dims, values: tuple) -> tuple:
    """``dims`` matched to ``values`` (a tuple of arguments): one entry per argument,
    nested as it is."""
    if isinstance(dims, int) or dims is None:
        return tuple(_fill(dims, v) for v in values)
    if isinstance(dims, (tuple, list)) and len(dims) == len(values):
        return tuple(_fill(d, v) for d, v in zip(dims, values))
    raise ValueError(
        f"vmap: in_dims/out_dims {dims!r} must be an int, None, or a tuple with one entry "
        f"per argument ({len(values)} here)"
    )


def _out_dims(dims, out):
    """``out_dims`` matched to the output: a tuple of dims for a tuple of outputs goes one
    per output, as torch.vmap's."""
    if isinstance(out, (tuple, list)) and isinstance(dims, (tuple, list)):
        return _fill(dims, out)
    return _broadcast_dims(dims, (out,))[0]


def _fill(d, value):
    if isinstance(value, dict):
        if isinstance(d, dict):
            return {k: _fill(d[k], v) for k, v in value.items()}
        return {k: _fill(d, v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        if isinstance(d, (tuple, list)):
            if len(d) != len(value):
                raise ValueError(f"vmap: dims {d!r} do not match the structure of the value")
            return _like(value, [_fill(x, v) for x, v in zip(d, value)])
        return _like(value, [_fill(d, v) for v in value])
    if d is not None and not isinstance(d, int):
        raise ValueError(f"vmap: a dim must be an int or None, got {d!r}")
    return d


def _map2(fn, value, dims):
    if isinstance(value, dict):
        return {k: _map2(fn, v, dims[k]) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return _like(value, [_map2(fn, v, d) for v, d in zip(value, dims)])
    return fn(value, dims)


def _leaves(value) -> list:
    return list(_flat(value))


def _rebuild(template, it):
    if isinstance(template, dict):
        return {k: _rebuild(v, it) for k, v in template.items()}
    if isinstance(template, (tuple, list)):
        return _like(template, [_rebuild(v, it) for v in template])
    return next(it)


def _batch_size(args, dims) -> int:
    sizes = set()

    def visit(x, d):
        if d is None:
            return x
        if not isinstance(x, Tensor):
            raise ValueError(
                f"vmap: in_dims gives {d} for an argument that is not a tensor "
                f"({type(x).__name__}); use None for it"
            )
        n = x.dim()
        if not -n <= d < n:
            raise ValueError(f"vmap: in_dim {d} is out of range for an argument with {n} dims")
        sizes.add(x.shape[d])
        return x

    _map2(visit, args, dims)
    if not sizes:
        raise ValueError("vmap: at least one argument must be batched (in_dims not all None)")
    if len(sizes) > 1:
        raise ValueError(
            f"vmap: the batched arguments have different batch sizes {sorted(sizes)}; "
            "they must all be the same"
        )
    return sizes.pop()


engine.vmap_transform = vmap  # grad(is_grads_batched=True) batches its backward with it
