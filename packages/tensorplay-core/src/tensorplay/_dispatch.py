"""The dispatcher: from an entry to a result, through every layer, for every op.

An entry is an op-table row (``OpDef``: array kernels, the built-in ops) or a
``TensorOp`` (``_tensor_op``: Tensor kernels, the custom ops). Both are called through
``call``, the one general path::

    overrides and function modes (graph capture: a proxy argument is an override)
    -> layers active now (profiler, autocast: ``push_layer``)
    -> ``execute``: autograd around dispatch modes around the kernel

For a row, ``execute`` checks the arguments, finds the common device, promotes dtypes,
runs the meta rule (shape) and the kernel on numpy/CuPy arrays, and wraps the result (or
writes into out=/self); a ``TensorOp`` runs its own kernel (``TensorOp.execute``).

Every public op is generated from its row by ``register``: a small Python function with
the row's own signature (so Python does the argument parsing), which tries the *fast
path* for plain calls and otherwise hands over to ``call``. ``TensorOp`` generates its
``__call__`` the same way.

Overrides, modes, autocast and autograd plug in by registering themselves by name when
their module is imported (``register_autograd``, ``register_overrides``,
``register_dispatch_modes``; ``push_layer``/``pop_layer`` for the layers that are on only
while active, the profiler and autocast). Until then the stand-ins below answer "nothing
to do", so ``_dispatch`` imports none of them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorplay import _cuda_pointwise, _device, _dtype as D, _meta
from tensorplay._device import CPU, META
from tensorplay._native import NATIVE
from tensorplay._storage import cpu_empty
from tensorplay._tensor import Tensor, adopt_array, empty_tensor, make_view, wrap_array

__all__ = [
    "OpDef",
    "register",
    "call",
    "OPS",
    "state",
    "set_device_kernel",
    "get_device_kernel",
    "register_autograd",
    "register_overrides",
    "register_dispatch_modes",
    "push_layer",
    "pop_layer",
]


class _State:
    """Global switches read on every call; ``plain`` is the fast-path gate.

    ``plain`` stays True while nothing (override modes, dispatch modes, profiler,
    autocast, tracers) needs to see individual calls; components that add such a layer
    clear it while active. A slot, so the native fast path reads it at a fixed offset.
    """

    __slots__ = ("plain", "_blockers")

    def __init__(self):
        self.plain = True
        self._blockers = 0

    def block(self) -> None:
        """A layer that must see every call is now active (nests)."""
        self._blockers += 1
        self.plain = False

    def unblock(self) -> None:
        self._blockers -= 1
        self.plain = self._blockers == 0


state = _State()
if NATIVE is not None:
    NATIVE.watch_gate(state)  # tensorplay._C.FastOp reads state.plain itself


class _NoAutograd:
    """Stand-in until ``tensorplay.autograd`` installs the real recorder (at import)."""

    @staticmethod
    def needs_grad(items) -> bool:
        return False

    needs_forward = needs_grad

    class grad_state:  # noqa: N801 - stands for grad_mode.state: grad mode is on
        enabled = True


autograd_hooks = _NoAutograd  # tensorplay.autograd._record, via register_autograd


def _no_tensor_op_autograd(op, args, kwargs):
    raise RuntimeError(
        f"{op.name}: an input requires grad but tensorplay.autograd is not loaded; "
        "import tensorplay (which loads it) before calling ops"
    )


# ``autograd_tensor_op(op, args, kwargs)``: run a TensorOp call with inputs that require
# grad (tensorplay.autograd._tensor_op.record_call, via register_autograd)
autograd_tensor_op = _no_tensor_op_autograd


class _NoOverrides:
    """Stand-in until ``tensorplay.overrides`` installs itself (at import)."""

    @staticmethod
    def needs_dispatch(targs, params, out) -> bool:
        return False


overrides_hook = _NoOverrides  # tensorplay.overrides, via register_overrides


class _NoDispatchModes:
    @staticmethod
    def active() -> bool:
        return False

    @staticmethod
    def wanted(values) -> bool:
        return False

    @staticmethod
    def claims(targs, params) -> bool:
        return False


dispatch_modes = _NoDispatchModes  # tensorplay.utils._python_dispatch, via register_dispatch_modes


def register_autograd(recorder, tensor_ops) -> None:
    """The autograd layer: ``recorder`` answers ``needs_grad``/``needs_forward`` for a call's
    inputs and records graph nodes of rows (``record``, ``forward``, ``check_out_arg``);
    ``tensor_ops(op, args, kwargs)`` runs a ``TensorOp`` call whose inputs require grad.
    Called once, by ``tensorplay.autograd`` at import."""
    global autograd_hooks, autograd_tensor_op
    autograd_hooks = recorder
    autograd_tensor_op = tensor_ops


def register_overrides(handler) -> None:
    """The ``__tensorplay_function__`` layer: ``handler.needs_dispatch(targs, params, out)``
    and ``handler.dispatch(...)``. Called once, by ``tensorplay.overrides`` at import."""
    global overrides_hook
    overrides_hook = handler


def register_dispatch_modes(modes) -> None:
    """The dispatch-mode layer (below autograd): ``modes.active()``, ``modes.wanted(values)``
    (a mode, or a ``__tensorplay_dispatch__`` subclass among the values), ``modes.claims(targs,
    params)`` (such a subclass that the override layer would pass on) and ``modes.run(...)``.
    Called once, by ``tensorplay.utils._python_dispatch`` at import."""
    global dispatch_modes
    dispatch_modes = modes


@dataclasses.dataclass(eq=False)
class OpDef:
    """One row of the op table: everything TensorPlay knows about an op.

    ``params`` is the public function's parameter list; its first ``n_inputs``
    parameters (or the one variadic/sequence parameter when ``n_inputs`` is
    ``"seq"``) are the tensor inputs. ``kernel(xp, *arrays, **params)`` runs on
    numpy or CuPy arrays; ``shape(*inputs, **params)`` is the meta rule;
    ``dtype(promoted, params) -> (compute, out)`` the dtype rule. View rows have
    no kernel: ``shape`` returns ``(shape, stride, offset)`` of the view.
    """

    name: str
    params: str
    kind: str = "pointwise"  # pointwise | reduction | view | other
    kernel: Callable | None = None
    shape: Callable | None = None
    dtype: Callable = _meta.same
    promote: str = "result_type"  # result_type | same | first | none
    n_inputs: Any = 1
    cast: tuple | None = None  # indexes of inputs cast to the compute dtype
    ufunc: str | None = None  # numpy/CuPy ufunc name: enables the fast path
    # A C expression of the elements ``a`` (and ``b``) in the compute dtype, for a row whose
    # result has that dtype: its CUDA kernel for contiguous inputs (``_cuda_pointwise``)
    cuda: str = ""
    # The row's CuPy kernel is several launches (a comparison, then a where): its ``cuda``
    # expression, one launch, then runs at every size, not only from
    # ``_cuda_pointwise.MIN_ELEMENTS`` up (below which one CuPy launch costs less host time)
    cuda_fused: bool = False
    allow: str = "bifc"  # dtype categories accepted: b(ool) i(nt) f(loat) c(omplex)
    # Python numbers as inputs after the first must fit the result dtype where its kind is
    # listed: i(nt) h(alf: float16, bfloat16) f(loat32/64) c(omplex). torch checks them
    # there (``where(c, 300, int8_tensor)`` raises); elsewhere they wrap (``int8 + 300``).
    scalar_check: str = ""
    # Inputs that, as a number or 0-d tensor, enter float16/bfloat16 math at float32
    # precision instead of being rounded to the tensor's dtype first: torch's add/sub/mul/div
    # kernels read such an operand at full precision (``half * 1e5`` is inf, not inf * 0 = nan).
    scalar_opmath: tuple = ()
    # Tensor.<name> exists: True, or "attribute" where the function is also a settable
    # attribute (real/imag: ``z.real = v``), attached at import instead of on first use
    method: bool | str = True
    # ``Tensor.<name>_`` exists: True, or the dtype categories (``allow`` letters) it takes
    # where that is fewer (abs_ would write a real result into a complex tensor: torch refuses)
    inplace: bool | str = False
    out: bool = False
    dunders: tuple = ()
    multi: bool = False  # returns a tuple of tensors
    vjp: Callable | None = None  # filled by the autograd work
    jvp: Callable | None = None
    doc: str = ""
    fast: dict = dataclasses.field(default_factory=dict)
    device_kernels: dict = dataclasses.field(default_factory=dict)  # set_device_kernel
    may_warn: bool = True
    defaults: dict = dataclasses.field(default_factory=dict)
    _fn: Callable | None = None
    _inplace_fn: Callable | None = None

    # The public functions are generated on first use: compiling ~150 small functions
    # would otherwise cost ~20 ms of every ``import tensorplay``.
    @property
    def fn(self) -> Callable:
        """The public function ``tp.<name>`` (generated from the row on first use)."""
        if self._fn is None:
            self._fn = _generate(self)
        return self._fn

    @property
    def inplace_fn(self) -> Callable | None:
        """``Tensor.<name>_`` when the row has an in-place variant."""
        if self._inplace_fn is None and self.inplace:
            self._inplace_fn = _generate_inplace(self)
        return self._inplace_fn


OPS: dict[str, OpDef] = {}
_CATS = {0: "b", 1: "i", 2: "f", 3: "c"}
_HALF = (D.float16, D.bfloat16)  # computed in float32, rounded once (``_meta.same``)


# ---- the general path ------------------------------------------------------------


def _inputs(row: OpDef, targs: tuple) -> list:
    """The tensor-or-scalar inputs of a call, flattened (cat's list counts)."""
    if row.n_inputs == "seq":
        seq = targs[0]
        if isinstance(seq, Tensor) or not isinstance(seq, (list, tuple)):
            raise TypeError(
                f"{row.name}(): expected a sequence of Tensors, got {type(seq).__name__}"
            )
        for i, t in enumerate(seq):
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"{row.name}(): expected Tensor as element {i} in argument 0, "
                    f"but got {type(t).__name__}"
                )
        return list(seq)
    return list(targs)


