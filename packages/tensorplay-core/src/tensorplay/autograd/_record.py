"""Recording: the dispatcher calls these when an op runs on tensors that require grad.

``record`` attaches an ``OpNode`` (the op-table row's ``vjp``) to the result;
``record_inplace`` handles ``x.op_(...)``: x's history is rebased onto the new
node, and when x is a view its base's history goes through ``CopySlices``. A view
whose memory is written in place after it was made (through it, its base or another
view) reads its base's new history from then on (``rebuild_view``).
"""

from __future__ import annotations

import dis
import functools
import math

from tensorplay._dispatch import OPS
from tensorplay._dtype import ALL as ALL_DTYPES
from tensorplay._factories import zeros
from tensorplay._native import NATIVE, any_requires_grad
from tensorplay._tensor import Tensor
from tensorplay._views import as_strided_params
from tensorplay.autograd import anomaly_mode, forward_ad, grad_mode
from tensorplay.autograd._derivatives import storage_cells as _cells
from tensorplay.autograd._formula_reads import local_names
from tensorplay.autograd.forward_ad import (  # noqa: F401 - the dispatcher calls them here
    needs_forward,
    overwrite as forward_overwrite,
    propagate as forward,
)
from tensorplay.autograd.graph import (
    _NO_EDGE,
    Node,
    SavedTensor,
    _saved_hooks,
    edge_of,
    grad_fn_of,
    input_edges,
    register_view_rebuild,
)

_anomaly = anomaly_mode.state


@functools.cache
def _backward_name(op: str) -> str:
    return "".join(p.capitalize() for p in op.split("_")) + "Backward0"


def differentiable_dtype(dt) -> bool:
    return dt.is_floating_point or dt.is_complex


class _LazyInputs(tuple):
    """The saved inputs, unpacked (and version-checked) one by one as a formula reads them."""

    def __new__(cls, saved, name):
        obj = super().__new__(cls, saved)
        obj._name = name
        return obj

    def _get(self, x):
        return x.unpack(self._name) if isinstance(x, SavedTensor) else x

    def __getitem__(self, i):
        item = super().__getitem__(i)
        if isinstance(i, slice):
            return tuple(self._get(x) for x in item)
        return self._get(item)

    def __iter__(self):
        return (self._get(x) for x in super().__iter__())


class _Ctx:
    """What a row's ``vjp``/``jvp`` sees: ``inputs`` (as passed), ``params`` and ``out``.

    Saved tensors are unpacked on access, so a row only fails the "modified by an
    inplace operation" check for the tensors its formula really reads.
    """

    __slots__ = ("_node", "params", "needs_input_grad", "_inputs")

    def __init__(self, node):
        self._node = node
        self.params = node.params
        # which inputs a gradient is wanted for: a vjp may skip work for the others
        self.needs_input_grad = node._needs
        self._inputs = None

    @property
    def inputs(self) -> _LazyInputs:
        if self._inputs is None:
            saved = self._node._check_saved()[0]
            if saved is None:
                raise RuntimeError(
                    f"{self._node.name()}: the formula reads ctx.inputs but its bytecode "
                    "showed no read of them; the inputs were not saved"
                )
            self._inputs = _LazyInputs(saved, self._node.name())
        return self._inputs

    @property
    def out(self):
        outs = self._node._check_saved()[1]
        if outs is None:
            raise RuntimeError(
                f"{self._node.name()}: the formula reads ctx.out but its row declared it "
                "does not (vjp.reads_out); the result was not saved"
            )
        name = self._node.name()
        vals = tuple(o.unpack(name) for o in outs)
        return vals if self._node.row.multi else vals[0]


def _saves(row) -> tuple:
    """(save the inputs?, save the result?) for ``row``'s backward: only what its formula
    can read, as torch's derivatives.yaml saves only what a formula names (relu's backward
    reads its result alone). Formulas built from partial derivatives read the inputs and say
    whether they read the result (``vjp.reads_out()``); for other formulas the bytecode
    tells (``_reads_ctx``). Multi-output rows always save their results: missing gradients
    are filled with zeros shaped like the outputs."""
    saves = row.__dict__.get("_saves")
    if saves is None:
        probe = getattr(row.vjp, "reads_out", None)
        if probe is None:
            inputs, out = _reads_ctx(row.vjp, "inputs"), _reads_ctx(row.vjp, "out")
        else:
            inputs, out = True, bool(probe())
        saves = row._saves = (inputs, row.multi or out)
    return saves


_CTX_READS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})  # LOAD_METHOD: Python < 3.12


