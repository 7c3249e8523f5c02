"""``tensorplay.func``: function transforms (PyTorch's ``torch.func``).

Two mechanisms, each used once and composed:

* reverse mode: ``vjp`` runs the function on fresh inputs that require grad and returns a
  function of the cotangents that runs ``autograd.grad``; ``grad``/``grad_and_value``
  call it with a cotangent of one, ``jacrev`` maps it over a basis of cotangents with
  ``vmap`` (one batched backward pass);
* forward mode: ``jvp`` runs the function on dual tensors (``autograd.forward_ad``);
  ``jacfwd`` maps it over a basis of tangents with ``vmap`` (batched tangents: the primal
  is computed once, every tangent op once on the batch); ``hessian`` is
  ``jacfwd(jacrev(f))``.

They nest as torch.func's do: a transform whose inputs already require grad (an outer
``grad``/``jacrev``, or the caller's own graph) keeps its result differentiable, and one
whose inputs carry tangents (an outer ``jvp``/``jacfwd``) keeps them on its result.
TensorPlay has one dual level, so forward mode inside forward mode (``jacfwd(jacfwd(f))``)
is refused; nest reverse mode inside instead, as ``hessian`` does. Arguments and results
may be tuples, lists and dicts of tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tensorplay import _factories
from tensorplay._tensor import Tensor
from tensorplay._vmap import _flat, _rebuild, vmap
from tensorplay.autograd import forward_ad, functional, grad_mode
from tensorplay.autograd.functional import _autograd_grad

__all__ = [
    "vmap",
    "grad",
    "grad_and_value",
    "vjp",
    "jvp",
    "jacrev",
    "jacfwd",
    "hessian",
    "functional_call",
]


# ---- reverse mode --------------------------------------------------------------------------


def vjp(func: Callable, *primals, has_aux: bool = False):
    """``(func(*primals), vjp_fn)``: ``vjp_fn(cotangents)`` gives, for each primal, the
    vector-Jacobian product (a tuple, one entry per primal, each shaped like it); the
    cotangents have the structure of the output. ``has_aux``: ``func`` returns
    ``(output, aux)`` and the call returns ``(output, vjp_fn, aux)``.

    >>> out, vjp_fn = tp.func.vjp(tp.sin, x)
    >>> (g,) = vjp_fn(tp.ones_like(out))            # cos(x)
    """
    _check_callable(func, "vjp")
    out, vjp_fn, aux = _vjp(func, primals, has_aux, "vjp")
    return (out, vjp_fn, aux) if has_aux else (out, vjp_fn)


def _vjp(func, primals: tuple, has_aux: bool, name: str):
    """``(output, vjp_fn, aux or None)``: ``vjp``'s work, for the transforms built on it."""
    leaves = _tensor_leaves(primals, name, "primals")
    # an outer transform (or the caller's graph) differentiates through this one's result
    keep = grad_mode.is_grad_enabled() and any(p.requires_grad for p in leaves)
    with grad_mode.enable_grad():
        fresh = [_track(p) for p in leaves]
        out = func(*_rebuild(primals, iter(fresh)))
    out, aux = _split_aux(out, has_aux, name)
    outs = _tensor_leaves(out, name, "outputs of func")

    def vjp_fn(cotangents):
        cts = list(_flat(cotangents))
        if len(cts) != len(outs) or not all(isinstance(c, Tensor) for c in cts):
            raise RuntimeError(
                f"vjp_fn(cotangents): expected {len(outs)} cotangent tensor(s), structured as "
                f"func's output, got {_describe(cotangents)}"
            )
        for i, (c, o) in enumerate(zip(cts, outs)):
            if c.shape != o.shape:
                raise RuntimeError(
                    f"vjp_fn(cotangents): cotangent {i} has shape {list(c.shape)} but the output "
                    f"it belongs to has shape {list(o.shape)}"
                )
        # forward over reverse (an outer jvp/jacfwd of this gradient, tangents on the
        # cotangents): the backward pass runs under forward mode, its saved tensors keeping
        # their tangents, so the gradients come out as dual tensors (autograd.grad keeps a
        # gradient's tangent without create_graph too, as torch's does)
        with grad_mode.set_grad_enabled(keep or grad_mode.is_grad_enabled()):
            grads = _vjps(outs, fresh, cts, keep)
        return _rebuild(primals, iter(grads))

    return (out if keep else _detached(out)), vjp_fn, aux