def _common_device(row: OpDef, items: list):
    dev = None
    for x in items:
        if isinstance(x, Tensor):
            d = x.device
            if dev is None or dev is d:
                dev = d
            elif x._shape == () and d is CPU:
                continue  # 0-d CPU tensors act as scalars next to CUDA tensors (torch rule)
            elif dev is CPU and _first_shape(items, dev) == ():
                dev = d
            else:
                raise RuntimeError(
                    f"{row.name}(): expected all tensors to be on the same device, but found at "
                    f"least two devices, {dev} and {d}"
                )
    if dev is None:
        raise TypeError(f"{row.name}(): expected at least one Tensor argument")
    return dev


def _first_shape(items, dev):
    for x in items:
        if isinstance(x, Tensor) and x.device is dev:
            return x._shape
    return None


def _optional_input(row: OpDef, i: int) -> bool:
    """Input ``i`` defaults to None in the row's signature (``clamp(min=None)``)."""
    names = row.params.split(",")
    return (
        row.n_inputs not in ("seq", "star")
        and i < len(names)
        and names[i].replace(" ", "").endswith("=None")
    )


def _check_scalar(row: OpDef, x, i: int):
    if isinstance(x, (bool, int, float, complex, np.generic)):
        D.check_int64(row.name, x)
        return
    raise TypeError(
        f"{row.name}(): argument {i} must be a Tensor or a number, got {type(x).__name__}"
    )


def _promoted(row: OpDef, items: list, idx) -> D.dtype:
    sel = [items[i] for i in idx] if idx is not None else items
    if row.promote == "first":
        return sel[0].dtype
    # The common call, tensors of one dtype and none of them 0-d, promotes to that dtype:
    # answered without sorting inputs into torch's three participant groups.
    dt = sel[0].dtype if sel and isinstance(sel[0], Tensor) else None
    for x in sel:
        if not (isinstance(x, Tensor) and x._shape and x.dtype is dt):
            break
    else:
        if dt is not None:
            return dt
    dims, zeros, scalars = [], [], []
    for x in sel:
        if isinstance(x, Tensor):
            (dims if x._shape else zeros).append(x.dtype)
        elif x is not None:
            scalars.append(D.scalar_dtype(x))
    if row.promote == "same":
        kinds = {d for d in dims + zeros}
        if len(kinds) > 1:
            names = " and ".join(sorted(d.name for d in kinds))
            raise RuntimeError(
                f"{row.name}(): expected both inputs to have the same dtype, "
                f"but got {names}; convert one with .to(dtype)"
            )
    return D.result_type_of(dims, zeros, scalars)


def _as_array(xp, x, dt: D.dtype, dev, via: D.dtype | None = None, by_value: bool = False):
    # ``via``: a float16/bfloat16 promoted dtype computed in float32; inputs round to it first
    # (a float16 0-d tensor or a Python float next to a bfloat16 tensor acts as bfloat16: torch)
    # ``by_value``: a number for a CuPy ufunc stays a numpy scalar, which the kernel takes as
    # an argument; a 0-d device array would be a host-to-device copy (a synchronisation)
    if isinstance(x, Tensor):
        a = x._data
        if x.device is not dev:  # a 0-d CPU tensor next to CUDA tensors
            a = a[()] if by_value else xp.asarray(a)
        if via is not None and a.dtype != via.np:
            a = a.astype(via.np)
        return a if a.dtype == dt.np else a.astype(dt.np)
    if x is None:
        return None
    a = D.scalar_array(x, via or dt)
    if via is not None:
        a = a.astype(dt.np)
    if xp is np:
        return a
    return a[()] if by_value else xp.asarray(a)


