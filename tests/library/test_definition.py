"""Defining operators: names, arguments, the registry, introspection (spec: Names and
definitions)."""

from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay import library


def _body(x):
    return x + 1


@pytest.mark.parametrize("bad", ["noseparator", "a::b::c", "1ns::op", "ns::", "::op", "ns::op-x"])
def test_malformed_names_are_value_errors(bad):
    with pytest.raises(ValueError, match="namespace::name"):
        library.custom_op(bad, _body)


def test_non_str_name_is_a_type_error():
    with pytest.raises(TypeError, match="must be a str"):
        library.custom_op(42, _body)


def test_mutates_args_must_be_an_iterable_of_names(qualname):
    with pytest.raises(TypeError, match=r"mutates_args=\('x',\)"):
        library.custom_op(qualname(), _body, mutates_args="x")
    with pytest.raises(TypeError, match="argument names"):
        library.custom_op(qualname(), _body, mutates_args=(1,))
    with pytest.raises(ValueError, match="not a parameter"):
        library.custom_op(qualname(), _body, mutates_args=("y",))


@pytest.mark.parametrize("schema", ["(Tensor x) -> Tensor", "{name}(Tensor x) -> Tensor"])
def test_valid_schemas_are_kept_verbatim(qualname, schema):
    schema = schema.format(name=qualname())
    op = library.custom_op(qualname(), _body, schema=schema)
    assert op.schema == schema


@pytest.mark.parametrize("schema", ["Tensor x -> Tensor", "op(Tensor x)", "a::b::c(Tensor)", 3])
def test_bad_schemas_are_value_errors(qualname, schema):
    with pytest.raises(ValueError, match="schema"):
        library.custom_op(qualname(), _body, schema=schema)


def test_decorator_and_direct_forms(qualname):
    direct = library.custom_op(qualname("a"), _body, mutates_args=())

    @library.custom_op(qualname("b"), mutates_args=())
    def decorated(x):
        return x * 3

    assert direct(tp.ones(2)).tolist() == [2.0, 2.0]
    assert decorated(tp.ones(2)).tolist() == [3.0, 3.0]


def test_introspection(qualname):
    name = qualname("intro")
    op = library.custom_op(name, _body, mutates_args=["x"])
    ns = name.split("::")[0]
    assert (op.name, op.namespace, op.opname) == (name, ns, "intro")
    assert op.__name__ == name and repr(op) == f"<custom_op {name}>"
    assert op.mutates_args == ("x",) and op.schema is None
    assert isinstance(op, library.CustomOpDef)
    assert not op.is_triton_op and not op.is_tile_lang_op


def test_triton_and_tile_lang_ops_are_flagged(qualname):
    t = library.triton_op(qualname("t"), _body)
    tl = library.tile_lang_op(qualname("tl"), _body)
    assert t.is_triton_op and not t.is_tile_lang_op and repr(t) == f"<triton_op {t.name}>"
    assert tl.is_tile_lang_op and not tl.is_triton_op and repr(tl) == f"<tile_lang_op {tl.name}>"
    assert t(tp.zeros(1)).tolist() == [1.0]


def test_redefinition_is_a_runtime_error(qualname):
    name = qualname()
    library.custom_op(name, _body)
    with pytest.raises(RuntimeError, match=rf"{name} is already defined.*register_kernel"):
        library.custom_op(name, _body)


def test_get_op_and_has_op(qualname):
    name = qualname()
    assert not library.has_op(name)
    with pytest.raises(RuntimeError, match=rf"{name} is not defined.*custom_op"):
        library.get_op(name)
    op = library.custom_op(name, _body)
    assert library.has_op(name) and library.get_op(name) is op
    ns, short = name.split("::")
    assert getattr(getattr(tp.ops, ns), short) is op


def test_register_functions_take_an_op_or_its_name(qualname):
    name = qualname()
    op = library.custom_op(name, _body)
    library.register_kernel(name, "cpu", lambda x: x * 10)
    assert op(tp.ones(1)).tolist() == [10.0]
    library.register_kernel(op, "cpu", lambda x: x * 20)
    assert op(tp.ones(1)).tolist() == [20.0]
    with pytest.raises(TypeError, match="CustomOpDef or a qualified"):
        library.register_kernel(3.5, "cpu", _body)
    with pytest.raises(RuntimeError, match="not defined"):
        library.register_fake(qualname("missing"), _body)


def test_register_vmap_stores_and_returns_the_rule(qualname):
    op = library.custom_op(qualname(), _body)

    def rule(info, in_dims, x):
        return x, 0

    assert op.register_vmap(rule) is rule and op._vmap is rule
    assert library.register_vmap(op, rule) is rule
    with pytest.raises(TypeError, match="callable"):
        op.register_vmap(42)


def test_docstring_and_wrapped_body_are_kept(qualname):
    def body(x):
        """Adds one."""
        return x + 1

    op = library.custom_op(qualname(), body)
    assert op.__doc__ == "Adds one." and op.__wrapped__ is body


def test_public_names_are_the_spec_list():
    spec = (
        "Library CustomOpDef custom_op triton_op tile_lang_op wrap_triton wrap_tilelang "
        "register_kernel register_fake register_autograd register_vmap register_autocast "
        "define impl impl_abstract infer_schema opcheck get_kernel get_op has_op "
        "TritonKernelWrapper TileLangKernelWrapper"
    ).split()
    assert sorted(library.__all__) == sorted(spec)
    assert all(hasattr(library, n) for n in spec)
    assert tp.library is library
