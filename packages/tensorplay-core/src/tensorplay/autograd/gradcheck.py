"""``gradcheck`` / ``gradgradcheck``: analytical gradients against finite differences.

Both follow PyTorch (same arguments, defaults, checks and messages):

* the *numerical* Jacobian perturbs each element of each input that requires grad
  by ``±eps`` (central differences), writing straight into the input's memory and
  restoring it exactly afterwards (no version bump, like writing through ``.data``);
* the *analytical* Jacobian is built one output element at a time with
  ``tp.autograd.grad`` and one-hot ``grad_outputs`` (``retain_graph=True``);
* they must agree within ``allclose(analytical, numerical, rtol, atol)``, otherwise a
  ``GradcheckError`` names the output and input and shows both Jacobians.

A Jacobian for input ``j`` and output ``i`` is laid out as in PyTorch: shape
``(input_j.numel(), output_i.numel())``. Complex inputs use the conjugate Wirtinger
convention (``d/dx + 1j d/dy``); complex outputs are checked as their real part and
then their imaginary part. ``fast_mode`` checks the projection ``vᵀ J u`` for random
``u``, ``v`` instead of full Jacobians (and recomputes the full ones for the error
message when it fails).
"""

from __future__ import annotations

import warnings

import numpy as np

from tensorplay import _device
from tensorplay._dtype import float64
from tensorplay._factories import rand, randn_like, tensor, zeros
from tensorplay._tensor import Tensor
from tensorplay.autograd import engine, forward_ad
from tensorplay.autograd._derivatives import stack
from tensorplay.autograd.function import BackwardCFunction
from tensorplay.autograd.graph import edge_of

__all__ = [
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
    "get_numerical_jacobian",
    "get_analytical_jacobian",
]


class GradcheckError(RuntimeError):
    """Raised by ``gradcheck``/``gradgradcheck`` when a check fails."""


# ---- small helpers ----------------------------------------------------------------------------


def _as_tuple(x) -> tuple:
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _is_float_or_complex(t) -> bool:
    return isinstance(t, Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)


def _differentiable_outputs(out) -> tuple:
    return tuple(o for o in _as_tuple(out) if isinstance(o, Tensor) and o.requires_grad)


def _diff_inputs(inputs) -> list:
    return [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]


def _host(t) -> np.ndarray:
    """A host (numpy) copy of a tensor's values."""
    return np.array(t.detach().cpu().numpy(), copy=True)


def _show(a: np.ndarray):
    """A Jacobian for an error message, printed as a tensor (like PyTorch's)."""
    return tensor(a)


def _allclose(a, n, rtol, atol) -> bool:
    a, n = np.asarray(a), np.asarray(n)
    if a.shape != n.shape:
        return False
    return bool(np.allclose(a, n, rtol=rtol, atol=atol, equal_nan=True))


def _notallclose_msg(a, n, out_idx, in_idx, complex_out, complex_in, test_imag, forward):
    part = "imaginary" if test_imag else "real"
    prefix = ""
    if (not forward and complex_out) or (forward and complex_in):
        prefix = (
            f"While considering the {part} part of complex {'inputs' if forward else 'outputs'} "
            "only, "
        )
    mode = "computed with forward mode " if forward else ""
    return (
        prefix + f"Jacobian {mode}mismatch for output {out_idx:d} with respect to input "
        f"{in_idx:d},\nnumerical:{_show(n)}\nanalytical:{_show(a)}\n"
    )


def _check_inputs(inputs) -> None:
    any_requires_grad = False
    for idx, inp in enumerate(inputs):
        if isinstance(inp, Tensor) and inp.requires_grad:
            if inp.dtype.name not in ("float64", "complex128"):
                warnings.warn(
                    f"Input #{idx} requires gradient and is not a double precision floating "
                    "point or complex. This check will likely fail if all the inputs are not "
                    "of double precision floating point or complex. ",
                    UserWarning,
                    stacklevel=3,
                )
            if not all(st > 0 or sz <= 1 for st, sz in zip(inp.stride(), inp.shape)):
                raise RuntimeError(
                    f"The {idx}th input has a dimension with stride 0. gradcheck only "
                    "supports inputs that are non-overlapping to be able to "
                    "compute the numerical gradients correctly. You should call "
                    ".contiguous on the input before passing it to gradcheck."
                )
            any_requires_grad = True
    if not any_requires_grad:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, "
            "but none of the them have requires_grad=True."
        )


# ---- the numerical side -------------------------------------------------------------------


def _evaluate(func, inputs, part):
    """``func(*inputs)``'s tensor outputs as flat host arrays (``part`` picks the real or
    imaginary part of complex outputs; ``None`` keeps them complex)."""
    outs = _as_tuple(func(*inputs))  # grad mode as is: gradgradcheck's func runs backward
    res = []
    for o in outs:
        if not isinstance(o, Tensor):
            continue
        a = _host(o).reshape(-1)
        if np.iscomplexobj(a) and part is not None:
            a = a.imag if part == "imag" else a.real
        if a.dtype.kind in "biu":
            a = a.astype(np.float64)
        res.append(a)
    return res