def _via(row: OpDef, i: int, x, via: D.dtype) -> D.dtype | None:
    """What input ``i`` rounds to before float32 math on float16/bfloat16 (see ``_as_array``):
    nothing for a number or 0-d tensor the row takes at full precision (``scalar_opmath``)."""
    if i in row.scalar_opmath and not (isinstance(x, Tensor) and x._shape):
        return None
    return via


def _check_scalars(row: OpDef, items: list, promoted: D.dtype) -> None:
    """Numbers after the first input must fit the result dtype where the row says torch checks
    them (``scalar_check``)."""
    if _KIND[promoted] in row.scalar_check:
        for x in items[1:]:
            if x is not None and not isinstance(x, Tensor):
                D.check_fits(row.name, x, promoted)


# a dtype's letter in ``scalar_check``
_KIND = {d: "bifc"[d.category] for d in D.ALL} | {D.float16: "h", D.bfloat16: "h"}


def _no_complex_half(row: OpDef, items: list) -> None:
    """torch gives complex32 for a float16 tensor with a complex number; TensorPlay has no
    complex32, so that is an error (an op whose result is not complex, ``==``, runs in
    complex64)."""
    groups = ([], [], [])
    for x in items:
        if isinstance(x, Tensor):
            groups[0 if x._shape else 1].append(x.dtype)
        elif x is not None:
            groups[2].append(D.scalar_dtype(x))
    if D.complex_half(*groups):
        raise NotImplementedError(
            f"{row.name}(): a float16 tensor with a complex operand is not supported: PyTorch "
            "gives complex32 (ComplexHalf), a dtype TensorPlay does not have; convert the "
            "tensor with .to(tensorplay.complex64) first"
        )


def call(
    row: OpDef, targs: tuple, params: dict, out: Tensor | None = None, inplace: Tensor | None = None
):
    """Run ``row`` on ``targs`` (tensor inputs) and ``params`` (everything else); for a
    ``TensorOp``, ``targs``/``params`` are the call's positional and keyword arguments."""
    # __tensorplay_function__ and function modes: only a call with an argument that is
    # neither a Tensor nor a number (nor a list/tuple of them), with out=, or with a
    # layer active (state.plain off) pays for the full check; the common call costs
    # ~0.2 µs here, and plain-Tensor calls on the fast path never get here.
    if not state.plain or out is not None or _unusual(targs, params):
        if (
            state.plain
            and out is None
            and row.kind != "tensor_op"
            and dispatch_modes.claims(targs, params)
        ):
            # a wrapper subclass (vmap's BatchedTensor) with no layer active: the override
            # layer would only call the op again and execute() would send it below autograd
            return _below_autograd_mode(row, targs, params, None, inplace)
        if overrides_hook.needs_dispatch(targs, params, out):
            return overrides_hook.dispatch(row, targs, params, out, inplace)
    if layers:
        return _through_layers(0, row, targs, params, out, inplace)
    return execute(row, targs, params, out, inplace)


def _below_autograd_mode(row, targs, params, out, inplace):
    """A dispatch mode produces the op's result; autograd (both modes) works around it."""
    items = _inputs(row, targs)
    track = autograd_hooks.needs_grad(items)
    if track and (inplace is not None or out is not None):
        raise NotImplementedError(
            f"{row.name}: in-place and out= calls on tensors that require grad are not "
            "supported under a dispatch mode; use the out-of-place op"
        )
    dual = autograd_hooks.needs_forward(items)
    result = dispatch_modes.run(row, targs, params, out, inplace)
    outs = result if isinstance(result, tuple) else (result,)
    if track and all(isinstance(o, Tensor) for o in outs):
        result = autograd_hooks.record(row, targs, params, result)
    if dual and all(isinstance(o, Tensor) for o in outs):
        # forward mode sits above the modes too: tangents (batched ones under vmap) ride on
        # the values the handler returns, not on whatever it computed them from
        autograd_hooks.forward(row, targs, params, result, inplace)
    return result


# Layers that see every call while they are active (profiler, autocast): each is a
# function ``layer(next, row, targs, params, out, inplace)`` that may change the call
# and must return ``next(row, targs, params, out, inplace)`` (or a result of its own).
# Added with ``push_layer`` and removed with ``pop_layer``.
layers: list = []


def push_layer(layer) -> None:
    """Make ``layer`` see every call (innermost so far) and keep the fast path aside."""
    layers.append(layer)
    state.block()


def pop_layer(layer) -> None:
    """Undo ``push_layer(layer)``."""
    try:
        layers.remove(layer)
    finally:
        state.unblock()


def _through_layers(i, row, targs, params, out, inplace):
    if i == len(layers):
        return execute(row, targs, params, out, inplace)

    def nxt(row, targs, params, out=None, inplace=None):
        return _through_layers(i + 1, row, targs, params, out, inplace)

    return layers[i](nxt, row, targs, params, out, inplace)


