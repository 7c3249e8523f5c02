"""``python -m tensorplay.oplib._check <built library>``: opcheck every operator.

Run by ``build(check=True)`` in a fresh process. Each operator is called on sample
arguments (its ``check:`` entry; otherwise tensors of shape ``[3, 4]`` and the scalar
defaults) through ``opcheck(test_utils="all")``. A failed gradcheck is narrowed down to the
input whose derivative is wrong. Prints a JSON list of failures (``op``, ``test``,
``input``, ``error``) and exits 0; any other exit is a crash the caller reports.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import tensorplay as tp
from tensorplay import library
from tensorplay.oplib._loader import OpLibrary, load
from tensorplay.oplib._spec import OpSpec

__all__ = ["sample_arguments", "check_library"]

_SCALAR_SAMPLES = {"float": 0.5, "int": 1, "bool": False, "int[]": [1], "float[]": [0.5]}


def sample_arguments(op: OpSpec) -> tuple[tuple, dict]:
    """Positional and keyword sample arguments for ``op`` (tensors: float32, seeded)."""
    gen = tp.Generator().manual_seed(0)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for a in op.schema.args:
        given = op.check.get(a.name)
        if a.is_tensor:
            shape = given if given is not None else [3, 4]
            value = tp.randn(shape, generator=gen)
        elif given is not None or a.name in op.check:
            value = given
        elif a.has_default:
            value = a.default
        elif a.kernel_type.endswith("?"):
            value = None
        elif a.kernel_type in _SCALAR_SAMPLES:
            value = _SCALAR_SAMPLES[a.kernel_type]
        else:
            raise ValueError(f"{op.qualname}: give a sample for argument {a.name!r} under 'check:'")
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def _blame(op: OpSpec, defined: Any, args: tuple, kwargs: dict) -> str | None:
    """The input whose derivative formula fails gradcheck on its own, if one does."""
    positions = [
        i for i, a in enumerate(op.schema.args) if a.name in op.derivatives and not a.kwarg_only
    ]
    for i in positions:
        inputs = [a.detach().to(tp.float64) if isinstance(a, tp.Tensor) else a for a in args]
        inputs[i] = inputs[i].requires_grad_(True)

        def fn(*xs: Any) -> Any:
            return defined(*xs, **kwargs)

        if not tp.autograd.gradcheck(fn, tuple(inputs), raise_exception=False):
            return op.schema.args[i].name
    return None


def check_library(lib: OpLibrary) -> list[dict[str, Any]]:
    failures = []
    for op in lib.spec.ops:
        defined = lib.ops[op.name]
        try:
            args, kwargs = sample_arguments(op)
        except ValueError as exc:
            failures.append({"op": op.name, "test": "samples", "input": None, "error": str(exc)})
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # skips (no CUDA, no vmap rule) are not failures
            found = library.opcheck(defined, args, kwargs, test_utils="all", raise_exception=False)
        for test, error in found.items():
            blamed = _blame(op, defined, args, kwargs) if test == "test_gradcheck" else None
            failures.append({"op": op.name, "test": test, "input": blamed, "error": error})
    return failures


def main(argv: list[str]) -> int:
    (folder,) = argv
    print(json.dumps(check_library(load(folder))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
