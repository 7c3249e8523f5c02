"""infer_schema (spec: infer_schema)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import pytest

import tensorplay as tp
from tensorplay.library import infer_schema


def weighted(x: tp.Tensor, n: int, out: tp.Tensor) -> tp.Tensor:
    return out


def test_spec_example():
    got = infer_schema(weighted, mutates_args=("out",), op_name="mylib::weighted")
    assert got == "mylib::weighted(Tensor, SymInt, Tensor(a!)) -> Tensor"


def test_function_name_is_the_default_head():
    assert infer_schema(weighted, mutates_args=()) == "weighted(Tensor, SymInt, Tensor) -> Tensor"


def test_scalars_optionals_and_lists():
    def f(
        x,
        a: float,
        b: bool,
        c: str,
        d: Optional[tp.Tensor],  # noqa: UP045 - the typing spelling must work too
        e: int | None,
        g: list[tp.Tensor],
        h: Sequence[int],
        *args,
        **kwargs,
    ) -> tuple[tp.Tensor, tp.Tensor]:
        return x, x

    assert infer_schema(f, mutates_args=()) == (
        "f(Tensor, float, bool, str, Tensor?, SymInt?, Tensor[], SymInt[]) -> (Tensor, Tensor)"
    )


def test_mutated_arguments_get_letters_in_order():
    def f(a, b, c) -> None:
        return None

    assert infer_schema(f, mutates_args=("c", "a")) == "f(Tensor(a!), Tensor, Tensor(b!)) -> ()"


def test_string_annotations_resolve():
    ns: dict = {}
    exec(  # noqa: S102 - a function defined under postponed annotations
        "from __future__ import annotations\n"
        "import tensorplay as tp\n"
        "def f(x: tp.Tensor, n: int, y: tp.Tensor | None) -> tp.Tensor:\n    return x\n",
        ns,
    )
    assert infer_schema(ns["f"], mutates_args=()) == "f(Tensor, SymInt, Tensor?) -> Tensor"


def test_errors_name_the_parameter():
    def f(x, y: dict):
        return x

    with pytest.raises(ValueError, match="parameter 'y'"):
        infer_schema(f, mutates_args=())
    with pytest.raises(ValueError, match="not a parameter"):
        infer_schema(f, mutates_args=("z",))
    with pytest.raises(TypeError, match="mutates_args"):
        infer_schema(f, mutates_args="x")