def execute(
    row: OpDef, targs: tuple, params: dict, out: Tensor | None = None, inplace: Tensor | None = None
):
    """The op itself: checks, dtype, shape, kernel, autograd recording, out=/in-place."""
    if row.kind == "tensor_op":
        return row.execute(targs, params)
    if dispatch_modes.wanted(targs):
        return _below_autograd_mode(row, targs, params, out, inplace)
    items = _inputs(row, targs)
    dev, promoted = _checked(row, items)
    track = autograd_hooks.needs_grad(items)  # record the graph for this call?
    dual = autograd_hooks.needs_forward(items)  # propagate forward-mode tangents?
    if row.kind == "view":
        result = _call_view(row, targs, params)
        if track:
            result = autograd_hooks.record(row, targs, params, result)
        if dual:
            autograd_hooks.forward(row, targs, params, result)
        return result
    if out is not None and (track or autograd_hooks.needs_grad((out,))):
        autograd_hooks.check_out_arg(row, out)  # out= itself counts as an argument (torch)
    cdt, odt = row.dtype(promoted, params)
    if promoted is D.complex64 and odt is D.complex64:
        _no_complex_half(row, items)
    shape = row.shape(*targs, **params)
    if inplace is not None:
        _check_inplace(row, inplace, shape, odt)
    if dev is META:
        result = _meta_result(row, shape, odt)
    else:
        xp = np if dev is CPU else _device.array_module(dev)
        cast = row.cast if row.cast is not None else range(len(targs))
        via = promoted if promoted in _HALF and cdt is not promoted else None
        by_value = row.ufunc is not None and not row.device_kernels
        arrays = (
            [
                _as_array(xp, x, cdt, dev, via and _via(row, i, x, via), by_value)
                if i in cast
                else _raw(x, row, i)
                for i, x in enumerate(targs)
            ]
            if row.n_inputs != "seq"
            else [[_as_array(xp, x, cdt, dev, via) for x in items]]
        )
        if (
            inplace is not None
            and not (track or dual)
            and row.ufunc is not None
            and cdt is odt
            and inplace.dtype is odt
            and params == row.defaults
        ):
            if xp is not np and _cuda_expr(row, arrays, odt, inplace._data) is not None:
                inplace._bump_version()
                return inplace
            quiet = _quiet_on() if xp is np else None
            try:
                getattr(xp, row.ufunc)(*arrays, out=inplace._data)
            finally:
                if quiet is not None:
                    _quiet_off(quiet)
            inplace._bump_version()
            return inplace
        if row.device_kernels:
            kernel = _device_kernel(row, dev, arrays, params)
        else:
            kernel = _kernel(row, xp, cdt, odt, params)
        quiet = _quiet_on() if row.may_warn and xp is np else None
        try:
            result = _wrap_result(row, kernel(xp, *arrays, **params), odt, dev)
        except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError) as e:
            raise RuntimeError(f"{row.name}(): {e}") from e
        finally:
            if quiet is not None:
                _quiet_off(quiet)
    # NOTE: the graph node before the tangent: a jvp formula that reads the result (tanh's
    # reads ``out``) then records a tangent that is differentiable (reverse over forward)
    if track and inplace is None:
        result = autograd_hooks.record(row, targs, params, result)
    if dual:
        autograd_hooks.forward(row, targs, params, result, inplace)
    if track:
        if inplace is not None:
            autograd_hooks.record_inplace(row, targs, params, result, inplace)
            return _write_inplace(row, inplace, result)
        return result
    if inplace is not None:
        return _write_inplace(row, inplace, result)
    if out is not None:
        return _write_out(row, out, result)
    return result


def _checked(row: OpDef, items: list):
    """The argument checks of ``execute``: (the common device, the promoted dtype)."""
    for i, x in enumerate(items):
        if not isinstance(x, Tensor) and not (x is None and _optional_input(row, i)):
            _check_scalar(row, x, i)
    dev = _common_device(row, items)
    promoted = _promoted(row, items, row.cast)
    if _CATS[promoted.category] not in row.allow:
        # torch: NotImplementedError ('"abs_cpu" not implemented for 'Bool''), a RuntimeError
        raise NotImplementedError(f"{row.name}(): not supported for dtype {promoted}")
    if row.scalar_check:
        _check_scalars(row, items, promoted)
    return dev, promoted


def _kernel(row: OpDef, xp, cdt, odt, params) -> Callable:
    """The kernel ``execute`` runs for a row without device kernels: its ``cuda`` expression
    first where that applies, else the row's kernel."""
    if row.cuda and xp is not np and cdt is odt and params == row.defaults:
        return _expr_kernel(row, odt)
    return row.kernel


# ---- the plain call: execute's decisions, kept per key --------------------------------
#
# For a call whose arguments are exact Tensors, Python numbers (int, float) or None, with
# no layer active, no out= and not in place, everything execute() decides before the
# kernel runs (the checks, the device, the promoted, compute and result dtypes, the shape
# rule's verdict, the casts, the kernel) depends only on the row, each input's type, dtype,
# device and shape, and the parameters' values. ``tensorplay._C.plain_call`` asks ``_plan``
# once per such key and then runs the kernel on the inputs' arrays, wraps the result and
# records autograd directly (twin: ``call``, which decides anew every time). Calls whose
# route depends on more than the key get no plan: numbers checked by value
# (``scalar_check``), float16/bfloat16 math in float32, a 0-d CPU tensor next to CUDA
# tensors, inputs that need a cast, installed device kernels, views, meta tensors.


def _plan(row: OpDef, targs: tuple, params: dict):
    """``(kernel, xp, odt, device, converters, quiet, cpu_descr)`` for replaying this call
    (see above), or None when it must take the general path (which also raises any error
    the call has). ``converters[i]``: None passes input i as it is (a Tensor's array, a
    number the row does not cast, None), else a function of the number."""
    if row.kind in ("view", "tensor_op") or row.n_inputs == "seq" or row.device_kernels:
        return None
    items = list(targs)
    try:
        dev, promoted = _checked(row, items)
        if dev is META or (row.scalar_check and any(type(x) is not Tensor for x in items)):
            return None
        cdt, odt = row.dtype(promoted, params)
        if promoted is D.complex64 and odt is D.complex64:
            _no_complex_half(row, items)
        row.shape(*targs, **params)  # the call would raise its error: the general path does
    except Exception:  # noqa: BLE001 - execute raises it, with its own message
        return None
    if promoted in _HALF and cdt is not promoted:
        return None  # inputs round to float16/bfloat16 first (``_as_array``'s ``via``)
    xp = np if dev is CPU else _device.array_module(dev)
    cast = row.cast if row.cast is not None else range(len(targs))
    by_value = row.ufunc is not None  # (as execute's: rows with device kernels have no plan)
    converters = []
    for i, x in enumerate(targs):
        if type(x) is Tensor:
            if x.device is not dev or (i in cast and x.dtype is not cdt):
                return None
            converters.append(None)
        elif x is None or i not in cast:
            converters.append(None)
        else:
            # the number as execute hands it to the kernel
            converters.append(functools.partial(_as_array, xp, dt=cdt, dev=dev, by_value=by_value))
    quiet = row.may_warn and xp is np
    descr = odt.np if dev is CPU and not row.multi else None
    return (_kernel(row, xp, cdt, odt, params), xp, odt, dev, tuple(converters), quiet, descr)


def _plain_record(row, targs: tuple, params: dict, result):
    """The plain call's result, with its backward node when grad mode is on (some input
    requires grad: the caller checked)."""
    if autograd_hooks.needs_grad(targs):
        return autograd_hooks.record(row, targs, params, result)
    return result


def _forget_plans() -> None:
    """A row's kernels changed (``set_device_kernel``): decide every call anew."""
    if call is not _general_call:
        NATIVE.plain_forget()


# ---- per-device kernels of built-in ops (the interface tensorplay-kernels uses) ----------


