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
* ``matmul`` and ``linear``: batch-first layouts that the op broadcasts itself;
* custom ops: their ``register_vmap`` rule (``info``, ``in_dims``, the arguments).

Autograd records around the handler, so ``vmap`` of a function that calls
``tp.autograd.grad`` gives per-sample gradients.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

from tensorplay import _factories, _meta
from tensorplay._dispatch import OPS
from tensorplay._tensor import Tensor
from tensorplay.autograd import engine, function
from tensorplay.autograd.function import Function
from tensorplay.autograd.grad_mode import is_grad_enabled
from tensorplay.utils import _python_dispatch  # noqa: F401 - wrapper subclasses (BatchedTensor)

__all__ = ["vmap", "BatchedTensor", "PerformanceWarning"]


class PerformanceWarning(UserWarning):
    """An op ran as a loop over the batch inside ``vmap`` (no batching rule)."""


class _State(threading.local):
    def __init__(self):
        self.levels: list = []  # (level, batch size, randomness), innermost last


_state = _State()
_warned: set = set()


class BatchedTensor(Tensor):
    """A sample's view of a batch inside ``vmap``: ``elem`` is the batch (dim 0) at
    ``level``. Its shape, dtype and device are the sample's."""

    @staticmethod
    def __new__(cls, elem, level: int):
        t = Tensor._make_wrapper_subclass(
            cls, tuple(elem.shape)[1:], dtype=elem.dtype, device=elem.device
        )
        t.elem, t.level = elem, level
        return t

    def __init__(self, elem, level: int):  # (all of it is in __new__)
        pass

    def __repr__(self) -> str:
        return f"BatchedTensor(level={self.level}, batch={self.elem.shape[0]}, {self.elem!r})"

    @classmethod
    def __tensorplay_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        level = max(a.level for a in _flat((args, kwargs)) if isinstance(a, BatchedTensor))
        at = next(a for a in _flat((args, kwargs)) if _at(a, level))
        size = at.elem.shape[0]  # (from the wrapper: a backward pass may run after vmap)
        row = func.row
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


# ---- helpers -------------------------------------------------------------------------------