def _vjps(outs, inputs, cts, keep: bool) -> list:
    grads = _autograd_grad(outs, inputs, cts, create_graph=keep, retain_graph=True)
    return [_factories.zeros_like(p) if g is None else g for g, p in zip(grads, inputs)]


def grad_and_value(func: Callable, argnums: int | tuple = 0, has_aux: bool = False) -> Callable:
    """``(gradient, value)`` of a ``func`` returning a scalar tensor, with respect to the
    arguments ``argnums`` (an int: that argument's gradient, shaped like it, tuples, lists
    and dicts too; a tuple of ints: a tuple of them). ``has_aux``: ``func`` returns
    ``(value, aux)`` and the call returns ``(gradient, (value, aux))``."""
    _check_callable(func, "grad_and_value")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums, partial, diff = _differentiated(func, argnums, args, kwargs, "grad_and_value")
        out, vjp_fn, aux = _vjp(partial, diff, has_aux, "grad_and_value")
        if not isinstance(out, Tensor):
            raise RuntimeError(
                f"grad_and_value(f)(*args): Expected f(*args) to return a Tensor, got "
                f"{type(out).__name__}"
            )
        if out.dim() != 0:
            raise RuntimeError(
                "grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, got "
                f"tensor with {out.dim()} dims. Maybe you wanted to use the vjp or jacrev APIs "
                "instead?"
            )
        grads = vjp_fn(_factories.ones_like(out))
        g = grads if isinstance(argnums, tuple) else grads[0]
        return (g, (out, aux)) if has_aux else (g, out)

    return wrapper


def grad(func: Callable, argnums: int | tuple = 0, has_aux: bool = False) -> Callable:
    """The gradient of a ``func`` returning a scalar tensor (``grad_and_value`` without the
    value): ``tp.func.grad(f)(x)``; with ``has_aux``, ``(gradient, aux)``.

    >>> tp.vmap(tp.func.grad(loss), in_dims=(None, 0, 0))(w, xs, ys)   # per-sample
    """
    _check_callable(func, "grad")
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


def jacrev(
    func: Callable,
    argnums: int | tuple = 0,
    *,
    has_aux: bool = False,
    chunk_size: int | None = None,
) -> Callable:
    """The Jacobian of ``func`` with respect to the arguments ``argnums`` by reverse mode:
    one ``vjp`` per output element, all of them one ``vmap`` over the basis of cotangents
    (``chunk_size`` of them at a time if given). Each block has shape
    ``output.shape + input.shape``; several outputs (a tuple, ...) give that structure,
    each entry holding the input structure (a tuple for a tuple of ``argnums``).

    >>> tp.func.jacrev(lambda v: tp.tanh(w @ v))(x)          # (5, 3) for w (5, 3)
    """
    _check_callable(func, "jacrev")

    @functools.wraps(func)
    def jacobian(*args, **kwargs):
        nums, partial, diff = _differentiated(func, argnums, args, kwargs, "jacrev")
        out, vjp_fn, aux = _vjp(partial, diff, has_aux, "jacrev")
        outs = _tensor_leaves(out, "jacrev", "outputs of func")
        ins = list(_flat(diff))
        if not outs or not ins:
            blocks = [[_factories.zeros(*o.shape, *i.shape, dtype=o.dtype, device=o.device)
                       for i in ins] for o in outs]  # fmt: skip
        else:
            basis = _basis(outs)
            grads = vmap(lambda *cts: vjp_fn(_rebuild(out, iter(cts))), chunk_size=chunk_size)(
                *basis
            )
            per_input = list(_flat(grads))  # (M, *input.shape) each
            blocks, start = [], 0
            for o in outs:
                m = o.numel()
                blocks.append([g.narrow(0, start, m).reshape(*o.shape, *i.shape)
                               for g, i in zip(per_input, ins)])  # fmt: skip
                start += m
        jac = _rebuild(out, iter(_rebuild(diff, iter(b)) for b in blocks))
        jac = jac if isinstance(argnums, tuple) else _rebuild(out, iter(_first(jac, out)))
        return (jac, aux) if has_aux else jac

    return jacobian


# ---- forward mode --------------------------------------------------------------------------