def set_device_kernel(name: str, device_type: str, kernel: Callable | None) -> None:
    """Run ``kernel`` instead of the op-table kernel of op ``name`` on ``device_type``.

    ``kernel(xp, *arrays, **params)`` has the row kernel's signature: it gets the inputs
    as arrays of the device's array module (CuPy on CUDA), already promoted to the
    compute dtype, and returns the result array (or a tuple, for multi-output ops); it
    may return ``NotImplemented`` to hand a call (a dtype or layout it does not handle)
    back to the op-table kernel. Autograd, dtype rules, shapes, out= and in-place
    handling stay the op table's. ``kernel=None`` restores the op-table kernel.
    CPU kernels cannot be replaced (the CPU fast path runs numpy directly): define a
    custom op instead.
    """
    row = OPS.get(name)
    if row is None or row.kernel is None:
        known = sorted(n for n, r in OPS.items() if r.kernel is not None and n[0] != "_")
        hint = [n for n in known if n.startswith(name[:3])][:5]
        raise ValueError(
            f"set_device_kernel(): {name!r} is not a built-in op with a kernel"
            + (f"; did you mean one of {hint}?" if hint else "")
        )
    if device_type not in ("cuda",):
        raise ValueError(
            f"set_device_kernel({name!r}, device_type={device_type!r}): only 'cuda' kernels "
            "can be replaced; for other devices define a custom op (tensorplay.library)"
        )
    if kernel is None:
        row.device_kernels.pop(device_type, None)
    elif not callable(kernel):
        raise TypeError(f"set_device_kernel({name!r}): kernel must be callable or None")
    else:
        row.device_kernels[device_type] = kernel
    _forget_plans()


def get_device_kernel(name: str, device_type: str) -> Callable | None:
    """The kernel ``set_device_kernel`` installed for ``name`` on ``device_type``, or None."""
    row = OPS.get(name)
    return None if row is None else row.device_kernels.get(device_type)


def _device_kernel(row: OpDef, dev, arrays, params) -> Callable:
    """The kernel to run: the installed one, unless it declines the call."""
    custom = row.device_kernels.get(dev.type)
    if custom is None:
        return row.kernel

    def run(xp, *arrays, **params):
        r = custom(xp, *arrays, **params)
        return row.kernel(xp, *arrays, **params) if r is NotImplemented else r

    return run


# Argument types that never implement __tensorplay_function__ (the cheap pre-check).
_SIMPLE = frozenset(
    {Tensor, int, float, bool, complex, str, type(None), D.dtype, slice, type(...), _device.device}
)


def _unusual(targs: tuple, params: dict) -> bool:
    """Some argument (or element of a list/tuple argument) is not a Tensor, number, ..."""
    for x in targs:
        if type(x) is not Tensor and type(x) not in _SIMPLE and _unusual_seq(x):
            return True
    for x in params.values():
        if type(x) not in _SIMPLE and _unusual_seq(x):
            return True
    return False


def _unusual_seq(x) -> bool:
    if type(x) is not list and type(x) is not tuple:
        return True
    return any(type(y) not in _SIMPLE for y in x)


# Kernels run with numpy's floating-point warnings off: torch returns inf/nan silently
# (log(0), 0/0). ``np.errstate(all="ignore")`` builds numpy's error state anew on every
# entry (~1.2 µs, a tenth of a general-path call); errstate is a set/reset of the context
# variable numpy keeps that state in, so setting it to one quiet state built here does
# the same for ~0.2 µs. (errstate would keep the caller's ``seterrcall`` handler and buffer
# size; neither changes a result when every error is ignored.)
try:
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
except ImportError:  # a numpy that moved them: the public way
    _extobj_contextvar = _QUIET_STATE = None

    def _quiet_on():
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def _quiet_off(state) -> None:
        state.__exit__(None, None, None)

else:
    _QUIET_STATE = _make_extobj(all="ignore")

    def _quiet_on():
        """Silence numpy's floating-point warnings; returns what ``_quiet_off`` restores."""
        return _extobj_contextvar.set(_QUIET_STATE)

    _quiet_off = _extobj_contextvar.reset


def _raw(x, row, i):
    if isinstance(x, Tensor):
        return x._data
    return x


def _meta_result(row, shape, odt):
    if row.multi:
        odts = odt if isinstance(odt, tuple) else (odt,) * len(shape)
        return tuple(empty_tensor(s, d, META) for s, d in zip(shape, odts))
    return empty_tensor(shape, odt, META)


def _wrap_result(row, r, odt, dev):
    if row.multi:
        odts = odt if isinstance(odt, tuple) else (odt,) * len(r)
        return tuple(_wrap_one(a, d, dev) for a, d in zip(r, odts))
    return _wrap_one(r, odt, dev)


def _wrap_one(r, odt: D.dtype, dev):
    if dev is CPU:
        r = np.asarray(r)
        if r.dtype != odt.np:
            if odt in _HALF:
                with np.errstate(over="ignore"):  # float32 math rounding to float16 overflows
                    r = r.astype(odt.np)
            else:
                r = r.astype(odt.np)
    else:
        if r.dtype != odt.np:
            r = r.astype(odt.np)
    return adopt_array(r, odt, dev)


def _call_view(row, targs, params):
    geo = row.shape(*targs, **params)
    src = targs[0]
    if geo is None:  # reshape-like row whose strides forbid a view: copy first
        src = src.contiguous()
        geo = row.shape(src, *targs[1:], **params)
    if row.multi:
        return tuple(make_view(src, *g) for g in geo)
    return make_view(src, *geo)


# ---- writing into existing tensors (out= and in-place) -------------------------------


def check_writable(name: str, t: Tensor):
    data = t._data
    if data is not None and not getattr(data.flags, "writeable", True):  # CuPy has no flag
        raise RuntimeError(
            f"{name}(): the tensor being written is read-only (it shares memory with a "
            "non-writable array, e.g. from tp.from_numpy of a read-only array); clone() it first"
        )
    st = t._stride
    if st is not None and any(s == 0 and n > 1 for s, n in zip(st, t._shape)):
        raise RuntimeError(
            f"{name}(): unsupported operation: more than one element of the written-to tensor "
            "refers to a single memory location (it is expanded); clone() it first"
        )


def _check_inplace(row, t: Tensor, shape, odt):
    check_writable(row.name + "_", t)
    if isinstance(row.inplace, str) and _CATS[t.dtype.category] not in row.inplace:
        raise RuntimeError(
            f"{row.name}_(): in-place {row.name} is not supported for {t.dtype.name} tensors; "
            f"use the out-of-place tp.{row.name}(x)"
        )
    if shape != t._shape:
        raise RuntimeError(
            f"{row.name}_(): output with shape {list(t._shape)} doesn't match the "
            f"broadcast shape {list(shape)}"
        )
    if not D.can_cast(odt, t.dtype):
        raise RuntimeError(
            f"{row.name}_(): result type {odt.name} can't be cast to the desired "
            f"output type {t.dtype.name}"
        )


def _write_inplace(row, t: Tensor, result: Tensor):
    if t._data is not None:
        t._data[...] = result._data
    t._bump_version()
    return t


