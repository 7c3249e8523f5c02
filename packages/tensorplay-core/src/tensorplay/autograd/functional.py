"""Higher-level autograd on functions: ``vjp jvp jacobian hessian vhp hvp`` (as
``torch.autograd.functional``) and functorch-style ``jacrev``/``jacfwd``.

Return conventions mirror PyTorch: a result is a single tensor where the user gave
(or returned) a single tensor and a tuple where a tuple was given; ``jacobian`` of
``k`` outputs w.r.t. ``n`` inputs nests as ``outputs x inputs``, each block shaped
``output.shape + input.shape``. ``jvp``/``hvp`` use the double-backward trick (a
backward of the backward), like PyTorch; ``jacobian(strategy="forward-mode")`` and
``jacfwd`` use forward-mode AD (``tp.autograd.forward_ad``); ``vectorize=True`` and
``jacrev``/``jacfwd`` are ``tensorplay.func``'s transforms (``vmap`` over a basis).
"""

from __future__ import annotations

from tensorplay._factories import zeros, zeros_like
from tensorplay._tensor import Tensor
from tensorplay.autograd import engine, grad_mode
from tensorplay.autograd._derivatives import stack

__all__ = ["vjp", "jvp", "jacobian", "hessian", "vhp", "hvp", "jacrev", "jacfwd"]


# ---- shared plumbing (PyTorch's helpers, same messages) ------------------------------------


def _as_tuple(inp, arg_name, fn_name):
    """``(was_a_tuple, tuple_of_tensors)``."""
    is_tuple = True
    if not isinstance(inp, tuple):
        inp = (inp,)
        is_tuple = False
    for i, el in enumerate(inp):
        if not isinstance(el, Tensor):
            if is_tuple:
                raise TypeError(
                    f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of "
                    f"Tensors but the value at index {i} has type {type(el)}."
                )
            raise TypeError(
                f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of "
                f"Tensors but the given {arg_name} has type {type(el)}."
            )
    return is_tuple, inp


def _tuple_postprocess(res, to_unpack):
    """Unpack a (nested) tuple where the user's value was a single tensor."""
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _grad_preprocess(inputs, create_graph, need_graph):
    """Fresh tensors to differentiate against: detached copies, or (``create_graph`` and
    the input requires grad) a differentiable alias so gradients reach the original."""
    res = []
    for inp in inputs:
        if create_graph and inp.requires_grad:
            res.append(inp.view_as(inp))
        else:
            d = inp.detach()
            if need_graph:
                d.requires_grad_(True)
            res.append(d)
    return tuple(res)


def _grad_postprocess(inputs, create_graph):
    if inputs and isinstance(inputs[0], Tensor):
        return inputs if create_graph else tuple(inp.detach() for inp in inputs)
    return tuple(_grad_postprocess(inp, create_graph) for inp in inputs)


def _validate_v(v, other, is_other_tuple):
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(
                f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}."
            )
        raise RuntimeError("The given v should contain a single Tensor.")
    for idx, (el_v, el_other) in enumerate(zip(v, other)):
        if el_v.shape != el_other.shape:
            prepend = f"Entry {idx} in " if is_other_tuple else ""
            raise RuntimeError(
                f"{prepend}v has invalid size: should be {el_other.shape} but got {el_v.shape}."
            )


def _check_requires_grad(inputs, input_type, strict):
    if not strict:
        return
    for i, inp in enumerate(inputs):
        if inp is None:
            raise RuntimeError(
                f"The output of the user-provided function is independent of input {i}. This is "
                "not allowed in strict mode."
            )
        if not inp.requires_grad:
            if input_type == "hessian":
                raise RuntimeError(
                    f"The hessian of the user-provided function with respect to input {i} is "
                    "independent of the input. This is not allowed in strict mode. You should "
                    "ensure that your function is thrice differentiable and that the hessian "
                    "depends on the inputs."
                )
            if input_type == "jacobian":
                raise RuntimeError(
                    "While computing the hessian, found that the jacobian of the user-provided "
                    f"function with respect to input {i} is independent of the input. This is "
                    "not allowed in strict mode. You should ensure that your function is twice "
                    "differentiable and that the jacobian depends on the inputs (this would be "
                    "violated by a linear function for example)."
                )
            if input_type == "grad_inputs":
                raise RuntimeError(
                    f"The gradient with respect to input {i} is independent of the inputs of "
                    "the user-provided function. This is not allowed in strict mode."
                )
            raise RuntimeError(
                f"Output {i} of the user-provided function does not require gradients. The "
                "outputs must be computed in a differentiable manner from the input when "
                "running in strict mode."
            )