def _flat(value):
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from _flat(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flat(v)
    else:
        yield value


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
    return _map(lambda r: BatchedTensor(r, level) if isinstance(r, Tensor) else r, result)


def _loop(func, level, size, args, kwargs):
    """The op once per sample, the results stacked: right for every op, slow."""
    name = func.name
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
        if not _at(self, level):
            raise RuntimeError(
                f"vmap: {name}(self, ...) writes into a tensor that is not batched while "
                "another argument is; a batched result cannot fit it (use the out-of-place "
                f"{name[:-1]})"
            )
        for b in range(size):
            func(*_sample(args, level, b), **_sample(kwargs, level, b))
        return self
    outs = [func(*_sample(args, level, b), **_sample(kwargs, level, b)) for b in range(size)]
    return _stack(outs, level)


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
    if func.inplace:
        return _elementwise if _is_elementwise(row) else None
    name = row.name
    if _is_elementwise(row):
        return _elementwise
    if name in _DIM_ARGS:
        return _dims
    if name in ("reshape", "view", "expand"):
        return _shaped
    if name == "permute":
        return _permute
    if name == "matmul":
        return _matmul
    if name in _TRAILING:
        return _trailing
    if name == "linear":
        return _linear
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
    tensors = [a for a in _flat((args, kwargs)) if isinstance(a, Tensor)]
    rank = max(a.dim() for a in tensors)  # the sample's broadcast rank

    def align(x):
        if not _at(x, level):
            return x
        e = x.elem
        pad = rank - (e.dim() - 1)
        return e.reshape(e.shape[0], *([1] * pad), *e.shape[1:]) if pad else e

    if func.inplace and not _at(args[0], level):
        return NotImplemented  # the loop's error
    out = func(*_map(align, args), **_map(align, kwargs))
    return args[0] if func.inplace else _wrap(out, level)


# elementwise rows whose shape rule checks more than broadcasting (the rule still holds)
_ELEMENTWISE = {
    "pow", "clamp", "clamp_min", "clamp_max", "addcmul", "addcdiv", "lerp", "clone",
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


def _dims(func, level, size, args, kwargs):
    """Dims wrapped against the sample's rank, then shifted past the batch."""
    row = func.row
    names, extra = _DIM_ARGS[row.name]
    bound = _signature(row).bind(*args, **kwargs)
    x = bound.arguments[next(iter(bound.arguments))]
    if not _at(x, level) or any(
        _at(v, level) for k, v in bound.arguments.items() if k != next(iter(bound.arguments))
    ):
        return NotImplemented
    rank = x.dim() + extra
    if not rank:
        return NotImplemented  # a dim of a 0-d sample names no dim of the batch: the loop
    for name in names:
        d = bound.arguments.get(name, _signature(row).parameters[name].default)
        if d is None:
            if name != "dim":
                return NotImplemented
            if row.name == "squeeze":
                d = tuple(i for i, n in enumerate(x.shape) if n == 1)
            elif row.name in _ALL_DIMS and x.dim():
                d = tuple(range(x.dim()))
            else:
                return NotImplemented
        if isinstance(d, (tuple, list)):
            d = tuple(_meta.wrap_dim(i, rank, row.name) + 1 for i in d)
        else:
            d = _meta.wrap_dim(d, rank, row.name) + 1
        bound.arguments[name] = d
    bound.arguments[next(iter(bound.arguments))] = x.elem
    return _wrap(func(*bound.args, **bound.kwargs), level)


def _shaped(func, level, size, args, kwargs):
    """reshape/view/expand: the batch prepended to the requested shape."""
    x, *shape = args
    if not _at(x, level) or kwargs or any(isinstance(s, Tensor) for s in shape):
        return NotImplemented
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = list(shape[0])
    e = x.elem
    if func.row.name == "expand":
        pad = len(shape) - x.dim()
        e = e.reshape(size, *([1] * pad), *e.shape[1:]) if pad > 0 else e
    return BatchedTensor(func(e, (size, *shape)), level)


def _permute(func, level, size, args, kwargs):
    x, *dims = args
    if not _at(x, level) or kwargs:
        return NotImplemented
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = list(dims[0])
    n = x.dim()
    order = (0, *(_meta.wrap_dim(d, n, "permute") + 1 for d in dims))
    return BatchedTensor(func(x.elem, order), level)


def _matmul(func, level, size, args, kwargs):
    """Vectors become matrices (squeezed again at the end), and a batched operand gets 1s
    after its batch up to the larger rank, so matmul's own broadcasting of leading dims
    keeps the batch in front."""
    a, b = args
    na, nb = a.dim(), b.dim()
    if kwargs or not na or not nb:
        return NotImplemented  # (matmul refuses 0-d operands: the loop raises it)
    ea, eb = (a.elem if _at(a, level) else a), (b.elem if _at(b, level) else b)
    ra, rb = max(na, 2), max(nb, 2)
    if na == 1:
        ea = ea.unsqueeze(-2)
    if nb == 1:
        eb = eb.unsqueeze(-1)
    r = max(ra, rb)
    if _at(a, level) and ra < r:
        ea = ea.reshape(size, *([1] * (r - ra)), *ea.shape[1:])
    if _at(b, level) and rb < r:
        eb = eb.reshape(size, *([1] * (r - rb)), *eb.shape[1:])
    out = func(ea, eb)
    if na == 1:  # a's row first: with both vectors, (..., 1, 1) -> (..., 1) -> (...)
        out = out.squeeze(-2)
    if nb == 1:
        out = out.squeeze(-1)
    return BatchedTensor(out, level)


def _trailing(func, level, size, args, kwargs):
    x = args[0]
    if not _at(x, level) or any(_at(v, level) for v in _flat((args[1:], kwargs))):
        return NotImplemented
    return BatchedTensor(func(x.elem, *args[1:], **kwargs), level)


def _linear(func, level, size, args, kwargs):
    x, rest = args[0], (*args[1:], *kwargs.values())
    if not _at(x, level) or any(_at(r, level) for r in rest):
        return NotImplemented
    return BatchedTensor(func(x.elem, *args[1:], **kwargs), level)


@functools.cache
def _signature(row):
    import inspect

    return inspect.signature(row.fn)


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
        odims = _broadcast_dims(out_dims, (parts[0],))[0]
        odims_flat = _leaves(odims) if isinstance(odims, (tuple, list, dict)) else None
        joined = []
        for i in range(len(flat_parts[0])):
            d = odims_flat[i] if odims_flat is not None else odims
            joined.append(cat([fp[i] for fp in flat_parts], dim=d))
        return _rebuild(parts[0], iter(joined))

    return batched


def _run(func, args, kwargs, dims, size, out_dims, randomness):
    level = len(_state.levels) + 1
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
    odims = _broadcast_dims(out_dims, (out,))[0]
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
        d = _meta.wrap_dim(d, o.dim() + 1, "vmap")
        if o.requires_grad and is_grad_enabled():
            return _Leave.apply(o, d)
        return o.elem.movedim(0, d)
    # the same for every sample (it did not depend on a batched input): expand it
    d = _meta.wrap_dim(d, o.dim() + 1, "vmap")
    return o.unsqueeze(d).expand(*o.shape[:d], size, *o.shape[d:])


def _enter(x, d, level):
    """``x`` with its batch at ``d`` as this level's BatchedTensor; attached to x's graph
    when x requires grad (so ``grad`` of a vmapped function reaches x)."""
    e = x.movedim(d, 0)
    if e.requires_grad and is_grad_enabled():
        return _Enter.apply(e, level)
    return BatchedTensor(e, level)


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


class _Leave(Function):
    """A wrapper -> the batch with its batch at ``d``; backward: the inverse."""

    generate_vmap_rule = True

    @staticmethod
    def forward(ctx, o, d):
        ctx.level, ctx.d = o.level, d
        return o.elem.movedim(0, d)

    @staticmethod
    def backward(ctx, g):
        return BatchedTensor(g.movedim(ctx.d, 0), ctx.level), None


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