def _perturbed_jvp(func, inputs, inp, direction, eps, part):
    """Central difference of every output along ``direction`` (an array shaped like ``inp``,
    already scaled by ``eps``, or ``(index, delta)`` for a single element)."""
    arr = inp.detach()._data  # the input's own memory (a strided view)
    if not isinstance(arr, np.ndarray):  # CuPy: move the direction to the device
        xp = _device.array_module(inp.device)
        direction = (
            (direction[0], xp.asarray(direction[1]))
            if isinstance(direction, tuple)
            else xp.asarray(direction)
        )
    if isinstance(direction, tuple):
        idx, delta = direction
        orig = arr[idx].copy()
        arr[idx] = orig - delta
        outa = _evaluate(func, inputs, part)
        arr[idx] = orig + delta
        outb = _evaluate(func, inputs, part)
        arr[idx] = orig
    else:
        orig = arr.copy()
        arr[...] = orig - direction
        outa = _evaluate(func, inputs, part)
        arr[...] = orig + direction
        outb = _evaluate(func, inputs, part)
        arr[...] = orig
    res = []
    for a, b in zip(outa, outb):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise GradcheckError("Expected output shapes and dtypes to match under perturbation")
        res.append((b - a) / (2 * eps))
    return res


def _xp_scalar(inp, value):
    """``value`` as the input's element type (so a complex delta stays complex)."""
    return np.asarray(value, dtype=inp.dtype.np)


def _numerical_jacobian(func, inputs, inp, eps, part, imag_direction=None):
    """Jacobians of every output w.r.t. ``inp``: a list over outputs of arrays shaped
    ``(inp.numel(), out.numel())``.

    Complex ``inp``: ``d/dx + 1j d/dy`` (conjugate Wirtinger), unless ``imag_direction`` is
    given (forward mode): then the derivative along ``1j`` (``True``) or ``1`` (``False``)."""
    cols = []
    complex_in = inp.dtype.is_complex
    for idx in np.ndindex(*inp.shape):
        if complex_in and imag_direction is None:
            ds_dx = _perturbed_jvp(func, inputs, inp, (idx, _xp_scalar(inp, eps)), eps, part)
            ds_dy = _perturbed_jvp(func, inputs, inp, (idx, _xp_scalar(inp, eps * 1j)), eps, part)
            cols.append([dx + 1j * dy for dx, dy in zip(ds_dx, ds_dy)])
        else:
            delta = eps * 1j if (complex_in and imag_direction) else eps
            cols.append(_perturbed_jvp(func, inputs, inp, (idx, _xp_scalar(inp, delta)), eps, part))
    n_out = len(cols[0]) if cols else len(_evaluate(func, inputs, part))
    if not cols:  # an input with no elements
        outs = _evaluate(func, inputs, part)
        return [np.zeros((0, o.size), dtype=o.dtype) for o in outs]
    return [np.stack([c[i] for c in cols]) for i in range(n_out)]


# ---- the analytical side ------------------------------------------------------------------


def _one_hot_like(o, k, value):
    g = zeros(o.shape, dtype=o.dtype, device=o.device)
    g.view(-1)[k] = value
    return g


def _analytical_columns(output, diff_inputs, part) -> tuple:
    """Jacobians of ``output`` w.r.t. each of ``diff_inputs``, one backward per output
    element: ``(jacobians, sizes_ok, types_ok)``, the flags False when a gradient had the
    wrong shape (its column is left zero) or another dtype than its input."""
    value = 1j if (part == "imag" and output.dtype.is_complex) else 1.0
    n_out = output.numel()
    jac = []
    for inp in diff_inputs:
        dt = np.complex128 if (inp.dtype.is_complex or output.dtype.is_complex) else np.float64
        jac.append(np.zeros((inp.numel(), n_out), dtype=dt))
    sizes_ok, types_ok = True, True
    for k in range(n_out):
        grads = engine.grad(
            [output],
            diff_inputs,
            [_one_hot_like(output, k, value)],
            retain_graph=True,
            allow_unused=True,
        )
        for j, (g, inp) in enumerate(zip(grads, diff_inputs)):
            if g is None:
                continue
            if tuple(g.shape) != tuple(inp.shape):
                sizes_ok = False
                continue
            if g.dtype is not inp.dtype:
                types_ok = False
            jac[j][:, k] = _host(g).reshape(-1)
    for j, inp in enumerate(diff_inputs):
        if not inp.dtype.is_complex and not output.dtype.is_complex:
            jac[j] = jac[j].real
    return jac, sizes_ok, types_ok


def _analytical_jacobian(output, diff_inputs, part, check_grad_dtypes):
    """``_analytical_columns``' Jacobians; a gradient of the wrong size (or dtype, with
    ``check_grad_dtypes``) is a ``GradcheckError``."""
    jac, sizes_ok, types_ok = _analytical_columns(output, diff_inputs, part)
    if not sizes_ok:
        raise GradcheckError("Analytical gradient has incorrect size")
    if not types_ok and check_grad_dtypes:
        raise GradcheckError("Gradient has dtype mismatch")
    return jac