def _reads_ctx(fn, attr: str) -> bool:
    """Can formula ``fn(ctx, ...)`` read ``ctx.<attr>``? No only when every use of ``ctx`` in
    its bytecode is an attribute read of another name (``ctx.params``): passing ``ctx`` on,
    or a nested function capturing it, counts as yes."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_argcount == 0:
        return True
    ctx = code.co_varnames[0]
    if ctx in code.co_cellvars:
        return True
    instructions = list(dis.get_instructions(fn))
    for ins, nxt in zip(instructions, [*instructions[1:], None]):
        names = local_names(ins)
        if ctx not in names:
            continue
        # an attribute read: a LOAD_FAST* pushes ctx last (on top of the stack) and the
        # next instruction takes an attribute of it
        pushed_last = ins.opname.startswith("LOAD_FAST") and ctx not in names[:-1]
        if not pushed_last or nxt is None or nxt.opname not in _CTX_READS or nxt.argval == attr:
            return True
    return False


class OpNode(Node):
    """Backward of one op-table row: calls ``row.vjp``, then fits each gradient to its
    input (sums broadcast dimensions, casts to the input's dtype)."""

    def __init__(self, row, targs, params, outputs: tuple):
        seq = row.n_inputs == "seq"
        self.next_functions, self._meta = input_edges(targs[0] if seq else targs)
        self.n_outputs = len(outputs)
        # which inputs a gradient is wanted for (``ctx.needs_input_grad``)
        self._needs = tuple([n is not None for n, _ in self.next_functions])
        self.row, self.params, self._seq = row, params, seq
        for i, o in enumerate(outputs):
            o.requires_grad, o.grad_fn, o._output_nr = True, self, i
        if row.kind == "view":
            for o in outputs:
                if o._base is not None:  # (reshape may have copied)
                    o._view_version = o._storage._version  # see graph.grad_fn_of
            save = _ViewGeometry
        else:
            save = SavedTensor
        save_in, save_out = _saves(row)
        if "_record_simple" not in row.__dict__:
            # the rows whose nodes _C.record_node may make (with _saves, cached above)
            row._record_simple = not (seq or row.multi or row.kind == "view")
        saved_in = None
        if save_in:
            saved_in = [save(x) if isinstance(x, Tensor) else x for x in targs]
            if seq:
                saved_in[0] = [SavedTensor(x) for x in targs[0]]
        saved_out = [save(o, self) for o in outputs] if save_out else None
        self._saved = (saved_in, saved_out)
        if _anomaly.enabled:  # (Node.__init__, which checks this for other nodes, is not run)
            anomaly_mode.record(self)

    def name(self) -> str:
        return _backward_name(self.row.name)

    def _check_saved(self):
        if self._saved is None:
            raise RuntimeError(_FREED)
        if self._seq and self._saved[0] is not None:
            seq, *rest = self._saved[0]
            return ([[s.unpack(self.name()) for s in seq], *rest], self._saved[1])
        return self._saved

    def release(self) -> None:
        self._saved = None

    def apply(self, grad_outputs):
        row = self.row
        if row.vjp is None:
            raise NotImplementedError(f"the derivative for '{row.name}' is not implemented")
        if self._saved is None:
            raise RuntimeError(_FREED)
        ctx = _Ctx(self)
        if row.multi:
            outs = ctx.out
            g = tuple(gi if gi is not None else _zeros_like(o) for gi, o in zip(grad_outputs, outs))
        else:
            g = grad_outputs[0]
        grads = row.vjp(ctx, g)
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        return tuple([fit_grad(gr, m) for gr, m in zip(grads, self._meta)])


class _ViewGeometry(SavedTensor):
    """What a view row's node keeps of its input and output: a detached alias, read back
    without the version check. A view's backward needs shapes, not values; the view is
    often written through in place (CopySlices), and keeping the input itself would be a
    reference cycle once that input's history is rebased onto the in-place op."""

    __slots__ = ()

    def __init__(self, t, node=None):
        t = t.detach()
        t._base = None
        self._packed = t

    def unpack(self, op_name: str = "backward"):
        return self._packed


def _zeros_like(t):
    return zeros(t._shape, dtype=t.dtype, device=t.device)


def sum_to(g, shape: tuple):
    """Sum ``g`` down to ``shape`` (the inverse of broadcasting)."""
    if g._shape == shape:
        return g
    lead = len(g._shape) - len(shape)
    inner = tuple(lead + i for i, n in enumerate(shape) if n == 1 and g._shape[lead + i] != 1)
    if not inner:
        # only leading dimensions were broadcast (a bias): one sum gives the shape, and the
        # gradient is a tensor of its own, not a view a leaf would have to copy
        return g.sum(dim=tuple(range(lead)))
    g = g.sum(dim=tuple(range(lead)) + inner, keepdim=True)
    return g.reshape(shape) if lead else g


def fit_grad(g, meta, node=None, i: int = 0):
    """A raw gradient fitted to its input (``meta``: the input's shape and dtype): summed
    over the dimensions the input was broadcast along and cast to its dtype (a complex
    gradient of a real input keeps its real part, as in torch's engine). The one
    fitter of every node; ``node`` is the node whose user code (a ``Function``'s or a
    custom op's ``backward``) returned gradient ``i``: its ``grad_error(i, g, shape)``
    words the error. Without it the gradient came from a built-in formula."""
    if g is None or meta is None:
        return None
    shape, dt = meta
    if type(g) is Tensor and g._shape == shape and g.dtype is dt:
        return g  # the common case: it fits already
    if not isinstance(g, Tensor):
        if node is not None:
            raise TypeError(node.grad_error(i, g, shape))
        raise TypeError(f"a vjp returned {type(g).__name__} where a Tensor or None belongs")
    if g._shape != shape:
        try:
            fitted = sum_to(g, shape) if len(g._shape) >= len(shape) else g
        except RuntimeError:
            fitted = g
        if fitted._shape != shape:
            if node is not None:
                raise RuntimeError(node.grad_error(i, g, shape))
            raise RuntimeError(
                f"gradient of shape {list(g._shape)} does not match its input's shape {list(shape)}"
            )
        g = fitted
    if g.dtype is not dt:
        g = g.to(dt)  # complex to real keeps the real part
    return g


_FREED = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


# ---- what the dispatcher calls -----------------------------------------------------------------


# grad mode's thread-local state, for the dispatcher's generated fast paths (which must not
# import autograd)
grad_state = grad_mode.state


def needs_grad(items) -> bool:
    """Is grad mode on and does any input require grad? (Checked on every general call;
    ``items`` is a list or tuple, whose list/tuple items count too.)"""
    return grad_mode.state.enabled and any_requires_grad(items)


def record(row, targs, params, result):
    """Attach the backward node of ``row`` to ``result`` (a tensor or tuple of tensors)."""
    if _record_node is not None:  # the common case, built in C (csrc/record.h)
        done = _record_node(row, targs, params, result)
        if done is not None:
            return done
    if type(result) is Tensor:  # the common case
        if differentiable_dtype(result.dtype):
            OpNode(row, targs, params, (result,))
        return result
    outs = result if isinstance(result, tuple) else (result,)
    diff = tuple(o for o in outs if differentiable_dtype(o.dtype))
    if not diff:
        return result
    OpNode(row, targs, params, diff if len(diff) == len(outs) else diff)
    return result


_record_node = None
if NATIVE is not None:
    NATIVE.init_record(
        OpNode,
        SavedTensor,
        tuple(d for d in ALL_DTYPES if differentiable_dtype(d)),
        _anomaly,
        forward_ad.state,
        _saved_hooks,
        grad_mode.state,
    )
    _record_node = NATIVE.record_node


def check_out_arg(row, out):
    raise RuntimeError(
        f"{row.name}(): functions with out=... arguments don't support automatic "
        "differentiation, but one of the arguments requires grad."
    )


class CopySlices(Node):
    """Backward of writing into a view of ``base`` in place: the gradient of the view's
    elements goes to the in-place op's node, the rest of base's gradient to base's old
    history. Elements are matched through the storage cells they occupy (as ``as_strided``'s
    backward matches them), so any geometry of base and view works; the split selects,
    never multiplies by a 0/1 mask (an inf gradient outside the view must stay inf)."""

    def __init__(self, base, view, op_edge):
        super().__init__((edge_of(base), op_edge))
        self._base = _ViewGeometry(base)
        self._view = as_strided_params(view)

    def apply(self, grad_outputs):
        g = grad_outputs[0]
        base, size = self._base.unpack(), self._view["size"]
        if g.numel() == 0 or math.prod(size) == 0:
            return (g, zeros(size, dtype=g.dtype, device=g.device))
        base_cells, view_cells, n = _cells(base, self._view)
        cells = zeros(n, dtype=g.dtype, device=g.device).scatter(0, base_cells, g.reshape(-1))
        g_view = cells.index_select(0, view_cells).reshape(size)
        cleared = zeros(view_cells.shape, dtype=g.dtype, device=g.device)
        g_base = cells.scatter(0, view_cells, cleared).index_select(0, base_cells)
        return (g_base.reshape(base._shape), g_view)


def rebuild_view(view) -> None:
    """Make ``view``'s history a read of its base's current one: ``as_strided`` over the
    base (torch's ``AsStridedBackward0``). A ``retain_grad()`` moves along; hooks stay with
    the old node, as in torch."""
    base = view._base
    if view._storage is not base._storage or not base.requires_grad:
        view._view_version = None  # (``set_`` moved it elsewhere) nothing left to read
        return
    old, old_nr = view.grad_fn, view._output_nr
    # (a view row: OpNode stamps the view's version)
    node = OpNode(OPS["as_strided"], (base,), as_strided_params(view), (view,))
    _move_retained(view, old, old_nr, node, 0)


register_view_rebuild(rebuild_view)


_LEAF_WRITE = "a leaf Variable that requires grad is being used in an in-place operation."
_HOW = (
    " Write to it under tp.no_grad() (as an optimizer step does), or to its .detach() if the "
    "graph must not see the write."
)


def check_inplace(name: str, target) -> None:
    """Refuse an in-place write (grad mode on) into a leaf that requires grad, or into a
    view of one: the leaf's ``.grad`` would be the gradient of a value it no longer holds."""
    if target.requires_grad and target.grad_fn is None:
        raise RuntimeError(f"{name}(): {_LEAF_WRITE}{_HOW}")
    base = target._base
    if base is not None and base.grad_fn is None and base.requires_grad:
        raise RuntimeError(f"{name}(): a view of {_LEAF_WRITE}{_HOW}")


def _set_history(t, node, nr: int) -> None:
    """``t``'s value is now output ``nr`` of ``node``."""
    _move_retained(t, t.grad_fn, t._output_nr, node, nr)
    t.grad_fn, t._output_nr, t.requires_grad = node, nr, True


def _move_retained(t, old, old_nr: int, node, nr: int) -> None:
    """A ``retain_grad()`` of ``t`` on (old, old_nr) moves to (node, nr): the retained
    gradient is that of the tensor's current value (as torch)."""
    ref = old._retained.get(old_nr) if old is not None else None
    if ref is not None and ref() is t:
        del old._retained[old_nr]
        node._own("_retained", dict)[nr] = ref


def _rebase(target, edge) -> None:
    """Make ``edge`` (the node of an in-place write into ``target``) target's history.
    When target is a view, its base's history goes through ``CopySlices``."""
    base = target._base
    if base is None:
        _set_history(target, *edge)
        return
    _set_history(base, CopySlices(base, target, edge), 0)
    # now (so that a retain_grad() moves to the new value, as in torch), and again when
    # target is next used: the write that follows changes its version
    rebuild_view(target)


def record_inplace(row, targs, params, result, target):
    """``target.<op>_(...)`` with autograd: returns ``target`` holding ``result``'s values."""
    check_inplace(row.name + "_", target)
    if not differentiable_dtype(result.dtype):
        return None
    # The op's node must see target's *old* value and history: a snapshot with target's edge.
    old = target.detach().clone()
    old.requires_grad, old.grad_fn = target.requires_grad, grad_fn_of(target)
    old._output_nr = target._output_nr
    snap_targs = (old,) + tuple(targs[1:])
    record(row, snap_targs, params, result)
    _rebase(target, (result.grad_fn, 0))
    return target


class OverwriteBackward(Node):
    """Backward of overwriting a tensor in place (``copy_(src)``, ``fill_``, ``zero_``, the
    random fills): the old value no longer matters, so its gradient is zero; ``src``'s is
    the incoming one, summed over the dimensions ``copy_`` broadcast, cast to its dtype and
    moved to its device."""

    def __init__(self, name: str, old, src=None):
        super().__init__((edge_of(old), _NO_EDGE if src is None else edge_of(src)))
        self._name = name
        self._old = (old._shape, old.dtype, old.device)
        self._src = None if src is None else (src._shape, src.dtype, src.device)

    def name(self) -> str:
        return _backward_name(self._name.rstrip("_"))

    def apply(self, grad_outputs):
        g = grad_outputs[0]
        g_old = g_src = None
        if self.next_functions[0][0] is not None:
            shape, dt, dev = self._old
            g_old = zeros(shape, dtype=dt, device=dev)
        if self.next_functions[1][0] is not None:
            shape, dt, dev = self._src
            g_src = fit_grad(g, (shape, dt))
            if g_src.device is not dev:
                g_src = g_src.to(dev)
        return (g_old, g_src)


def record_write(name: str, target, src=None) -> None:
    """Autograd of ``target`` being overwritten in place by ``name`` (with ``src``'s values,
    or values that depend on nothing): call before writing. Afterwards target's gradient
    flows to ``src`` only."""
    check_inplace(name, target)
    if not differentiable_dtype(target.dtype):
        return  # an integer or bool result carries no gradient (src's is dropped, as torch)
    _rebase(target, (OverwriteBackward(name, target, src), 0))