def _write_out(row, out: Tensor, result):
    if not isinstance(out, Tensor):
        raise TypeError(f"{row.name}(): out= must be a Tensor, got {type(out).__name__}")
    if out.device is not result.device:
        raise RuntimeError(
            f"{row.name}(): out= is on {out.device} but the result is on {result.device}"
        )
    if not D.can_cast(result.dtype, out.dtype):
        raise RuntimeError(
            f"{row.name}(): result type {result.dtype.name} can't be cast to the "
            f"desired output type {out.dtype.name}"
        )
    check_writable(row.name, out)
    if out._shape != result._shape:
        if out.numel() != 0:
            raise RuntimeError(
                f"{row.name}(): out= has shape {list(out._shape)} but the result "
                f"has shape {list(result._shape)}; pass an empty tensor to resize"
            )
        fresh = empty_tensor(result._shape, out.dtype, out.device)
        out.set_(fresh._storage, 0, result._shape)
    if out._data is not None:
        out._data[...] = result._data
    out._bump_version()
    return out


# ---- the fast path ------------------------------------------------------------------


def _fast_binary(uf, x, y, odt, name):
    """``uf(x, y)`` for same-dtype CPU arrays: one aligned allocation and one ufunc call."""
    shape = x.shape
    if shape != y.shape:
        shape = _meta.broadcast_shapes(shape, y.shape, op=name)
    r, buf, start = cpu_empty(shape, odt.np, math.prod(shape) * odt.itemsize)
    uf(x, y, out=r)
    return wrap_array(r, buf, start, odt)


def _fast_scalar(uf, x, y, odt):
    """``uf(x, y)`` for a floating CPU array and a Python number (which keeps x's dtype)."""
    r, buf, start = cpu_empty(x.shape, odt.np, x.size * odt.itemsize)
    uf(x, y, out=r)
    return wrap_array(r, buf, start, odt)


def _fast_unary(uf, x, odt):
    r, buf, start = cpu_empty(x.shape, odt.np, x.size * odt.itemsize)
    uf(x, out=r)
    return wrap_array(r, buf, start, odt)


def _cuda_fast(row, arrays: tuple, odt, dev):
    """A ufunc row on CUDA arrays of one dtype (or one and a Python number): the row's kernel
    (which may differ from the bare ufunc on CuPy) and the wrap, without the general path's
    checks (the template made them)."""
    if len(arrays) == 2:
        a, b = arrays
        if not hasattr(b, "shape"):
            # a Python number, computed in a's dtype as torch does (rows that do not cast
            # their second input, the logical ops, take the number as it is)
            if row.cast is None or 1 in row.cast:
                arrays = (a, a.dtype.type(b))
        elif a.shape != b.shape:
            _meta.broadcast_shapes(a.shape, b.shape, op=row.name)  # torch's error
    r = _cuda_expr(row, arrays, odt)
    if r is None:
        r = row.kernel(_device.cupy_or_raise(), *arrays)
    if r.dtype != odt.np:
        r = r.astype(odt.np)
    if _adopt_cuda is not None:
        t = _adopt_cuda(r, odt, dev)
        if t is not None:
            return t
    return adopt_array(r, odt, dev)


# tensorplay._C.adopt_cuda: adopt_array's CUDA branch in C (None where it declines)
_adopt_cuda = getattr(NATIVE, "adopt_cuda", None)


@functools.cache
def _expr_kernel(row: OpDef, odt) -> Callable:
    """The row's kernel, with its ``cuda`` expression first where that applies."""

    def run(xp, *arrays, **params):
        r = _cuda_expr(row, arrays, odt)
        return row.kernel(xp, *arrays, **params) if r is None else r

    return run


def _cuda_expr(row, arrays, odt, out=None):
    """The row's ``cuda`` expression as one vectorised kernel, or None where it does not
    apply (no expression, a kernel set with ``set_device_kernel``, another dtype, a layout
    ``_cuda_pointwise`` does not cover)."""
    if not row.cuda or row.device_kernels or getattr(arrays[0], "dtype", odt.np) != odt.np:
        return None
    return _cuda_pointwise.run(row.cuda, arrays, out, 0 if row.cuda_fused else None)


def _fast_record(row, targs, result):
    """The fast path's result, with its backward node when an input requires grad (the fast
    path runs only with the parameters at their defaults)."""
    return _plain_record(row, targs, row.defaults, result)


def _fast_dtypes(row: OpDef) -> dict:
    """dtype -> output dtype for same-dtype inputs that need no cast (fast path)."""
    table = {}
    for d in D.ALL:
        if d in (D.float16, D.bfloat16) or _CATS[d.category] not in row.allow:
            continue
        try:
            cdt, odt = row.dtype(d, {})
        except RuntimeError:
            continue
        if cdt is d:
            table[d] = odt
    return table


# ---- code generation: one Python function per row ------------------------------------

# A Python number beyond this (or NaN) leaves the fast path: the general path raises for
# ints past int64 (as torch does) and turns floats past float32's range into inf without
# the warning numpy would give. (tensorplay._C uses the same bound.)
_LIMIT = 9.2e18

_BINARY_FAST = """
    if out is None and type({a}) is _T and _st.plain{defaults} and {a}.device is _cpu:
        if type({b}) is _T:
            if {b}.device is _cpu and {a}.dtype is {b}.dtype:
                odt = _fast.get({a}.dtype)
                if odt is not None:
                    r = _fast_binary(_uf, {a}._data, {b}._data, odt, {name!r})
                    if {a}.requires_grad or {b}.requires_grad:
                        return _fast_record(_row, ({a}, {b}), r)
                    return r
        elif (
            (type({b}) is float or type({b}) is int)
            and {a}.dtype.is_floating_point
            and -_LIMIT < {b} < _LIMIT
        ):
            odt = _fast.get({a}.dtype)
            if odt is not None:
                r = _fast_scalar(_uf, {a}._data, {b}, odt)
                return _fast_record(_row, ({a}, {b}), r) if {a}.requires_grad else r
"""

# The same calls on CUDA (no device kernel registered for the row): the row's kernel on
# CuPy, called directly.
_BINARY_FAST_CUDA = """
    if (out is None and type({a}) is _T and _st.plain{defaults} and {a}.device.type == "cuda"
            and not _row.device_kernels):
        if type({b}) is _T:
            if {b}.device is {a}.device and {a}.dtype is {b}.dtype:
                odt = _fast.get({a}.dtype)
                if odt is not None:
                    r = _cuda_fast(_row, ({a}._data, {b}._data), odt, {a}.device)
                    if {a}.requires_grad or {b}.requires_grad:
                        return _fast_record(_row, ({a}, {b}), r)
                    return r
        elif (
            (type({b}) is float or type({b}) is int)
            and {a}.dtype.is_floating_point
            and -_LIMIT < {b} < _LIMIT
        ):
            odt = _fast.get({a}.dtype)
            if odt is not None:
                r = _cuda_fast(_row, ({a}._data, {b}), odt, {a}.device)
                return _fast_record(_row, ({a}, {b}), r) if {a}.requires_grad else r
"""