def jvp(func: Callable, primals: tuple, tangents: tuple, *, strict: bool = False,
        has_aux: bool = False):  # fmt: skip
    """``(func(*primals), J @ tangents)``: the Jacobian-vector product by forward mode
    (dual tensors). ``primals`` and ``tangents`` are tuples of the same structure (one
    entry per argument of ``func``); the result's tangent has the structure of the output.
    ``has_aux``: ``func`` returns ``(output, aux)`` and the call returns
    ``(output, jvp_out, aux)``; ``strict``: an output that does not depend on the primals
    is an error (otherwise its tangent is zeros). Under ``vmap`` the tangents may be batched:
    ``tp.vmap(lambda t: tp.func.jvp(f, (x,), (t,))[1])(ts)`` is one batched pass.

    >>> tp.func.jvp(tp.sin, (x,), (tp.ones_like(x),))[1]    # cos(x)
    """
    _check_callable(func, "jvp")
    for name, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, tuple):
            raise RuntimeError(
                f"jvp(f, primals, tangents): Expected {name} to be a tuple. E.g. it should be "
                f"valid to call f(*{name}); got {type(value).__name__}"
            )
    ps = _tensor_leaves(primals, "jvp", "primals")
    ts = _tensor_leaves(tangents, "jvp", "tangents")
    if len(ps) != len(ts):
        raise RuntimeError(
            "jvp(f, primals, tangents): Expected primals and tangents to have the same python "
            f"structure, got {len(ps)} primal tensor(s) and {len(ts)} tangent tensor(s)"
        )
    for i, (p, t) in enumerate(zip(ps, ts)):
        if p.shape != t.shape:
            raise RuntimeError(
                f"jvp(f, primals, tangents): tangent {i} has shape {list(t.shape)}, its primal "
                f"{list(p.shape)}; they must match"
            )
    if forward_ad.state.level is not None:
        raise NotImplementedError(
            "jvp: forward mode inside forward mode (jvp of jvp, jacfwd of jacfwd) is not "
            "supported: TensorPlay has one dual level. Nest reverse mode inside instead "
            "(jacfwd(jacrev(f)), as tp.func.hessian does, or jacrev(jacfwd(f)))"
        )
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(p, t) for p, t in zip(ps, ts)]
        out = func(*_rebuild(primals, iter(duals)))
        out, aux = _split_aux(out, has_aux, "jvp")
        outs = _tensor_leaves(out, "jvp", "outputs of func")
        unpacked = [forward_ad.unpack_dual(o) for o in outs]
        if strict and any(u.tangent is None for u in unpacked):
            raise RuntimeError(
                "jvp(f, primals, tangents, strict=True): The output of f is independent of "
                "the inputs. This is not allowed with strict=True."
            )
        aux = _map_tensors(lambda a: forward_ad.unpack_dual(a).primal, aux)
    primal_out = _rebuild(out, iter(u.primal for u in unpacked))
    tangents = (_factories.zeros_like(u.primal) if u.tangent is None else u.tangent
                for u in unpacked)  # fmt: skip
    tangent_out = _rebuild(out, tangents)
    return (primal_out, tangent_out, aux) if has_aux else (primal_out, tangent_out)


def jacfwd(
    func: Callable, argnums: int | tuple = 0, has_aux: bool = False, *, randomness: str = "error"
) -> Callable:
    """The Jacobian of ``func`` with respect to the arguments ``argnums`` by forward mode:
    one ``jvp`` per input element, all of them one ``vmap`` over the basis of tangents (the
    primal computed once). Same layout as ``jacrev``; the better choice when the inputs
    have fewer elements than the outputs. ``randomness`` is ``vmap``'s.

    >>> tp.func.jacfwd(lambda v: tp.tanh(w @ v))(x)
    """
    _check_callable(func, "jacfwd")

    @functools.wraps(func)
    def jacobian(*args, **kwargs):
        nums, partial, diff = _differentiated(func, argnums, args, kwargs, "jacfwd")
        ins = _tensor_leaves(diff, "jacfwd", "differentiated arguments")
        if not ins or not sum(i.numel() for i in ins):
            out = partial(*diff)
            out, aux = _split_aux(out, has_aux, "jacfwd")
            blocks = [[_factories.zeros(*o.shape, *i.shape, dtype=o.dtype, device=o.device)
                       for i in ins] for o in _flat(out)]  # fmt: skip
        else:

            def push(*ts):
                return jvp(partial, diff, _rebuild(diff, iter(ts)), has_aux=has_aux)

            # the primal output (and aux) is the same for every tangent: computed once
            dims = (None, 0, None) if has_aux else (None, 0)
            out, tans, *aux = vmap(push, out_dims=dims, randomness=randomness)(*_basis(ins))
            aux = aux[0] if has_aux else None
            blocks = []
            for o, t in zip(_flat(out), _flat(tans)):  # t: (N, *output.shape)
                row, start = [], 0
                for i in ins:
                    n = i.numel()
                    part = t.narrow(0, start, n).movedim(0, -1)
                    row.append(part.reshape(*o.shape, *i.shape))
                    start += n
                blocks.append(row)
        jac = _rebuild(out, iter(_rebuild(diff, iter(b)) for b in blocks))
        jac = jac if isinstance(argnums, tuple) else _rebuild(out, iter(_first(jac, out)))
        return (jac, aux) if has_aux else jac

    return jacobian