def _reentrant(jac1, jac2, nondet_tol) -> bool:
    """Did two runs of backward agree within ``nondet_tol``?"""
    return all(not a.size or np.abs(a - b).max() <= nondet_tol for a, b in zip(jac1, jac2))


def _checked_analytical_jacobian(output, diff_inputs, part, nondet_tol, check_grad_dtypes):
    jac1 = _analytical_jacobian(output, diff_inputs, part, check_grad_dtypes)
    jac2 = _analytical_jacobian(output, diff_inputs, part, check_grad_dtypes)
    if not _reentrant(jac1, jac2, nondet_tol):
        raise GradcheckError(
            "Backward is not reentrant, i.e., running backward with same input and "
            "grad_output multiple times gives different values, although analytical "
            f"gradient matches numerical gradient.The tolerance for nondeterminism was "
            f"{nondet_tol}."
        )
    return jac1


# ---- slow mode ----------------------------------------------------------------------------


def _check_no_differentiable_outputs(func, inputs, eps):
    for inp in _diff_inputs(inputs):
        for jac in _numerical_jacobian(func, inputs, inp, eps, None):
            if jac.size and not np.all(jac == 0):
                raise GradcheckError("Numerical gradient for function expected to be zero")
    return True


def _output_positions(func_out) -> list:
    """Positions (among the tensor outputs) of the outputs that require grad."""
    tensors = [o for o in _as_tuple(func_out) if isinstance(o, Tensor)]
    return [i for i, o in enumerate(tensors) if o.requires_grad]


def _slow_backward(func, inputs, func_out, part, eps, rtol, atol, nondet_tol, check_grad_dtypes):
    outputs = _differentiable_outputs(func_out)
    diff_inputs = _diff_inputs(inputs)
    positions = _output_positions(func_out)
    numerical = [_numerical_jacobian(func, inputs, inp, eps, part) for inp in diff_inputs]
    for i, o in enumerate(outputs):
        analytical = _checked_analytical_jacobian(
            o, diff_inputs, part, nondet_tol, check_grad_dtypes
        )
        for j, a in enumerate(analytical):
            n = numerical[j][positions[i]]
            if not _allclose(a, n, rtol, atol):
                raise GradcheckError(
                    _notallclose_msg(
                        a, n, i, j, o.dtype.is_complex, False, part == "imag", forward=False
                    )
                )
    return True


def _forward_jvp(func, inputs, inp_pos, tangent, check_grad_dtypes):
    """Output tangents (flat host arrays, zeros where None) for one input's tangent."""
    with forward_ad.dual_level():
        args = []
        for p, x in enumerate(inputs):
            if p == inp_pos:
                x = forward_ad.make_dual(x.detach(), tangent)
            elif isinstance(x, Tensor) and x.requires_grad:
                x = x.detach()
            args.append(x)
        outs = [o for o in _as_tuple(func(*args)) if isinstance(o, Tensor)]
        res = []
        for o in outs:
            primal, t = forward_ad.unpack_dual(o)
            if t is None or not _is_float_or_complex(o):
                res.append(np.zeros(o.numel(), dtype=_host(primal).dtype))
                continue
            if check_grad_dtypes and t.dtype is not primal.dtype:
                raise GradcheckError("Forward AD gradient has dtype mismatch.")
            res.append(_host(t).reshape(-1))
        return res