_UNARY_FAST_CUDA = """
    if (out is None and type({a}) is _T and _st.plain{defaults} and {a}.device.type == "cuda"
            and not _row.device_kernels):
        odt = _fast.get({a}.dtype)
        if odt is not None:
            r = _cuda_fast(_row, ({a}._data,), odt, {a}.device)
            return _fast_record(_row, ({a},), r) if {a}.requires_grad else r
"""

_UNARY_FAST = """
    if out is None and type({a}) is _T and _st.plain{defaults} and {a}.device is _cpu:
        odt = _fast.get({a}.dtype)
        if odt is not None:
            r = _fast_unary(_uf, {a}._data, odt)
            return _fast_record(_row, ({a},), r) if {a}.requires_grad else r
"""


# In place on a plain CPU tensor that owns its memory (no view, no autograd): one ufunc call
# writing into self (``leaf.grad.add_(g)`` in every backward, optimizer updates). A
# read-only or non-broadcastable target makes numpy raise ValueError before writing; the
# general path then raises the explained error.
_INPLACE_FAST = """
    if (type(self) is _T and _st.plain{defaults} and self.device is _cpu and self._base is None
            and self._stride is None and (not self.requires_grad or not _gm.enabled)
            and _fast.get(self.dtype) is self.dtype):
        o = {b}
        if type(o) is _T:
            ok = (o.device is _cpu and o.dtype is self.dtype
                  and (not o.requires_grad or not _gm.enabled))
            o = o._data if ok else None
        elif not (
            (type(o) is float or type(o) is int)
            and self.dtype.is_floating_point
            and -_LIMIT < o < _LIMIT
        ):
            o = None
        if o is not None:
            d = self._data
            try:
                _uf(d, o, out=d)
            except ValueError:
                pass
            else:
                self._storage._version += 1
                return self
"""

# The same on CUDA (an optimizer's ``p -= lr * p.grad``): the number is taken in self's dtype
# first, as the general path does, so CuPy computes in that dtype; operands of another
# shape take the general path, which explains a shape that does not broadcast.
_INPLACE_FAST_CUDA = """
    if (type(self) is _T and _st.plain{defaults} and self.device.type == "cuda"
            and not _row.device_kernels and self._base is None and self._stride is None
            and (not self.requires_grad or not _gm.enabled)
            and _fast.get(self.dtype) is self.dtype):
        d = self._data
        o = {b}
        if type(o) is _T:
            ok = (o.device is self.device and o.dtype is self.dtype and o._shape == self._shape
                  and (not o.requires_grad or not _gm.enabled))
            o = o._data if ok else None
        elif (
            (type(o) is float or type(o) is int)
            and self.dtype.is_floating_point
            and -_LIMIT < o < _LIMIT
        ):
            o = d.dtype.type(o)
        else:
            o = None
        if o is not None:
            if _cuda_expr(_row, (d, o), self.dtype, d) is None:
                _cuda_ufunc(d, o, out=d)
            self._storage._version += 1
            return self
"""

# Full reductions (``loss.sum()``, ``x.mean()``, the last forward op before every
# backward): the kernel on the input's array, no promotion, no device or scalar checks.
_REDUCE_FAST_ROWS = frozenset({"sum", "mean"})


def _full_mean(a):
    return np.add.reduce(a, axis=None) / a.size  # as the row's kernel: sum / count


# their kernels on a whole numpy array (np.sum is a Python wrapper around add.reduce)
_FULL_REDUCE = {"sum": functools.partial(np.add.reduce, axis=None), "mean": _full_mean}
_REDUCE_FAST = """
    if (type(input) is _T and _st.plain and dim is None and not keepdim and dtype is None
            and out is None and input.device is _cpu):
        odt = _fast.get(input.dtype)
        if odt is not None:
            quiet = _quiet_on()  # torch is silent about inf/nan (empty mean)
            try:
                r = _wrap_one(_full(input._data), odt, _cpu)
            finally:
                _quiet_off(quiet)
            return _fast_record(_row, (input,), r) if input.requires_grad else r
"""

# Views need no dtype, device or kernel work: without a layer the general path would only
# add its checks (~3 µs) around the same _call_view and the same recording (execute's view
# branch).
_VIEW_FAST = """
    if type({a}) is _T and _st.plain:
        try:
            r = _call_view(_row, {targs}, {kw})
        except TypeError:
            pass  # an argument of another type: the general path asks its handler or raises
        else:
            return _plain_record(_row, {targs}, {kw}, r) if {a}.requires_grad else r
"""


def _param_names(params: str):
    """(all names, names of tensor inputs, non-input names with defaults) of ``params``."""
    names, defaults, star = [], {}, None
    for p in (s.strip() for s in params.split(",")):
        if not p or p == "*":
            continue
        if p.startswith("*"):
            star = p[1:]
            names.append(p)
            continue
        name, _, default = p.partition("=")
        names.append(name.strip())
        if default:
            defaults[name.strip()] = default.strip()
    return names, defaults, star


# ufuncs whose everyday inputs (log(0), 1/0, exp(100)) make numpy warn: torch stays silent,
# so they take the general path, which runs kernels under np.errstate (~1 µs, too slow
# for the fast path).
_WARNS = frozenset(
    {
        "true_divide",
        "sqrt",
        "log",
        "log2",
        "log10",
        "log1p",
        "arcsin",
        "arccos",
        "reciprocal",
        "exp",
        "exp2",
        "expm1",
        "sinh",
        "cosh",
    }
)


def register(row: OpDef) -> OpDef:
    """Add ``row`` to ``OPS``; its public function is generated when first used."""
    _, defaults, _ = _param_names(row.params)
    inputs, rest, _ = _split_params(row)
    row.defaults = {n: eval(defaults[n]) for n in rest if n in defaults}  # noqa: S307 - table literals
    if (row.ufunc and row.n_inputs in (1, 2) and row.ufunc not in _WARNS) or (
        row.name in _REDUCE_FAST_ROWS
    ):
        row.fast = _fast_dtypes(row)
    # np.errstate costs ~1 µs a call: only kernels that are not plain quiet ufuncs get it
    row.may_warn = not (
        row.ufunc and row.ufunc not in _WARNS and row.kernel is not None and row.kind != "view"
    )
    OPS[row.name] = row
    return row


def _split_params(row: OpDef):
    """(tensor-input names, other parameter names, the ``*name`` parameter or None)."""
    names, _, star = _param_names(row.params)
    plain = [n for n in names if not n.startswith("*")]
    if row.n_inputs == "star":
        inputs = [star]
    else:
        inputs = plain[: 1 if row.n_inputs == "seq" else row.n_inputs]
    rest = [n for n in plain if n not in inputs] + ([star] if star and star not in inputs else [])
    return inputs, rest, star


