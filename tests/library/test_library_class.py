"""Library(ns, kind), define, impl, impl_abstract (spec: Top-level register_* ... Library)."""

from __future__ import annotations

import itertools

import pytest

import tensorplay as tp
from tensorplay import library

_ns = itertools.count()


def _namespace() -> str:
    return f"libns{next(_ns)}"


def test_def_library_defines_and_impl_adds_kernels():
    ns = _namespace()
    lib = library.Library(ns, "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    op = library.get_op(f"{ns}::twice")
    assert op.schema == "(Tensor x) -> Tensor"
    lib.impl("twice", lambda x: x * 2, device_type="CPU")
    assert op(tp.ones(2)).tolist() == [2.0, 2.0]
    assert getattr(tp.ops, ns).twice is op


def test_impl_as_decorator_with_dispatch_key_winning():
    ns = _namespace()
    lib = library.Library(ns, "DEF")
    lib.define(f"{ns}::op(Tensor x) -> Tensor")

    @lib.impl("op", device_type="CUDA", dispatch_key="CompositeExplicitAutograd")
    def _(x):
        return x + 5

    assert library.get_kernel(f"{ns}::op", "default") is _
    with pytest.raises(LookupError):
        library.get_kernel(f"{ns}::op", "cuda")


def test_impl_meta_registers_the_fake_kernel():
    ns = _namespace()
    lib = library.Library(ns, "DEF")
    lib.define("op(Tensor x) -> Tensor")
    lib.impl("op", lambda x: x + 1, device_type="CPU")
    lib.impl("op", lambda x: tp.empty(x.shape, device="meta"), device_type="Meta")
    assert library.get_op(f"{ns}::op")(tp.empty(3, device="meta")).shape == (3,)


def test_one_def_library_per_namespace():
    ns = _namespace()
    library.Library(ns, "DEF")
    with pytest.raises(RuntimeError, match="FRAGMENT"):
        library.Library(ns, "DEF")
    library.Library(ns, "FRAGMENT")
    library.Library(ns, "IMPL")


@pytest.mark.parametrize("ns,kind", [("ok", "BOGUS"), ("not-an-id", "DEF"), ("1x", "IMPL")])
def test_bad_kind_or_namespace_is_value_error(ns, kind):
    with pytest.raises(ValueError):
        library.Library(ns, kind)


def test_define_checks_the_namespace():
    ns = _namespace()
    lib = library.Library(ns, "DEF")
    with pytest.raises(ValueError, match="outside namespace"):
        lib.define("otherns::op(Tensor x) -> Tensor")


def test_redefining_outside_a_fragment_is_an_error_inside_one_is_not():
    ns = _namespace()
    lib = library.Library(ns, "DEF")
    lib.define("op(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match="already defined"):
        lib.define("op(Tensor x) -> Tensor")
    frag = library.Library(ns, "FRAGMENT")
    frag.define("op(Tensor x) -> Tensor")
    frag.define("other(Tensor x) -> Tensor")
    assert library.has_op(f"{ns}::other")


def test_impl_library_cannot_define():
    ns = _namespace()
    with pytest.raises(RuntimeError, match="IMPL libraries only add kernels"):
        library.Library(ns, "IMPL").define("op(Tensor x) -> Tensor")


def test_fallback_is_not_implemented():
    with pytest.raises(NotImplementedError, match="fallback"):
        library.Library(_namespace(), "FRAGMENT").fallback("CPU")


def test_op_without_kernel_explains_how_to_add_one():
    ns = _namespace()
    library.define(f"{ns}::bare(Tensor x) -> Tensor")
    with pytest.raises(NotImplementedError, match=rf"{ns}::bare has no kernel.*register_kernel"):
        library.get_op(f"{ns}::bare")(tp.ones(1))


def test_top_level_define_creates_if_absent_and_accepts_both_forms():
    ns = _namespace()
    library.define(f"{ns}::a(Tensor x) -> Tensor")
    op = library.get_op(f"{ns}::a")
    library.define(f"{ns}::a(Tensor x) -> Tensor")  # already there: kept
    assert library.get_op(f"{ns}::a") is op
    library.define(f"{ns}::b", "(Tensor x) -> Tensor")
    assert library.get_op(f"{ns}::b").schema == "(Tensor x) -> Tensor"
    with pytest.raises(ValueError, match="schema is given twice"):
        library.define(f"{ns}::c(Tensor x) -> Tensor", "(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match="namespace::name"):
        library.define("nonamespace(Tensor x) -> Tensor")


def test_top_level_impl_and_impl_abstract():
    ns = _namespace()
    library.define(f"{ns}::op(Tensor x) -> Tensor")
    library.impl(f"{ns}::op", "CPU", lambda x: x * 4)

    @library.impl(f"{ns}::op", "CompositeImplicitAutograd")
    def agnostic(x):
        return x * 8

    library.impl_abstract(f"{ns}::op", lambda x: tp.empty(x.shape, device="meta"))
    op = library.get_op(f"{ns}::op")
    assert op(tp.ones(1)).tolist() == [4.0]
    assert library.get_kernel(op, "CompositeImplicitAutograd") is agnostic
    assert op(tp.empty(2, device="meta")).device.type == "meta"