def _autograd_grad(outputs, inputs, grad_outputs=None, create_graph=False, retain_graph=None):
    """``autograd.grad`` that skips outputs which are None or don't require grad (also
    ``tensorplay.func``'s)."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    new_outputs, new_grads = [], []
    for out, g in zip(outputs, grad_outputs):
        if out is not None and out.requires_grad:
            new_outputs.append(out)
            new_grads.append(g)
    if not new_outputs:
        return (None,) * len(inputs)
    return engine.grad(
        new_outputs,
        list(inputs),
        new_grads,
        retain_graph=retain_graph,
        create_graph=create_graph,
        allow_unused=True,
    )


def _fill_in_zeros(grads, refs, strict, create_graph, stage):
    res = []
    for i, g in enumerate(grads):
        if g is None:
            if strict:
                if stage == "back":
                    raise RuntimeError(
                        "The output of the user-provided function is independent of input "
                        f"{i}. This is not allowed in strict mode."
                    )
                if stage == "back_trick":
                    raise RuntimeError(
                        f"The gradient with respect to the input is independent of entry {i} in "
                        "the grad_outputs when using the double backward trick to compute "
                        "forward mode gradients. This is not allowed in strict mode."
                    )
                if stage == "double_back":
                    raise RuntimeError(
                        "The jacobian of the user-provided function is independent of input "
                        f"{i}. This is not allowed in strict mode."
                    )
                raise RuntimeError(
                    "The hessian of the user-provided function is independent of entry "
                    f"{i} in the grad_jacobian. This is not allowed in strict mode as it "
                    "prevents from using the double backward trick to replace forward mode AD."
                )
            g = zeros_like(refs[i])
        elif strict and create_graph and not g.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(
                f"The {what} of the user-provided function is independent of input {i}. This "
                "is not allowed in strict mode when create_graph=True."
            )
        res.append(g)
    return tuple(res)


def _check_v_none(items, where):
    if len(items) != 1 or items[0].numel() != 1:
        raise RuntimeError(
            f"The vector v can only be None if the {where} a single Tensor with a single element."
        )


# ---- vjp / jvp ----------------------------------------------------------------------------


def _pair(outputs, result, create_graph, outputs_tuple, result_tuple):
    """The ``(outputs, result)`` pair the functional API returns, shaped like the inputs."""
    return (
        _tuple_postprocess(_grad_postprocess(outputs, create_graph), outputs_tuple),
        _tuple_postprocess(_grad_postprocess(result, create_graph), result_tuple),
    )


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), vᵀ J)``: the vector-Jacobian product at ``inputs``."""
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(
            outputs, "outputs of the user-provided function", "vjp"
        )
        _check_requires_grad(outputs, "outputs", strict=strict)
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, outputs, is_outputs_tuple)
        else:
            _check_v_none(outputs, "user-provided function returns")
    enabled = True if create_graph else grad_mode.is_grad_enabled()
    with grad_mode.set_grad_enabled(enabled):
        grad_res = _autograd_grad(outputs, inputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, inputs, strict, create_graph, "back")
    return _pair(outputs, result, create_graph, is_outputs_tuple, is_inputs_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)``: the Jacobian-vector product at ``inputs`` (double-backward
    trick: the backward is linear in its grad_output, so differentiating it w.r.t. a dummy
    grad_output in direction ``v`` gives ``J v``)."""
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, inputs, is_inputs_tuple)
        else:
            _check_v_none(inputs, "input to the user-provided function is")
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(
            outputs, "outputs of the user-provided function", "jvp"
        )
        _check_requires_grad(outputs, "outputs", strict=strict)
        grad_outputs = tuple(zeros_like(out, requires_grad=True) for out in outputs)
        grad_inputs = _autograd_grad(outputs, inputs, grad_outputs, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict=strict)
    with grad_mode.set_grad_enabled(True if create_graph else grad_mode.is_grad_enabled()):
        grad_res = _autograd_grad(grad_inputs, grad_outputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, outputs, strict, create_graph, "back_trick")
    return _pair(outputs, result, create_graph, is_outputs_tuple, is_outputs_tuple)


# ---- jacobian / hessian -------------------------------------------------------------------


def _one_hot(out, k):
    g = zeros(out.shape, dtype=out.dtype, device=out.device)
    g.view(-1)[k] = 1
    return g


def _stack_rows(rows, shape):
    """Rows (one per output element, each shaped like the input) as ``shape``."""
    if not rows:
        return zeros(shape)
    return stack(rows, 0).reshape(*shape)


class _Transforms:
    """``tensorplay.func``'s ``jacrev`` and ``jacfwd`` (vmap over a basis), registered by
    ``tensorplay.func`` when it loads (``import tensorplay`` loads it): vmap sits above the
    autograd package, which cannot import it."""

    jacrev = jacfwd = None


def register_vectorized(jacrev, jacfwd) -> None:
    """The transforms ``jacobian(vectorize=True)``, ``jacrev`` and ``jacfwd`` run on."""
    _Transforms.jacrev, _Transforms.jacfwd = jacrev, jacfwd


def _vectorized(func, inputs, is_inputs_tuple, create_graph, strategy):
    """``jacobian(vectorize=True)``: ``tensorplay.func``'s ``jacrev`` (one ``vmap`` over the
    output basis) or ``jacfwd`` (one over the input basis), as torch's vectorized jacobian
    is built on vmap."""
    outputs_tuple = []

    def outputs_as_tuple(*args):
        is_tuple, outs = _as_tuple(func(*args), "outputs of the user-provided function", "jacobian")
        outputs_tuple.append(is_tuple)
        return outs

    transform = _Transforms.jacrev if strategy == "reverse-mode" else _Transforms.jacfwd
    jac = transform(outputs_as_tuple, argnums=tuple(range(len(inputs))))(*inputs)
    if not create_graph:
        jac = tuple(tuple(block.detach() for block in row) for row in jac)
    return _tuple_postprocess(jac, (outputs_tuple[-1], is_inputs_tuple))


def jacobian(
    func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"
):
    """The Jacobian of ``func`` at ``inputs``: block ``[i][j]`` has shape
    ``outputs[i].shape + inputs[j].shape``. ``vectorize=True`` computes it with
    ``tensorplay.func.jacrev`` (``jacfwd`` for ``strategy="forward-mode"``, which needs it):
    one batched pass under ``vmap`` instead of a loop of backward passes."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more '
            'performant. Otherwise, prefer to use "reverse-mode".'
        )
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                "tensorplay.autograd.functional.jacobian: `create_graph=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `create_graph=False` or `strategy="reverse-mode"`.'
            )
        if strict:
            raise RuntimeError(
                "tensorplay.autograd.functional.jacobian: `strict=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `strict=False` or `strategy="reverse-mode"`.'
            )
        if not vectorize:
            raise NotImplementedError(
                "Computing Jacobian using forward-AD or forward-over-reverse Hessian is only "
                "implemented for `vectorize=True`."
            )
    if strict and vectorize:
        raise RuntimeError(
            "tensorplay.autograd.functional.jacobian: `strict=True` and `vectorized=True` are "
            "not supported together. Please either set `strict=False` or `vectorize=False`."
        )
    if vectorize:
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        return _vectorized(func, inputs, is_inputs_tuple, create_graph, strategy)
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(
            outputs, "outputs of the user-provided function", "jacobian"
        )
        _check_requires_grad(outputs, "outputs", strict=strict)
        jac = []
        for i, out in enumerate(outputs):
            rows = tuple([] for _ in inputs)
            for k in range(out.numel()):
                vj = _autograd_grad(
                    (out,),
                    inputs,
                    (_one_hot(out, k),),
                    retain_graph=True,
                    create_graph=create_graph,
                )
                for j, (rows_j, vj_el, inp) in enumerate(zip(rows, vj, inputs)):
                    if vj_el is not None:
                        if strict and create_graph and not vj_el.requires_grad:
                            raise RuntimeError(
                                "The jacobian of the user-provided function is independent of "
                                f"input {i}. This is not allowed in strict mode when "
                                "create_graph=True."
                            )
                        rows_j.append(vj_el)
                    else:
                        if strict:
                            raise RuntimeError(
                                f"Output {i} of the user-provided function is independent of "
                                f"input {j}. This is not allowed in strict mode."
                            )

                        rows_j.append(zeros_like(inp))
            jac.append(
                tuple(
                    _stack_rows(rows_j, tuple(out.shape) + tuple(inputs[j].shape))
                    for j, rows_j in enumerate(rows)
                )
            )
        jac = _grad_postprocess(tuple(jac), create_graph)
        return _tuple_postprocess(jac, (is_outputs_tuple, is_inputs_tuple))


