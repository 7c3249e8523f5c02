"""Schemas are parsed and checked against the function, mutates_args and earlier
definitions (spec: Names and definitions)."""

from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay import library
from tensorplay.library._schema import Argument, parse_schema


def test_parse_reads_names_types_aliases_defaults_and_keyword_only_arguments():
    s = parse_schema(
        "ns::op(Tensor(a!) out, Tensor? w=None, *, float eps=1e-05) -> (Tensor, int[])"
    )
    assert s.name == "ns::op"
    assert s.arguments == (
        Argument("Tensor", "out", alias="a", is_write=True),
        Argument("Tensor?", "w", default="None"),
        Argument("float", "eps", default="1e-05", kwarg_only=True),
    )
    assert s.returns == (Argument("Tensor"), Argument("int[]"))


def test_infer_schema_output_parses():
    def weighted(x: tp.Tensor, n: int, out: tp.Tensor) -> tp.Tensor:
        return out

    text = library.infer_schema(weighted, mutates_args=("out",), op_name="mylib::weighted")
    assert [a.is_write for a in parse_schema(text).arguments] == [False, False, True]


@pytest.mark.parametrize(
    "schema, position, expected, found",
    [
        ("y(Tensor x -> Tensor", 11, "',' or ')'", "'->'"),
        ("(Tensor x) Tensor", 11, "'->'", "'Tensor'"),
        ("(Tnsor x) -> Tensor", 1, "a type", "'Tnsor'"),
        ("(Tensor(a! x) -> Tensor", 11, "')' closing the alias", "'x'"),
        ("(Tensor x=) -> Tensor", 10, "a default value", "')'"),
        ("(Tensor x) -> Tensor)", 20, "the end of the schema", "')'"),
        ("(Tensor x) ->", 13, "a type", "the end of the schema"),
    ],
)
def test_malformed_schemas_name_the_position(schema, position, expected, found):
    with pytest.raises(ValueError) as e:
        parse_schema(schema, where="mylib::op")
    message = str(e.value)
    assert message.startswith(f"mylib::op: malformed schema {schema!r}: expected {expected}")
    assert f"at position {position}, found {found}" in message
    assert message.endswith(f"    {schema}\n    {' ' * position}^")


def test_library_define_rejects_a_malformed_schema_like_torch(qualname, torch):
    ns = qualname().split("::")[0]
    with pytest.raises(RuntimeError, match="expected \\) but found 'arrow'"):
        torch.library.Library(f"tp_oracle_{ns}", "DEF").define("y(Tensor x -> Tensor")
    lib = library.Library(ns, "DEF")
    with pytest.raises(ValueError, match="expected ',' or '\\)' at position 11, found '->'"):
        lib.define("y(Tensor x -> Tensor")
    assert not library.has_op(f"{ns}::y")
    text = f"{ns}::y(Tensor x -> Tensor"
    with pytest.raises(ValueError, match=f"at position {text.index('->')}, found '->'"):
        library.define(text)


def test_custom_op_schema_must_mark_exactly_mutates_args(qualname, torch):
    def body(x):
        return x.clone()

    with pytest.raises(ValueError, match="schema suggests that the op mutates"):
        torch.library.custom_op(
            "tp_oracle::marks",
            lambda x: x.clone(),
            mutates_args=(),
            schema="(Tensor(a!) x) -> Tensor",
        )
    with pytest.raises(ValueError, match=r"marks \['x'\] as mutated .* mutates_args=\(\)"):
        library.custom_op(qualname("a"), body, mutates_args=(), schema="(Tensor(a!) x) -> Tensor")
    with pytest.raises(ValueError, match=r"marks \[\] as mutated .* mutates_args=\('x',\)"):
        library.custom_op(qualname("b"), body, mutates_args=("x",), schema="(Tensor x) -> Tensor")
    op = library.custom_op(
        qualname("c"), body, mutates_args=("x",), schema="(Tensor(a!) x) -> Tensor"
    )
    assert op.mutates_args == ("x",)
    assert not library.has_op(qualname("a")) and not library.has_op(qualname("b"))


def test_custom_op_schema_must_match_the_parameters(qualname):
    def body(x, n: int):
        return x * n

    with pytest.raises(ValueError, match=r"has 1 argument\(s\), but body has 2 parameter\(s\)"):
        library.custom_op(qualname("a"), body, schema="(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match="calls argument 1 'm', but parameter 1 of body is 'n'"):
        library.custom_op(qualname("b"), body, schema="(Tensor x, SymInt m) -> Tensor")
    with pytest.raises(ValueError, match="names the operator 'other::op'"):
        library.custom_op(qualname("c"), body, schema="other::op(Tensor x, SymInt n) -> Tensor")
    op = library.custom_op(qualname("d"), body, schema="(Tensor, SymInt) -> Tensor")
    assert op(tp.ones(2), 3).tolist() == [3.0, 3.0]


def test_define_marks_mutated_arguments_and_checks_the_first_kernel(qualname):
    name = qualname()
    library.define(f"{name}(Tensor x, Tensor(a!) out) -> ()")
    op = library.get_op(name)
    assert op.mutates_args == ("out",)
    with pytest.raises(
        ValueError, match="calls argument 0 'x', but parameter 0 of <lambda> is 'z'"
    ):
        library.impl(name, "cpu", lambda z, out: None)

    def kernel(x, out):
        out.numpy()[...] = x.numpy()

    library.impl(name, "cpu", kernel)
    out = tp.zeros(2)
    assert op(tp.ones(2), out) is None and out.tolist() == [1.0, 1.0] and out._version == 1


def test_a_mutated_argument_in_a_defined_schema_needs_a_name(qualname):
    with pytest.raises(ValueError, match="marks argument 0 as mutated but gives it no name"):
        library.define(qualname(), "(Tensor(a!)) -> ()")


def test_a_second_define_with_another_schema_raises_like_torch(qualname, torch):
    ns = qualname().split("::")[0]
    torch_lib = torch.library.Library(f"tp_oracle_{ns}", "DEF")
    torch_lib.define("z(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match="multiple times"):
        torch.library.define(f"tp_oracle_{ns}::z", "(Tensor x, int n) -> Tensor")

    library.define(f"{ns}::z", "(Tensor x) -> Tensor")
    op = library.get_op(f"{ns}::z")
    with pytest.raises(RuntimeError, match=f"{ns}::z is already defined with schema") as e:
        library.define(f"{ns}::z", "(Tensor x, int n) -> Tensor")
    assert "'(Tensor x, int n) -> Tensor' would change its signature" in str(e.value)
    assert library.get_op(f"{ns}::z") is op and op.schema == "(Tensor x) -> Tensor"
    # the same schema (spaces aside) or none: nothing changes
    library.define(f"{ns}::z(Tensor  x)->Tensor")
    library.define(f"{ns}::z")
    assert library.get_op(f"{ns}::z") is op


def test_a_fragment_may_repeat_a_definition_but_not_change_it(qualname):
    ns = qualname().split("::")[0]
    library.Library(ns, "DEF").define("op(Tensor x) -> Tensor")
    frag = library.Library(ns, "FRAGMENT")
    frag.define("op(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match="would change its signature"):
        frag.define("op(Tensor x, float a) -> Tensor")
    assert library.get_op(f"{ns}::op").schema == "(Tensor x) -> Tensor"


def test_custom_op_on_a_defined_name_is_refused(qualname):
    name = qualname()
    library.custom_op(name, lambda x: x * 2)
    with pytest.raises(RuntimeError, match="would change its signature"):
        library.define(f"{name}(Tensor x) -> Tensor")