def _slow_forward(func, inputs, func_out, eps, rtol, atol, check_grad_dtypes):
    positions = [p for p, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    n_outs = len([o for o in _as_tuple(func_out) if isinstance(o, Tensor)])
    for j, p in enumerate(positions):
        inp = inputs[p]
        directions = (False, True) if inp.dtype.is_complex else (False,)
        for imag in directions:
            numerical = _numerical_jacobian(func, inputs, inp, eps, None, imag_direction=imag)
            cols = []
            for k in range(inp.numel()):
                t = zeros(inp.shape, dtype=inp.dtype, device=inp.device)
                t.view(-1)[k] = 1j if imag else 1.0
                cols.append(_forward_jvp(func, inputs, p, t, check_grad_dtypes))
            for i in range(n_outs):
                n = numerical[i]
                a = np.stack([c[i] for c in cols]) if cols else np.zeros_like(n)
                if not _allclose(a, n, rtol, atol):
                    raise GradcheckError(
                        _notallclose_msg(a, n, i, j, False, inp.dtype.is_complex, imag, True)
                    )
    return True


# ---- fast mode --------------------------------------------------------------------------------


def _rand_unit(rng, n) -> np.ndarray:
    v = rng.random(n)
    norm = np.linalg.norm(v)
    return v / norm if norm > 0 else v


FAST_FAIL_SLOW_OK_MSG = """
Fast gradcheck failed but element-wise differences are small. This means that the
test might've passed in slow_mode!

If you are adding a new operator, please file an issue and then use one of the
workarounds. The workaround depends on how your test invokes gradcheck/gradgradcheck:

If the test
- manually invokes gradcheck/gradgradcheck, then call gradcheck/gradgradcheck
  with `fast_mode=False` as a keyword argument.
"""


def _slow_mode_details(func, inputs, func_out, part, i, j, eps, rtol, atol, forward):
    diff_inputs = _diff_inputs(inputs)
    inp = diff_inputs[j]
    if forward:
        numerical = _numerical_jacobian(func, inputs, inp, eps, None, imag_direction=part)[i]
        positions = [p for p, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
        cols = []
        for k in range(inp.numel()):
            t = zeros(inp.shape, dtype=inp.dtype, device=inp.device)
            t.view(-1)[k] = 1j if part else 1.0
            cols.append(_forward_jvp(func, inputs, positions[j], t, False)[i])
        analytical = np.stack(cols) if cols else np.zeros_like(numerical)
    else:
        positions = _output_positions(func_out)
        numerical = _numerical_jacobian(func, inputs, inp, eps, part)[positions[i]]
        out = _differentiable_outputs(func_out)[i]
        analytical = _analytical_jacobian(out, diff_inputs, part, False)[j]
    max_diff = np.abs(numerical - analytical).max() if numerical.size else 0.0
    msg = (
        "\nThe above quantities relating the numerical and analytical jacobians are computed \n"
        "in fast mode. See: https://github.com/pytorch/pytorch/issues/53876 for more "
        "background \nabout fast mode. Below, we recompute numerical and analytical jacobians "
        "in slow mode:\n\n"
        f"Numerical:\n {_show(numerical)}\n"
        f"Analytical:\n{_show(analytical)}\n\n"
        f"The max per-element difference (slow mode) is: {max_diff}.\n"
    )
    if _allclose(analytical, numerical, rtol, atol):
        msg += FAST_FAIL_SLOW_OK_MSG
    return msg


def _u_vectors(diff_inputs, rng) -> list:
    """One random unit direction per input: an array, or ``(ur, ui)`` for a complex input."""
    us = []
    for inp in diff_inputs:
        n = inp.numel()
        if inp.dtype.is_complex:
            us.append((_rand_unit(rng, n), _rand_unit(rng, n)))
        else:
            us.append(_rand_unit(rng, n))
    return us


def _direction(inp, u, eps, imag=False):
    """``eps * u`` shaped like ``inp`` (times ``1j`` for the imaginary direction)."""
    d = (u * eps).reshape(inp.shape)
    return (d * 1j if imag else d).astype(inp.dtype.np)


def _numerical_vJu(func, inputs, inp, u, vs, positions, eps, part):
    """``v_i · J_i u`` for each output ``i`` at ``positions``, by central differences."""
    if isinstance(u, tuple):
        ds_dx = _perturbed_jvp(func, inputs, inp, _direction(inp, u[0], eps), eps, part)
        ds_dy = _perturbed_jvp(func, inputs, inp, _direction(inp, u[1], eps, True), eps, part)
        ju = [dx + 1j * dy for dx, dy in zip(ds_dx, ds_dy)]
    else:
        ju = _perturbed_jvp(func, inputs, inp, _direction(inp, u, eps), eps, part)
    return [np.dot(vs[i], ju[p]) for i, p in enumerate(positions)]


def _adjusted_atol(atol, u, v) -> float:
    u = u[0] if isinstance(u, tuple) else u
    return atol * float(u.sum()) * float(1.0 if v is None else v.sum())


def _fast_backward(func, inputs, func_out, part, eps, rtol, atol, nondet_tol, check_grad_dtypes):
    rng = np.random.default_rng(67280421310721)
    outputs = _differentiable_outputs(func_out)
    diff_inputs = _diff_inputs(inputs)
    positions = _output_positions(func_out)
    us = _u_vectors(diff_inputs, rng)
    vs = [_rand_unit(rng, o.numel()) for o in outputs]
    numerical = [
        _numerical_vJu(func, inputs, inp, u, vs, positions, eps, part)
        for inp, u in zip(diff_inputs, us)
    ]
    for i, (o, v) in enumerate(zip(outputs, vs)):
        scale = 1j if (part == "imag" and o.dtype.is_complex) else 1.0
        vt = tensor(v.reshape(o.shape) * scale, dtype=o.dtype, device=o.device)
        results = []
        for _ in range(2):  # twice: backward must be reentrant
            grads = engine.grad([o], diff_inputs, [vt], retain_graph=True, allow_unused=True)
            row = []
            for g, inp, u in zip(grads, diff_inputs, us):
                if g is None:
                    row.append(0.0)
                    continue
                if tuple(g.shape) != tuple(inp.shape):
                    raise GradcheckError("Analytical gradient has incorrect size")
                if check_grad_dtypes and g.dtype is not inp.dtype:
                    raise GradcheckError("Gradient has dtype mismatch")
                gh = _host(g).reshape(-1)
                if isinstance(u, tuple):
                    row.append(np.dot(gh.real, u[0]) + 1j * np.dot(gh.imag, u[1]))
                else:
                    row.append(np.dot(gh, u))
            results.append(row)
        for a1, a2 in zip(*results):
            if not abs(a1 - a2) <= nondet_tol:
                raise GradcheckError(
                    "Backward is not reentrant, i.e., running backward with same input and "
                    "grad_output multiple times gives different values, although analytical "
                    "gradient matches numerical gradient.The tolerance for nondeterminism was "
                    f"{nondet_tol}."
                )
        for j, a in enumerate(results[0]):
            n = numerical[j][i]
            if not _allclose(a, n, rtol, _adjusted_atol(atol, us[j], v)):
                raise GradcheckError(
                    _notallclose_msg(
                        np.asarray(a),
                        np.asarray(n),
                        i,
                        j,
                        o.dtype.is_complex,
                        False,
                        part == "imag",
                        forward=False,
                    )
                    + _slow_mode_details(func, inputs, func_out, part, i, j, eps, rtol, atol, False)
                )
    return True


def _fast_forward(func, inputs, func_out, eps, rtol, atol, check_grad_dtypes):
    rng = np.random.default_rng(67280421310721)
    positions = [p for p, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    outs = [o for o in _as_tuple(func_out) if isinstance(o, Tensor)]
    vs = [_rand_unit(rng, o.numel()) for o in outs]
    for j, p in enumerate(positions):
        inp = inputs[p]
        u = _rand_unit(rng, inp.numel())
        for imag in (False, True) if inp.dtype.is_complex else (False,):
            num = _perturbed_jvp(func, inputs, inp, _direction(inp, u, eps, imag), eps, None)
            t = tensor(
                u.reshape(inp.shape) * (1j if imag else 1.0), dtype=inp.dtype, device=inp.device
            )
            ana = _forward_jvp(func, inputs, p, t, check_grad_dtypes)
            for i, v in enumerate(vs):
                a, n = np.dot(v, ana[i]), np.dot(v, num[i])
                if not _allclose(a, n, rtol, _adjusted_atol(atol, u, v)):
                    raise GradcheckError(
                        _notallclose_msg(
                            np.asarray(a),
                            np.asarray(n),
                            i,
                            j,
                            False,
                            inp.dtype.is_complex,
                            imag,
                            True,
                        )
                        + _slow_mode_details(
                            func, inputs, func_out, imag, i, j, eps, rtol, atol, True
                        )
                    )
    return True


# ---- extra backward checks --------------------------------------------------------------------


def _zeros_like(t):
    return zeros(t.shape, dtype=t.dtype, device=t.device)


def _is_all_zero(g) -> bool:
    return not bool(np.any(_host(g) != 0))


def _test_backward_mul_by_grad_output(outputs, inputs) -> bool:
    diff_inputs = _diff_inputs(inputs)
    grads = engine.grad(
        list(outputs),
        diff_inputs,
        [_zeros_like(o) for o in outputs],
        retain_graph=True,
        allow_unused=True,
    )
    for gi, di in zip(grads, diff_inputs):
        if gi is None:
            continue
        if not _is_all_zero(gi):
            raise GradcheckError("backward not multiplied by grad_output")
        if gi.dtype is not di.dtype or gi.device != di.device:
            raise GradcheckError("grad is incorrect type")
        if tuple(gi.shape) != tuple(di.shape):
            raise GradcheckError("grad is incorrect size")
    return True


_UNDEFINED_MSG = (
    'Please look at "Notes about undefined output gradients" in the autograd docs: a '
    "backward must treat a missing (None) gradient of an output as zeros."
)


def _test_undefined_backward_mode(func, inputs) -> bool:
    """Backward must cope with undefined (None) output gradients: each output's gradient
    left undefined in turn (the others zero), and all of them undefined at once."""
    diff_inputs = _diff_inputs(inputs)

    def check(outputs, grads):
        try:
            captured = engine.run(
                [edge_of(o) for o in outputs],
                grads,
                retain_graph=False,
                create_graph=False,
                capture=[edge_of(x) for x in diff_inputs],
            )
        except (RuntimeError, TypeError, AttributeError) as e:  # None used as a tensor
            raise GradcheckError(
                "Expected backward function to handle undefined output grads. " + _UNDEFINED_MSG
            ) from e
        for g in captured:
            if g is not None and not _is_all_zero(g):
                raise GradcheckError(
                    "Expected all input grads to be undefined or zero when all output grads "
                    "are undefined or zero. " + _UNDEFINED_MSG
                )

    outputs = _differentiable_outputs(func(*inputs))
    check(outputs, [None] * len(outputs))
    # The engine skips a node whose gradients are all undefined; a custom Function must
    # still cope when called that way (PyTorch's engine calls it): call its node directly.

    for node in {id(o.grad_fn): o.grad_fn for o in outputs}.values():
        if isinstance(node, BackwardCFunction):
            try:
                grads = node.apply([None] * node.n_outputs)
            except (RuntimeError, TypeError, AttributeError) as e:
                raise GradcheckError(
                    "Expected backward function to handle undefined output grads. " + _UNDEFINED_MSG
                ) from e
            for g in grads:
                if g is not None and not _is_all_zero(g):
                    raise GradcheckError(
                        "Expected all input grads to be undefined or zero when all output "
                        "grads are undefined or zero. " + _UNDEFINED_MSG
                    )
    if len(outputs) > 1:
        for undef in range(len(outputs)):
            outputs = _differentiable_outputs(func(*inputs))
            check(outputs, [None if i == undef else _zeros_like(o) for i, o in enumerate(outputs)])
    return True


_FAILED_BATCHED_GRAD_MSG = """gradcheck or gradgradcheck failed while testing batched gradient
computation: the {what} for a batch of {vectors}, computed in one pass under vmap, differ from the
{what} computed for each of them alone. The usual cause is a wrong batching rule of an op
on that path: a custom op's register_vmap rule, or the vmap staticmethod of an
autograd.Function that the derivative calls. Fix the rule, or pass {flag}=False to skip
this check."""


def _batched_mismatch(output_idx, input_idx, got, want, forward: bool) -> GradcheckError:
    msg = _batched_msg(forward)
    return GradcheckError(
        f"For output {output_idx} and input {input_idx}:\n\n{msg}\n\n"
        f"Got:\n{got}\n\nExpected:\n{want}"
    )


def _batched_msg(forward: bool) -> str:
    if forward:
        return _FAILED_BATCHED_GRAD_MSG.format(
            what="forward-mode tangents", vectors="tangents", flag="check_batched_forward_grad"
        )
    return _FAILED_BATCHED_GRAD_MSG.format(
        what="gradients", vectors="grad_outputs", flag="check_batched_grad"
    )


def _vmap():
    vmap = engine.vmap_transform
    if vmap is None:
        raise RuntimeError(
            "gradcheck(check_batched_grad=True): vmap is not loaded; import tensorplay first"
        )
    return vmap


def _test_batched_grad(inputs, output, output_idx) -> bool:
    """torch's check: the gradients for a batch of two random grad_outputs, computed in one
    backward pass under vmap (``grad(..., is_grads_batched=True)``), equal the gradients
    computed for each grad_output alone."""
    diff_inputs = _diff_inputs(inputs)

    def vjp(g):
        res = engine.grad([output], diff_inputs, [g], retain_graph=True, allow_unused=True)
        return [_zeros_like(x) if r is None else r for r, x in zip(res, diff_inputs)]

    batch = [randn_like(output) for _ in range(2)]
    expected = [stack(col) for col in zip(*(vjp(g) for g in batch))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rows without a batching rule loop (and warn): as right
        try:
            got = engine.grad(
                [output],
                diff_inputs,
                [stack(batch)],
                retain_graph=True,
                allow_unused=True,
                is_grads_batched=True,
            )
        except RuntimeError as e:
            raise GradcheckError(
                f"While computing batched gradients, got: {e}\n\n{_batched_msg(False)}"
            ) from e
    for j, (g, want) in enumerate(zip(got, expected)):
        g = zeros(want.shape, dtype=want.dtype, device=want.device) if g is None else g
        if not _allclose(_host(g), _host(want), 1e-5, 1e-8):
            raise _batched_mismatch(output_idx, j, g, want, forward=False)
    return True


def _test_batched_forward_grad(func, inputs) -> bool:
    """torch's check for forward mode: the output tangents for a batch of two random
    tangents of one input, computed in one pass under vmap, equal those computed for each
    tangent alone."""
    for i, current in enumerate(inputs):
        if not (isinstance(current, Tensor) and current.requires_grad):
            continue
        if not _is_float_or_complex(current):
            continue

        def jvp(tangent, i=i, current=current):
            with forward_ad.dual_level():
                dual = forward_ad.make_dual(current.detach(), tangent)
                args = tuple(
                    dual if k == i else (x.detach() if isinstance(x, Tensor) else x)
                    for k, x in enumerate(inputs)
                )
                outs = _as_tuple(func(*args))
                tangents = []
                for o in outs:
                    if not isinstance(o, Tensor):
                        continue
                    primal, t = forward_ad.unpack_dual(o)
                    tangents.append(_zeros_like(primal) if t is None else t)
                return tuple(tangents)

        batch = [randn_like(current) for _ in range(2)]
        expected = [stack(col) for col in zip(*(jvp(t) for t in batch))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                got = _vmap()(jvp)(stack(batch))
            except RuntimeError as e:
                raise GradcheckError(
                    f"While computing batched gradients, got: {e}\n\n{_batched_msg(True)}"
                ) from e
        for o, (g, want) in enumerate(zip(got, expected)):
            if not _allclose(_host(g), _host(want), 1e-5, 1e-8):
                raise _batched_mismatch(o, i, g, want, forward=True)
    return True


# ---- entry points -----------------------------------------------------------------------------


def _gradcheck_helper(
    func,
    inputs,
    eps,
    atol,
    rtol,
    nondet_tol,
    check_undefined_grad,
    check_grad_dtypes,
    check_batched_grad,
    check_batched_forward_grad,
    check_backward_ad,
    check_forward_ad,
    fast_mode,
):
    tupled_inputs = _as_tuple(inputs)
    _check_inputs(tupled_inputs)
    func_out = func(*tupled_inputs)
    outputs = _differentiable_outputs(func_out)
    if not outputs:
        return _check_no_differentiable_outputs(func, tupled_inputs, eps)
    has_complex_out = any(o.dtype.is_complex for o in outputs)
    if check_backward_ad:
        parts = ("imag", "real") if has_complex_out else ("real",)
        for part in parts:
            if fast_mode:
                _fast_backward(
                    func,
                    tupled_inputs,
                    func_out,
                    part,
                    eps,
                    rtol,
                    atol,
                    nondet_tol,
                    check_grad_dtypes,
                )
            else:
                _slow_backward(
                    func,
                    tupled_inputs,
                    func_out,
                    part,
                    eps,
                    rtol,
                    atol,
                    nondet_tol,
                    check_grad_dtypes,
                )
    if check_forward_ad:
        if fast_mode:
            _fast_forward(func, tupled_inputs, func_out, eps, rtol, atol, check_grad_dtypes)
        else:
            _slow_forward(func, tupled_inputs, func_out, eps, rtol, atol, check_grad_dtypes)
        if check_batched_forward_grad:
            _test_batched_forward_grad(func, tupled_inputs)
    if check_backward_ad:
        if check_batched_grad:
            for i, o in enumerate(outputs):
                _test_batched_grad(tupled_inputs, o, i)
        _test_backward_mul_by_grad_output(outputs, tupled_inputs)
        if check_undefined_grad:
            _test_undefined_backward_mode(func, tupled_inputs)
    return True


def gradcheck(
    func,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """Check the gradients of ``func`` at ``inputs`` against finite differences.

    ``func`` takes ``*inputs`` (a tensor or a tuple; non-tensors are passed through) and
    returns a tensor or a tuple of tensors. Returns True, or raises ``GradcheckError``
    (returns False with ``raise_exception=False``). Use float64/complex128 inputs.
    ``check_batched_grad``: also compute the gradients for a batch of grad_outputs in one
    backward pass under ``vmap`` and compare them with one pass per grad_output (this
    catches wrong batching rules on the backward's path); ``check_batched_forward_grad``
    (with ``check_forward_ad``): the same for a batch of tangents in forward mode.
    """
    if not (check_forward_ad or check_backward_ad):
        raise ValueError(
            "Expected at least one of check_forward_ad or check_backward_ad to be True"
        )
    args = (
        func,
        inputs,
        eps,
        atol,
        rtol,
        nondet_tol,
        check_undefined_grad,
        check_grad_dtypes,
        check_batched_grad,
        check_batched_forward_grad,
        check_backward_ad,
        check_forward_ad,
        fast_mode,
    )
    if not raise_exception:
        try:
            return _gradcheck_helper(*args)
        except GradcheckError:
            return False
    return _gradcheck_helper(*args)


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """``gradcheck`` of the gradient of ``func``: checks second derivatives.

    Without ``grad_outputs``, random ones (requiring grad) are made, so the check also
    covers the derivative with respect to the incoming gradient.
    """
    if not (check_fwd_over_rev or check_rev_over_rev):
        raise ValueError(
            "Expected at least one of check_fwd_over_rev or check_rev_over_rev to be True"
        )
    if check_undefined_grad and not check_rev_over_rev:
        raise ValueError("Setting check_undefined_grad=True requires check_rev_over_rev to be True")
    if check_batched_grad and not check_rev_over_rev:
        raise ValueError("Setting check_batched_grad=True requires check_rev_over_rev to be True")
    tupled_inputs = _as_tuple(inputs)
    if grad_outputs is None:
        outputs = _differentiable_outputs(func(*tupled_inputs))
        made = []
        for o in outputs:
            dt = o.dtype if _is_float_or_complex(o) else float64
            g = rand(*o.shape, dtype=dt, device=o.device) * 2 - 1  # uniform in [-1, 1)
            if gen_non_contig_grad_outputs and o.dim() > 0:
                g = g.unsqueeze(-1).expand(*o.shape, 2).contiguous()[..., 0]
            made.append(g.detach().requires_grad_())
        tupled_grad_outputs = tuple(made)
    else:
        tupled_grad_outputs = _as_tuple(grad_outputs)
    num_outputs = len(tupled_grad_outputs)
    diff_input_idx = {
        i for i, x in enumerate(tupled_inputs) if isinstance(x, Tensor) and x.requires_grad
    }
    diff_grad_output_idx = {i for i, x in enumerate(tupled_grad_outputs) if x.requires_grad}

    def new_func(*args):
        input_args = args[:-num_outputs] if num_outputs else args
        outputs = _differentiable_outputs(func(*input_args))
        grad_outs = args[-num_outputs:] if num_outputs else ()
        diff_input_args = tuple(x for i, x in enumerate(input_args) if i in diff_input_idx)
        grad_inputs = engine.grad(
            list(outputs),
            list(diff_input_args),
            list(grad_outs),
            create_graph=True,
            allow_unused=True,
        )
        return tuple(g for g in grad_inputs if g is not None)

    del diff_grad_output_idx  # requires_grad already lives on the tensors themselves
    return gradcheck(
        new_func,
        tupled_inputs + tupled_grad_outputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        nondet_tol=nondet_tol,
        check_undefined_grad=check_undefined_grad,
        check_grad_dtypes=check_grad_dtypes,
        check_batched_grad=check_batched_grad,
        fast_mode=fast_mode,
        check_forward_ad=check_fwd_over_rev,
        check_backward_ad=check_rev_over_rev,
        masked=masked,
    )


# ---- the Jacobians on their own (torch keeps these deprecated, and code still calls them) ----


def _check_grad_out(name: str, grad_out) -> None:
    if grad_out != 1.0:  # the argument is kept only for torch's signature
        raise ValueError(
            f"Expected grad_out to be 1.0. {name} no longer supports values of grad_out != 1.0."
        )


def _real_output(name: str, out) -> None:
    if out.dtype.is_complex:
        raise ValueError(
            f"Expected output to be non-complex. {name} no longer supports functions that "
            "return complex outputs."
        )


def get_numerical_jacobian(fn, inputs, target=None, eps=1e-3, grad_out=1.0) -> tuple:
    """The Jacobian of ``fn``'s first floating-point output by central differences
    (``torch.autograd.gradcheck.get_numerical_jacobian``).

    Args:
        fn: called as ``fn(inputs)`` (with the tuple itself, as torch).
        inputs: a tensor or a tuple of arguments.
        target: the tensors to differentiate with respect to (default: ``inputs``); only
            those that require grad count. A target need not be in ``inputs`` (``fn`` may
            read it another way): its memory is perturbed in place, then restored.
        eps: the finite-difference step.
        grad_out: must be 1.0 (kept for torch's signature).

    Returns a tuple with one tensor per target that requires grad, shaped
    ``(target.numel(), output.numel())``: row ``i`` is the derivative of the output with
    respect to element ``i`` of the target (flattened). Its dtype is the output's (the
    target's, for a complex target: the conjugate Wirtinger derivative, as gradcheck).

    Raises ``ValueError`` when ``grad_out`` is not 1.0 or the output is complex.

    Example::

        x = tp.tensor([1.0, 2.0], dtype=tp.float64, requires_grad=True)
        (jac,) = get_numerical_jacobian(lambda xs: xs[0] ** 2, (x,))   # diag(2x)
    """
    _check_grad_out("get_numerical_jacobian", grad_out)
    inputs = _as_tuple(inputs)

    def func(*xs):
        return fn(xs)

    outs = [o for o in _as_tuple(func(*inputs)) if isinstance(o, Tensor)]
    for o in outs:
        _real_output("get_numerical_jacobian", o)
    first = next((i for i, o in enumerate(outs) if _is_float_or_complex(o)), None)
    if first is None:
        raise ValueError(
            "get_numerical_jacobian: fn returned no floating-point tensor to differentiate"
        )
    result = []
    for t in _diff_inputs(inputs if target is None else _as_tuple(target)):
        jac = _numerical_jacobian(func, inputs, t, eps, None)[first]
        dtype = t.dtype if t.dtype.is_complex else outs[first].dtype
        result.append(tensor(jac, dtype=dtype, device=outs[first].device))
    return tuple(result)


def get_analytical_jacobian(inputs, output, nondet_tol=0.0, grad_out=1.0) -> tuple:
    """The Jacobian of ``output`` with respect to the ``inputs`` that require grad, computed
    by backward one output element at a time
    (``torch.autograd.gradcheck.get_analytical_jacobian``).

    Args:
        inputs: a tensor or a tuple of tensors (and other values) ``output`` depends on.
        output: a real tensor with a graph.
        nondet_tol: how far two runs of backward may differ and still count as reentrant.
        grad_out: must be 1.0 (kept for torch's signature).

    Returns ``(jacobians, reentrant, sizes_ok, types_ok)``: one tensor per input that
    requires grad, shaped ``(input.numel(), output.numel())`` in the input's dtype (column
    ``k`` is the gradient for output element ``k``); whether two runs agreed within
    ``nondet_tol``; whether every gradient had its input's shape, and its dtype.

    Raises ``ValueError`` when ``grad_out`` is not 1.0 or ``output`` is complex.
    """
    _check_grad_out("get_analytical_jacobian", grad_out)
    _real_output("get_analytical_jacobian", output)
    diff_inputs = _diff_inputs(_as_tuple(inputs))
    jac1, sizes_ok, types_ok = _analytical_columns(output, diff_inputs, "real")
    jac2, _, _ = _analytical_columns(output, diff_inputs, "real")
    jacobians = tuple(
        tensor(j, dtype=inp.dtype, device=inp.device) for j, inp in zip(jac1, diff_inputs)
    )
    return jacobians, _reentrant(jac1, jac2, nondet_tol), sizes_ok, types_ok


# ``from tensorplay.autograd import gradcheck`` gives the function (as in torch), while the
# docs also name the module's functions ``tensorplay.autograd.gradcheck.<name>``: let that
# attribute path work too.
gradcheck.gradcheck = gradcheck
gradcheck.gradgradcheck = gradgradcheck
gradcheck.GradcheckError = GradcheckError
gradcheck.get_numerical_jacobian = get_numerical_jacobian
gradcheck.get_analytical_jacobian = get_analytical_jacobian
