"""``opcheck``: test that an operator keeps its contract (schema, autograd, fake kernel,
capture), PyTorch's ``torch.library.opcheck``.

Every check runs on fresh clones of the arguments, so the caller's tensors are never
modified and the checks do not see each other's side effects. A check fails by raising;
``opcheck`` records ``"ExcType: message"`` per failed check.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import tensorplay as tp
from tensorplay import Tensor
from tensorplay.library import _registry
from tensorplay.library._names import AGNOSTIC, DEVICE_TYPES
from tensorplay.library._op import CustomOpDef

__all__ = ["opcheck", "DEFAULT_TESTS", "ALL_TESTS", "OpCheckError"]

DEFAULT_TESTS = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)
EXTRA_TESTS = ("test_gradcheck", "test_vmap")
ALL_TESTS = DEFAULT_TESTS + EXTRA_TESTS


class OpCheckError(AssertionError):
    """An operator broke its contract (the message names the argument and the fix)."""


class _Skip(Exception):
    """A check that cannot run here (explicitly reported as a warning, never a pass)."""


def opcheck(
    op: str | CustomOpDef,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    test_utils: str | Sequence[str] = DEFAULT_TESTS,
    raise_exception: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    devices: str | Sequence[str] | None = None,
) -> dict[str, str]:
    """Check ``op(*args, **kwargs)`` against the operator contract.

    Args:
        op: the operator or its qualified name.
        args, kwargs: a sample call (tensors are cloned for every check).
        test_utils: the checks, in order (default: ``test_schema``,
            ``test_autograd_registration``, ``test_faketensor``,
            ``test_aot_dispatch_dynamic``); ``"all"`` adds ``test_gradcheck`` and
            ``test_vmap``; a str selects one check.
        raise_exception: raise ``RuntimeError`` on any failure (else just return them).
        atol, rtol: tolerances for comparing outputs (default: by dtype).
        devices: None (the arguments' own device), ``"all"`` (every device with a kernel)
            or device types; failures are then keyed ``"test_name[device]"``.

    Returns ``{check: "ExcType: message"}`` for the failed checks (``{}``: all passed)::

        >>> opcheck(my_op, (tp.randn(3),))
        {}

    Raises ``ValueError`` for an unknown check name (before anything runs).
    """
    target = _registry.resolve(op)
    tests = _select(test_utils)
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"opcheck({target.name}): args must be a tuple, got {type(args).__name__}")
    args, kwargs = tuple(args), dict(kwargs or {})
    failures: dict[str, str] = {}
    for device, a, k in _device_runs(target, args, kwargs, devices):
        for test in tests:
            key = test if device is None else f"{test}[{device}]"
            try:
                _CHECKS[test](target, a, k, atol, rtol)
            except _Skip as skip:
                warnings.warn(
                    f"opcheck({target.name}): {key} skipped: {skip}", UserWarning, stacklevel=2
                )
            except Exception as e:  # noqa: BLE001 - every failure is reported, by type
                failures[key] = f"{type(e).__name__}: {e}"
    if failures and raise_exception:
        details = "; ".join(f"{k}: {v}" for k, v in failures.items())
        raise RuntimeError(f"opcheck({target.name}) failed {len(failures)} check(s): {details}")
    return failures


def _select(test_utils: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(test_utils, str):
        tests: tuple[str, ...] = ALL_TESTS if test_utils == "all" else (test_utils,)
    else:
        tests = tuple(test_utils)
    for t in tests:
        if t not in ALL_TESTS:
            raise ValueError(f"opcheck: unknown test {t!r}; choose from {list(ALL_TESTS)} or 'all'")
    return tests


def _device_runs(op: CustomOpDef, args: tuple, kwargs: dict, devices):
    if devices is None:
        yield None, args, kwargs
        return
    if devices == "all":
        has_agnostic = op._kernel(AGNOSTIC) is not None
        wanted = [d for d in DEVICE_TYPES if has_agnostic or op._kernel(d) is not None]
    else:
        wanted = [devices] if isinstance(devices, str) else list(devices)
    for dev in wanted:
        dev = dev.lower()
        if dev == "cuda" and not tp.cuda.is_available():
            warnings.warn(
                f"opcheck({op.name}): device 'cuda' skipped: CUDA not available "
                f"({tp.cuda.unavailable_reason()})",
                UserWarning,
                stacklevel=3,
            )
            continue
        move = functools.partial(_to_device, device=dev)
        yield dev, _map(args, move), _map(kwargs, move)


# ---- helpers ----------------------------------------------------------------------------------


def _map(value: Any, fn: Callable[[Tensor], Any]) -> Any:
    """``value`` with every tensor (inside tuples, lists and dicts too) replaced by fn(t)."""
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, fn) for k, v in value.items()}
    return value


def _to_device(t: Tensor, device: str) -> Tensor:
    return t.to(device)


def _clone(value: Any) -> Any:
    return _map(value, lambda t: t.detach().clone())


def _outputs(result: Any) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _host(t: Tensor) -> np.ndarray:
    """The values of ``t`` as a numpy array (float64/complex128 for comparisons)."""
    a = np.asarray(t.detach().cpu().numpy())
    if t.dtype.is_complex:
        return a.astype(np.complex128)
    return a.astype(np.float64) if t.dtype.is_floating_point else a


def _tolerances(t: Tensor, atol: float | None, rtol: float | None) -> tuple[float, float]:
    default = {tp.float16: (1e-3, 1e-3), tp.bfloat16: (1e-2, 1.6e-2), tp.float64: (1e-7, 1e-7)}
    a, r = default.get(t.dtype, (1e-5, 1.3e-6))
    return (a if atol is None else atol, r if rtol is None else rtol)


def _same_values(a: Tensor, b: Tensor) -> bool:
    return a._shape == b._shape and np.array_equal(_host(a), _host(b), equal_nan=True)


def _no_grad_call(op: CustomOpDef, args: tuple, kwargs: dict) -> Any:
    with tp.no_grad():
        return op(*args, **kwargs)


# ---- the checks -------------------------------------------------------------------------------


def test_schema(op: CustomOpDef, args, kwargs, atol, rtol) -> None:
    """Arguments outside ``mutates_args`` keep their values; no output aliases an input."""
    args, kwargs = _clone(args), _clone(kwargs)
    inputs = op.named_tensors(args, kwargs)
    # values, not version counters: a launcher that copies its arguments back unchanged
    # (Triton's interpreter does) writes without mutating
    before = [(name, t.detach().clone()) for name, t in inputs]
    result = _no_grad_call(op, args, kwargs)
    declared = set(op.mutates_args)
    for (name, t), (_, old) in zip(inputs, before):
        base = name.split("[", 1)[0]
        if base in declared:
            continue
        if not _same_values(t, old):
            raise OpCheckError(
                f"{op.name} mutated argument {name!r}, which is not in mutates_args="
                f"{op.mutates_args!r}; declare it (mutates_args=({base!r},)) or write to a copy"
            )
    # by address, not storage identity: the call itself refuses an output that shares an
    # input's storage, but a new tensor over the same memory (tp.from_numpy(x.numpy()))
    # gets past that check
    seen = [(f"input {name!r}", f"{name}.clone()", t) for name, t in inputs]
    for i, out in enumerate(_outputs(result)):
        if not isinstance(out, Tensor):
            continue
        for what, fix, t in seen:
            if _overlap(out, t):
                raise OpCheckError(
                    f"{op.name}: output {i} aliases {what} (shares its memory); return a new "
                    f"tensor instead (e.g. {fix})"
                )
        seen.append((f"output {i}", f"a .clone() of output {i}", out))


def _overlap(a: Tensor, b: Tensor) -> bool:
    """Whether the storages of ``a`` and ``b`` share bytes (same device, intersecting address
    ranges); meta tensors hold no memory."""
    sa, sb = a._storage, b._storage
    if sa is None or sb is None or a.device != b.device or a.device.type == "meta":
        return False
    if sa is sb:
        return True
    start_a, start_b = sa.data_ptr(), sb.data_ptr()
    return start_a < start_b + sb.nbytes() and start_b < start_a + sa.nbytes()


def test_autograd_registration(op: CustomOpDef, args, kwargs, atol, rtol) -> None:
    """Gradients reach every floating input, with the input's shape."""
    declared = set(op.mutates_args)
    leaves: list[tuple[str, Tensor]] = []

    def leaf(t: Tensor) -> Tensor:
        t = t.detach().clone()
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.requires_grad_(True)
        return t

    names = op.input_names()
    args = tuple(
        _clone(a) if i < len(names) and names[i] in declared else _map(a, leaf)
        for i, a in enumerate(args)
    )
    kwargs = {k: _clone(v) if k in declared else _map(v, leaf) for k, v in kwargs.items()}
    leaves = [(n, t) for n, t in op.named_tensors(args, kwargs) if t.requires_grad]
    if not leaves:
        return  # nothing is differentiable: nothing to check
    first = _outputs(op(*args, **kwargs))[0]
    if not isinstance(first, Tensor) or not (
        first.dtype.is_floating_point or first.dtype.is_complex
    ):
        return
    if not first.requires_grad:
        raise OpCheckError(
            f"{op.name}: output 0 does not require grad although input {leaves[0][0]!r} does; "
            f"the kernel breaks the autograd graph. Register a formula with "
            f"{op.name}.register_autograd(backward, setup_context=...) or build the body "
            "from differentiable TensorPlay ops"
        )
    first.backward(tp.ones_like(first))
    for name, t in leaves:
        if t.grad is None:
            raise OpCheckError(
                f"{op.name}: input {name!r} got no gradient from backward; the registered "
                "backward must return one gradient per input"
            )
        if t.grad._shape != t._shape:
            raise OpCheckError(
                f"{op.name}: the gradient of input {name!r} has shape {list(t.grad._shape)}, "
                f"expected {list(t._shape)}"
            )


def test_faketensor(op: CustomOpDef, args, kwargs, atol, rtol) -> None:
    """The fake kernel exists and reproduces the real outputs' count, shape, dtype, device."""
    fake = op._fake
    if fake is None:
        raise OpCheckError(
            f"{op.name} has no fake kernel (needed for meta tensors and graph capture); "
            f"register one with @{op.name.split('::')[1]}.register_fake or "
            f"tensorplay.library.register_fake({op.name!r}, fn)"
        )
    real = _outputs(_no_grad_call(op, _clone(args), _clone(kwargs)))
    with tp.no_grad():
        from_real = _outputs(fake(*_clone(args), **_clone(kwargs)))
    _compare_meta(op, "the fake kernel", real, from_real)

    def to_meta(t: Tensor) -> Tensor:
        return tp.empty(t._shape, dtype=t.dtype, device="meta")

    on_meta = _outputs(_no_grad_call(op, _map(args, to_meta), _map(kwargs, to_meta)))
    _compare_meta(op, "the op on meta tensors", real, on_meta, only_meta=True)


def _compare_meta(op, what: str, real: tuple, fake: tuple, *, only_meta: bool = False) -> None:
    """``fake`` matches ``real`` in count, shape and dtype; its device is the real one or
    meta, and must be meta with ``only_meta`` (the inputs were meta tensors)."""
    if len(real) != len(fake):
        raise OpCheckError(
            f"{op.name}: {what} returned {len(fake)} output(s), expected {len(real)}"
        )
    for i, (r, f) in enumerate(zip(real, fake)):
        if not isinstance(r, Tensor):
            continue
        if not isinstance(f, Tensor):
            raise OpCheckError(
                f"{op.name}: {what} returned {type(f).__name__} as output {i}, expected a Tensor"
            )
        if r._shape != f._shape or r.dtype is not f.dtype:
            raise OpCheckError(
                f"{op.name}: {what} gives output {i} shape {list(f._shape)} dtype "
                f"{f.dtype.name}, but the kernel gives shape {list(r._shape)} dtype {r.dtype.name}"
            )
        if only_meta and f.device.type != "meta":
            raise OpCheckError(
                f"{op.name}: {what} puts output {i} on {f.device}; for meta inputs a fake "
                "kernel must return meta tensors (build them from the inputs, e.g. "
                "x.new_empty(shape), or pass device=x.device)"
            )
        if f.device != r.device and f.device.type != "meta":
            raise OpCheckError(
                f"{op.name}: {what} puts output {i} on {f.device}, but the kernel on {r.device}"
            )


def test_aot_dispatch_dynamic(op: CustomOpDef, args, kwargs, atol, rtol) -> None:
    """Capture the call with the compile distribution's Tracer and run the graph: the op
    is one node and the outputs match eager."""
    tracer_cls = _tracer_class()
    positions = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
    names = [f"t{i}" for i, _ in positions]

    def call(*tensors):
        full = list(args)
        for (i, _), t in zip(positions, tensors):
            full[i] = t
        return op(*full, **kwargs)

    namespace: dict = {"call": call}
    params = ", ".join(names)
    exec(f"def captured({params}):\n    return call({params})\n", namespace)  # noqa: S102
    captured = namespace["captured"]
    samples = {n: _clone(a) for n, (_, a) in zip(names, positions)}
    gm = tracer_cls().trace(captured, sample_inputs=samples)
    graph = getattr(gm, "graph", None)
    nodes = list(getattr(graph, "nodes", ()) or ())
    if nodes:
        hits = [n for n in nodes if getattr(n, "target", None) is op]
        if len(hits) != 1:
            raise OpCheckError(
                f"{op.name}: the captured graph has {len(hits)} node(s) calling the op, "
                "expected exactly one (library ops are captured as one node)"
            )
    expected = _outputs(_no_grad_call(op, _clone(args), _clone(kwargs)))
    with tp.no_grad():
        got = _outputs(gm(*[_clone(a) for _, a in positions]))
    if len(got) != len(expected):
        raise OpCheckError(
            f"{op.name}: the captured graph returned {len(got)} output(s), eager {len(expected)}"
        )
    for i, (e, g) in enumerate(zip(expected, got)):
        if not isinstance(e, Tensor):
            continue
        a_tol, r_tol = _tolerances(e, atol, rtol)
        if not isinstance(g, Tensor) or e._shape != g._shape:
            raise OpCheckError(f"{op.name}: captured output {i} does not match eager in shape")
        if not np.allclose(_host(g), _host(e), rtol=r_tol, atol=a_tol, equal_nan=True):
            raise OpCheckError(
                f"{op.name}: captured output {i} differs from eager beyond atol={a_tol}, "
                f"rtol={r_tol}"
            )


def _tracer_class():
    try:
        graph = importlib.import_module("tensorplay.graph")
    except ImportError:
        graph = None
    tracer = getattr(graph, "Tracer", None)
    if tracer is None:
        raise _Skip(
            "graph capture needs the tensorplay-compile distribution's Tracer "
            "(pip install ./packages/tensorplay-compile)"
        )
    return tracer


def test_gradcheck(op: CustomOpDef, args, kwargs, atol, rtol) -> None:
    """The registered backward agrees with finite differences (float64 copies)."""
    # through the package attribute: importing the submodule by name would leave
    # ``tp.autograd.gradcheck`` bound to the module instead of the function
    gradcheck = tp.autograd.gradcheck
    declared = set(op.mutates_args)
    names = op.input_names()
    positions = [
        i
        for i, a in enumerate(args)
        if isinstance(a, Tensor)
        and a.dtype.is_floating_point
        and not (i < len(names) and names[i] in declared)
    ]
    if not positions:
        return
    inputs = tuple(args[i].detach().to(tp.float64).requires_grad_(True) for i in positions)

    def fn(*tensors):
        full = list(_clone(args))
        for i, t in zip(positions, tensors):
            full[i] = t
        outs = _outputs(op(*full, **_clone(kwargs)))
        return tuple(o for o in outs if isinstance(o, Tensor) and o.dtype.is_floating_point)

    gradcheck(fn, inputs, atol=1e-5 if atol is None else atol, rtol=1e-3 if rtol is None else rtol)


def test_vmap(op: CustomOpDef, args, kwargs, atol, rtol) -> None:
    """``tp.vmap`` of the op over a batch of two samples (the sample, and its floating
    tensors halved) equals the op on each sample: the op's ``register_vmap`` rule against
    the loop. An op without a rule is reported (vmap runs it as a loop, which is correct
    but slow): a skip, never a pass."""
    if op._vmap is None:
        raise _Skip(
            "the op has no register_vmap rule: tp.vmap runs it once per sample (correct, "
            "slow); register one with tensorplay.library.register_vmap"
        )
    positions = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
    if not positions:
        raise _Skip("no tensor argument to batch")
    first = _clone(args)
    second = tuple(
        a * 0.5 if isinstance(a, Tensor) and a.dtype.is_floating_point else a for a in _clone(args)
    )
    batched = [
        tp.stack([first[i], second[i]]) if i in positions else first[i] for i in range(len(args))
    ]
    in_dims = tuple(0 if i in positions else None for i in range(len(args)))
    with tp.no_grad():
        got = _outputs(tp.vmap(lambda *a: op(*a, **_clone(kwargs)), in_dims=in_dims)(*batched))
        want = [_outputs(op(*sample, **_clone(kwargs))) for sample in (first, second)]
    for k, g in enumerate(got):
        w = tp.stack([want[0][k], want[1][k]])
        if g.shape != w.shape:
            raise OpCheckError(
                f"{op.name}: vmap rule gave output {k} the shape {tuple(g.shape)} where the "
                f"loop over the batch gives {tuple(w.shape)}; check the out_dims it returns"
            )
        a, r = _tolerances(w, atol, rtol)
        if not np.allclose(_host(g), _host(w), atol=a, rtol=r, equal_nan=True):
            raise OpCheckError(
                f"{op.name}: the vmap rule's output {k} differs from the op run on each "
                "sample; it must compute what the op computes, batched along in_dims"
            )


_CHECKS = {
    "test_schema": test_schema,
    "test_autograd_registration": test_autograd_registration,
    "test_faketensor": test_faketensor,
    "test_aot_dispatch_dynamic": test_aot_dispatch_dynamic,
    "test_gradcheck": test_gradcheck,
    "test_vmap": test_vmap,
}