def _base_env(row: OpDef) -> dict:
    """The names every generated binding of ``row`` (function or in-place method) uses."""
    return {
        "_row": row,
        "_call": call,
        "_T": Tensor,
        "_st": state,
        "_cpu": CPU,
        "_fast": row.fast,
        "_uf": getattr(np, row.ufunc) if row.ufunc else None,
        "_LIMIT": _LIMIT,
        "_gm": autograd_hooks.grad_state,  # grad_mode.state
    }


class _LazyCupyUfunc:
    """CuPy's ufunc ``name``, looked up on the first call (CuPy is imported only when a CUDA
    tensor exists)."""

    __slots__ = ("name", "fn")

    def __init__(self, name: str):
        self.name, self.fn = name, None

    def __call__(self, *args, **kwargs):
        if self.fn is None:
            self.fn = getattr(_device.cupy_or_raise(), self.name)
        return self.fn(*args, **kwargs)


def _default_checks(row: OpDef, defaults: dict, rest: list) -> str:
    """The fast path's test that the non-input parameters have their defaults. An int
    default also needs an int: ``alpha=True`` equals 1 but is checked by the general path."""
    return "".join(
        f" and {n} == {v}" + (f" and type({n}) is int" if type(row.defaults[n]) is int else "")
        for n, v in defaults.items()
        if n in rest
    )


def _generate(row: OpDef) -> Callable:
    inputs, rest, star = _split_params(row)
    _, defaults, _ = _param_names(row.params)
    sig = row.params + (", out=None" if row.out else "")
    if row.n_inputs == "star":
        targs = star
    else:
        targs = "(" + ", ".join(inputs) + ("," if len(inputs) == 1 else "") + ")"
    kw = "{" + ", ".join(f"{n!r}: {n}" for n in rest) + "}"
    body = ""
    if row.kind == "view" and row.n_inputs == 1:
        body = _VIEW_FAST.format(a=inputs[0], targs=targs, kw=kw)
    elif row.name in _REDUCE_FAST_ROWS:
        body = _REDUCE_FAST
    elif row.fast:
        extra = _default_checks(row, defaults, rest)
        binary = row.n_inputs == 2
        tmpl = _BINARY_FAST + _BINARY_FAST_CUDA if binary else _UNARY_FAST + _UNARY_FAST_CUDA
        body = tmpl.format(a=inputs[0], b=inputs[-1], defaults=extra, name=row.name)
        if not row.out:
            body = body.replace("out is None and ", "")
    out_arg = "out" if row.out else "None"
    src = f"def {row.name}({sig}):\n{body}    return _call(_row, {targs}, {kw}, {out_arg})\n"
    env = {
        **_base_env(row),
        "_fast_binary": _fast_binary,
        "_fast_unary": _fast_unary,
        "_fast_scalar": _fast_scalar,
        "_fast_record": _fast_record,
        "_cuda_fast": _cuda_fast,
        "_call_view": _call_view,
        "_plain_record": _plain_record,
        "_wrap_one": _wrap_one,
        "_quiet_on": _quiet_on,
        "_quiet_off": _quiet_off,
        "_full": _FULL_REDUCE.get(row.name),
    }
    exec(compile(src, f"<tensorplay op {row.name}>", "exec"), env)  # noqa: S102 - generated binding
    fn = env[row.name]
    fn.__doc__ = row.doc or f"tensorplay.{row.name}({sig})"
    fn.__module__ = "tensorplay"
    return native_fast(row, fn)


def native_fast(row: OpDef, fn: Callable, public: Callable | None = None) -> Callable:
    """``fn`` behind ``tensorplay._C.FastOp`` when the row has a fast path and ``_C`` is
    loaded: the native object runs the same fast path as ``fn``'s template (same checks,
    same kernel) and hands every other call to ``fn``. ``public`` is the function
    function modes see (default: the returned object itself)."""
    if NATIVE is None or not row.fast or not row.ufunc:
        return fn
    table = {d: (odt, odt.np, d.is_floating_point) for d, odt in row.fast.items()}
    nin = 2 if row.n_inputs == 2 else 1
    mode_call = getattr(overrides_hook, "mode_call", None)  # tensorplay.overrides, once loaded
    op = NATIVE.FastOp(fn, getattr(np, row.ufunc), table, row, _fast_record, nin, mode_call, public)
    for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
        setattr(op, attr, getattr(fn, attr))
    op.__wrapped__ = fn  # inspect.signature() and the overrides see the Python signature
    return op


def _generate_inplace(row: OpDef) -> Callable:
    inputs, rest, _ = _split_params(row)
    _, defaults, _ = _param_names(row.params)
    sig = row.params.replace(inputs[0], "self", 1)
    targs = "(" + ", ".join(["self"] + inputs[1:]) + ("," if len(inputs) == 1 else "") + ")"
    kw = "{" + ", ".join(f"{n!r}: {n}" for n in rest) + "}"
    body = ""
    if row.fast and row.n_inputs == 2:
        extra = _default_checks(row, defaults, rest)
        body = (_INPLACE_FAST + _INPLACE_FAST_CUDA).format(defaults=extra, b=inputs[1])
    src = f"def {row.name}_({sig}):\n{body}    return _call(_row, {targs}, {kw}, None, self)\n"
    env = {**_base_env(row), "_cuda_expr": _cuda_expr, "_cuda_ufunc": _LazyCupyUfunc(row.ufunc)}
    exec(compile(src, f"<tensorplay op {row.name}_>", "exec"), env)  # noqa: S102
    fn = env[row.name + "_"]
    fn.__qualname__ = "Tensor." + row.name + "_"
    return fn


# ``call`` becomes the native plain call (see _plan) where _C is built, set up once
# everything it calls exists; it hands every call it does not replay to the Python ``call``
# (``_general_call``), which every module importing ``call`` gets otherwise.
_general_call = call
if NATIVE is not None and hasattr(NATIVE, "plain_call"):
    NATIVE.init_plain(
        fallback=_general_call,
        plan=_plan,
        wrap=_wrap_result,
        record=_plain_record,
        row_type=OpDef,
        dtype_type=D.dtype,
        quiet=(_extobj_contextvar, _QUIET_STATE) if _QUIET_STATE is not None else None,
    )
    call = NATIVE.plain_call  # noqa: F811 - the same function, its hot path in C
    # the generated fast paths (made after this module) record through C as well; the
    # Python functions above stay the twins (and plain_call's fallback for what C declines)
    _plain_record_py, _fast_record_py = _plain_record, _fast_record
    _plain_record = NATIVE.plain_record  # noqa: F811
    _fast_record = NATIVE.fast_record  # noqa: F811