def hessian(
    func,
    inputs,
    create_graph=False,
    strict=False,
    vectorize=False,
    outer_jacobian_strategy="reverse-mode",
):
    """The Hessian of a scalar ``func`` at ``inputs`` (block ``[i][j]`` has shape
    ``inputs[i].shape + inputs[j].shape``)."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def ensure_single_output_function(*inp):
        out = func(*inp)
        is_out_tuple, t_out = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(t_out, "outputs", strict=strict)
        if is_out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError(
                "The Tensor returned by the function given to hessian should contain a single "
                "element"
            )
        return out.reshape(()) if out.dim() else out

    def jac_func(*inp):
        if outer_jacobian_strategy == "forward-mode":
            inp = tuple(t.requires_grad_(True) for t in inp)
        jac = jacobian(ensure_single_output_function, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict=strict)
        return jac

    res = jacobian(
        jac_func,
        inputs,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return _tuple_postprocess(res, (is_inputs_tuple, is_inputs_tuple))


def _scalar_function_grad(func, inputs, v, create_graph, strict, fn_name):
    """Shared start of ``vhp``/``hvp``: inputs, v, outputs and the first gradient."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", fn_name)
    inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
    if v is not None:
        _, v = _as_tuple(v, "v", fn_name)
        v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
        _validate_v(v, inputs, is_inputs_tuple)
    else:
        _check_v_none(inputs, "input to the user-provided function is")
    outputs = func(*inputs)
    is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", fn_name)
    _check_requires_grad(outputs, "outputs", strict=strict)
    if is_outputs_tuple or not isinstance(outputs[0], Tensor):
        raise RuntimeError(f"The function given to {fn_name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(
            f"The Tensor returned by the function given to {fn_name} should contain a single "
            "element"
        )
    jac = _autograd_grad(outputs, inputs, create_graph=True)
    return is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), vᵀ H)`` for a scalar ``func``."""
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _scalar_function_grad(
            func, inputs, v, create_graph, strict, "vhp"
        )
        _check_requires_grad(jac, "jacobian", strict=strict)
    with grad_mode.set_grad_enabled(True if create_graph else grad_mode.is_grad_enabled()):
        grad_res = _autograd_grad(jac, inputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back")
    return _pair(outputs, result, create_graph, is_outputs_tuple, is_inputs_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` for a scalar ``func`` (double-backward trick)."""
    with grad_mode.enable_grad():
        is_inputs_tuple, inputs, v, is_outputs_tuple, outputs, jac = _scalar_function_grad(
            func, inputs, v, create_graph, strict, "hvp"
        )
        grad_jac = tuple(zeros_like(inp, requires_grad=True) for inp in inputs)
        double_back = _autograd_grad(jac, inputs, grad_jac, create_graph=True)
        _check_requires_grad(jac, "hessian", strict=strict)
    with grad_mode.set_grad_enabled(True if create_graph else grad_mode.is_grad_enabled()):
        grad_res = _autograd_grad(double_back, grad_jac, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back_trick")
    return _pair(outputs, result, create_graph, is_outputs_tuple, is_inputs_tuple)


# ---- functorch-style transforms ----------------------------------------------------------------


def jacrev(func, argnums=0, *, has_aux=False):
    """``jacrev(f, argnums)(*args)``: ``tensorplay.func.jacrev`` (the Jacobian of ``f``
    w.r.t. ``args[argnums]`` by reverse mode, one ``vmap`` over the output basis)."""
    return _Transforms.jacrev(func, argnums, has_aux=has_aux)


def jacfwd(func, argnums=0, *, has_aux=False):
    """``jacfwd(f, argnums)(*args)``: ``tensorplay.func.jacfwd`` (the Jacobian by forward
    mode, one ``vmap`` over the input basis)."""
    return _Transforms.jacfwd(func, argnums, has_aux=has_aux)