def hessian(func: Callable, argnums: int | tuple = 0) -> Callable:
    """The Hessian of a scalar ``func``: ``jacfwd(jacrev(func, argnums), argnums)``
    (forward over reverse, as torch.func). Shape ``input.shape + input.shape``.

    >>> tp.func.hessian(lambda v: (v ** 3).sum())(x)        # diag(6 x)
    """
    _check_callable(func, "hessian")
    return jacfwd(jacrev(func, argnums), argnums)


# ---- modules -------------------------------------------------------------------------------


def functional_call(
    module,
    parameter_and_buffer_dicts,
    args: Any = None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """``module(*args, **kwargs)`` with its parameters and buffers replaced, for the call
    only, by the tensors in ``parameter_and_buffer_dicts`` (a dict of dotted names, as
    ``named_parameters`` gives them, or a tuple of such dicts): what makes a module a
    function of its parameters for ``grad``, ``vmap`` and the Jacobians. Names left out
    keep the module's own tensors (``strict=True``: an error). ``tie_weights``: a tensor
    the module holds under several names (tied weights) is replaced under all of them.

    >>> params = dict(model.named_parameters())
    >>> tp.func.grad(lambda p, x: tp.func.functional_call(model, p, (x,)).sum())(params, x)
    """
    dicts = (
        (parameter_and_buffer_dicts,)
        if isinstance(parameter_and_buffer_dicts, dict)
        else tuple(parameter_and_buffer_dicts)
    )
    given: dict = {}
    for d in dicts:
        if not isinstance(d, dict):
            raise TypeError(
                "functional_call(parameter_and_buffer_dicts): a dict of name -> Tensor or a "
                f"tuple of such dicts, got an entry of type {type(d).__name__}"
            )
        for k, v in d.items():
            if k in given:
                raise ValueError(
                    f"functional_call: {k!r} appeared in multiple dictionaries; give each "
                    "parameter or buffer once"
                )
            given[k] = v
    held = [(n, t) for n, t in _module_tensors(module)]
    known = {n for n, _ in held}
    unknown = sorted(set(given) - known)
    if unknown:
        raise RuntimeError(
            f"functional_call: {unknown} are not parameters or buffers of "
            f"{type(module).__name__} (it has {sorted(known)})"
        )
    if tie_weights:
        by_id: dict = {}
        for n, t in held:
            by_id.setdefault(id(t), []).append(n)
        for names in by_id.values():
            chosen = [n for n in names if n in given]
            if chosen and len({id(given[n]) for n in chosen}) > 1:
                raise ValueError(
                    f"functional_call got multiple values for keys {chosen}, which are tied; "
                    "give one of them, or pass tie_weights=False"
                )
            if chosen:
                for n in names:
                    given.setdefault(n, given[chosen[0]])
    if strict:
        missing = sorted(known - set(given))
        if missing:
            raise RuntimeError(
                f"functional_call(strict=True): missing {missing}; give every parameter and "
                "buffer, or pass strict=False"
            )
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    saved = []
    try:
        for name, value in given.items():
            store, key = _slot(module, name)
            saved.append((store, key, store[key]))
            store[key] = value
        return module(*args, **(kwargs or {}))
    finally:
        for store, key, old in reversed(saved):
            store[key] = old


def _module_tensors(module):
    """Every (dotted name, tensor) of a module's parameters and buffers, tied ones under
    each of their names."""
    if not all(hasattr(module, s) for s in ("_parameters", "_buffers", "_modules")):
        raise TypeError(
            f"functional_call(module): a tensorplay.nn.Module, got {type(module).__name__}"
        )
    stack = [("", module)]
    while stack:
        prefix, m = stack.pop()
        for store in (m._parameters, m._buffers):
            for n, t in store.items():
                if t is not None:
                    yield prefix + n, t
        for n, child in m._modules.items():
            if child is not None:
                stack.append((f"{prefix}{n}.", child))


def _slot(module, name: str):
    """The dict (``_parameters`` or ``_buffers`` of the owning submodule) holding ``name``."""
    *path, key = name.split(".")
    m = module
    for p in path:
        m = m._modules[p]
    return (m._parameters if key in m._parameters else m._buffers), key


# ---- helpers -------------------------------------------------------------------------------


def _check_callable(func, name: str) -> None:
    if not callable(func):
        raise TypeError(f"{name}(func): func must be callable, got {type(func).__name__}")


def _differentiated(func, argnums, args: tuple, kwargs: dict, name: str):
    """``(argnums as a tuple, func of the differentiated arguments only, those arguments)``."""
    nums = _argnums_tuple(argnums, len(args), name)
    for n in nums:
        for leaf in _flat(args[n]):
            if not isinstance(leaf, Tensor):
                raise TypeError(
                    f"{name}: argument {n} (in argnums) must be a Tensor, or tuples, lists and "
                    f"dicts of them, got {type(leaf).__name__}; move the other arguments out "
                    "of argnums"
                )

    def partial(*diff):
        full = list(args)
        for n, a in zip(nums, diff):
            full[n] = a
        return func(*full, **kwargs)

    return nums, partial, tuple(args[n] for n in nums)


def _argnums_tuple(argnums, n_args, fn_name):
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    if not nums:
        raise RuntimeError(f"{fn_name}: argnums must be non-empty")
    res = []
    for a in nums:
        if not isinstance(a, int):
            raise RuntimeError(
                f"{fn_name}: argnums must be int or Tuple[int, ...], got: {type(a).__name__}"
            )
        if not -n_args <= a < n_args:
            raise RuntimeError(f"Got argnums={a}, but only {n_args} positional inputs were given")
        res.append(a % n_args)
    return tuple(res)


def _tensor_leaves(value, name: str, what: str) -> list:
    leaves = [value] if isinstance(value, Tensor) else list(_flat(value))
    for x in leaves:
        if not isinstance(x, Tensor):
            raise TypeError(
                f"{name}: expected the {what} to be tensors (or tuples, lists and dicts of "
                f"them), got {type(x).__name__}"
            )
    return leaves


def _split_aux(out, has_aux: bool, name: str):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(
            f"{name}(f, ...): output of function f should be a tuple: (output, aux) if "
            "has_aux is True"
        )
    return out


def _tangent(x):
    return forward_ad.tangent_of(x) if forward_ad.state.level is not None else None


def _track(p: Tensor) -> Tensor:
    """A fresh input to differentiate against: an alias of ``p`` when ``p`` already requires
    grad (gradients reach it too, for an outer transform), otherwise a detached copy that
    requires grad, keeping ``p``'s tangent if it has one (forward over reverse)."""
    if p.requires_grad and grad_mode.is_grad_enabled():
        return p.view_as(p)
    fresh = p.detach().requires_grad_()
    t = _tangent(p)
    return fresh if t is None else forward_ad.make_dual(fresh, t)


def _detached(value):
    """Without the graph; a tangent stays (an outer forward mode reads it)."""

    def one(t):
        tangent = _tangent(t)
        return t.detach() if tangent is None else forward_ad.make_dual(t.detach(), tangent)

    return _map_tensors(one, value)


def _map_tensors(fn, value):
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, (tuple, list, dict)):
        return _rebuild(value, iter(fn(x) if isinstance(x, Tensor) else x for x in _flat(value)))
    return value


def _basis(leaves: list) -> list:
    """One batch of ``N`` (the leaves' total element count) one-hot directions per leaf,
    together the rows of the identity: row ``k`` is 1 at element ``k`` of all the leaves."""
    n = sum(x.numel() for x in leaves)
    out, start = [], 0
    for x in leaves:
        eye = _factories.eye(n, dtype=x.dtype, device=x.device)
        out.append(eye.narrow(1, start, x.numel()).reshape(n, *x.shape))
        start += x.numel()
    return out


def _first(jac, out) -> list:
    """For ``argnums`` given as an int: each output's entry is that argument's structure, not
    a 1-tuple of it."""
    entries = [jac] if isinstance(out, Tensor) else _entries(jac, out)
    return [e[0] for e in entries]


def _entries(jac, out) -> list:
    if isinstance(out, dict):
        return [x for k in out for x in _entries(jac[k], out[k])]
    if isinstance(out, (tuple, list)):
        return [x for j, o in zip(jac, out) for x in _entries(j, o)]
    return [jac]


def _describe(value) -> str:
    if isinstance(value, Tensor):
        return f"a Tensor of shape {list(value.shape)}"
    return type(value).__name__


functional.register_vectorized(jacrev, jacfwd)
