"""Operator overloads (``tp.ops.ns.foo.Tensor``, ``.default``, ``_schema``) and
``_scoped_library`` (a Library that withdraws its registrations), with torch.library as
the reference where it can run the same definitions."""

from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay import capture, library
from tensorplay.library import _scoped_library
from tensorplay.library._schema import parse_schema


def _ns(qualname) -> str:
    return qualname().split("::")[0]


def _foo_packet(lib):
    """``foo.Tensor(Tensor x)`` doubles, ``foo.Scalar(Tensor x, float s)`` scales."""
    lib.define("foo.Tensor(Tensor x) -> Tensor")
    lib.define("foo.Scalar(Tensor x, float s) -> Tensor")
    lib.impl("foo.Tensor", lambda x: x * 2)
    lib.impl("foo.Scalar", lambda x, s: x * s)


# ---- _scoped_library ---------------------------------------------------------------------


def test_scoped_library_withdraws_its_ops_on_exit(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2)
        assert getattr(tp.ops, ns).twice(tp.ones(2)).tolist() == [2.0, 2.0]
    assert not library.has_op(f"{ns}::twice")
    assert not hasattr(tp.ops, ns) and ns not in dir(tp.ops)  # its last op: the namespace goes
    with pytest.raises(RuntimeError, match="not defined"):
        library.get_op(f"{ns}::twice")


def test_a_withdrawn_name_can_be_defined_again_with_another_schema(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "DEF") as lib:
        lib.define("op(Tensor x) -> Tensor")
        lib.impl("op", lambda x: x + 1)
        assert getattr(tp.ops, ns).op(tp.zeros(1)).tolist() == [1.0]
    with _scoped_library(ns, "DEF") as lib:
        lib.define("op(Tensor x, int n) -> Tensor")
        lib.impl("op", lambda x, n: x + n)
        assert getattr(tp.ops, ns).op(tp.zeros(1), 5).tolist() == [5.0]
        assert str(getattr(tp.ops, ns).op.default._schema) == f"{ns}::op(Tensor x, int n) -> Tensor"


def test_calling_a_held_op_after_withdrawal_says_it_was_deregistered(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")
        lib.impl("op", lambda x: x + 1)
        op = library.get_op(f"{ns}::op")
    with pytest.raises(RuntimeError, match=f"{ns}::op was deregistered.*Define it again"):
        op(tp.zeros(1))
    with pytest.raises(RuntimeError, match="was deregistered"):
        op(tp.zeros(1, requires_grad=True))


def test_withdrawal_also_happens_when_the_block_raises(qualname):
    ns = _ns(qualname)
    with pytest.raises(KeyError), _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")
        raise KeyError("boom")
    assert not library.has_op(f"{ns}::op")


def test_a_scoped_def_library_frees_its_namespace(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "DEF"):
        with pytest.raises(RuntimeError, match="already has a DEF library"):
            library.Library(ns, "DEF")
    assert library.Library(ns, "DEF").kind == "DEF"


def test_matches_torch_scoped_library_on_the_same_definitions(qualname, torch):
    ns = _ns(qualname)
    seen = {}
    for name, lib_module, ops in (
        ("torch", torch.library, torch.ops),
        ("tp", library, tp.ops),
    ):
        tensor = torch.ones if name == "torch" else tp.ones
        with lib_module._scoped_library(f"tp_oracle_{ns}", "FRAGMENT") as lib:
            lib.define("twice(Tensor x) -> Tensor")
            lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
            inside = getattr(ops, f"tp_oracle_{ns}").twice(tensor(2)).tolist()
        # (tp.ops drops an emptied namespace; torch.ops makes any name a namespace)
        after = hasattr(getattr(ops, f"tp_oracle_{ns}", None), "twice")
        seen[name] = (inside, after)
    assert seen["tp"] == seen["torch"] == ([2.0, 2.0], False)


def test_kernels_added_to_another_op_are_restored_on_exit(qualname):
    ns = _ns(qualname)
    op = library.custom_op(f"{ns}::op", lambda x: x * 2, mutates_args=())
    with _scoped_library(ns, "IMPL") as lib:
        lib.impl("op", lambda x: x * 3, device_type="CPU")
        lib.impl("op", lambda x: x * 4)  # the device-agnostic slot: replaces the body
        assert op(tp.ones(1)).tolist() == [3.0]
        with op.set_kernel_enabled("cpu", False):
            assert op(tp.ones(1)).tolist() == [4.0]
    assert op(tp.ones(1)).tolist() == [2.0]
    assert library.get_kernel(op, "default") is op.__wrapped__
    with pytest.raises(LookupError):
        library.get_kernel(op, "cpu")
    assert library.has_op(f"{ns}::op")  # the library did not define it


def test_fake_autograd_vmap_and_autocast_registered_with_lib_are_restored(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2, mutates_args=())
    op.register_autograd(lambda ctx, g: g * 2)
    original_vjp = op._vjp

    def rule(info, in_dims, x):
        return op(x), 0

    with _scoped_library(op.namespace, "FRAGMENT") as lib:
        library.register_fake(op, lambda x: tp.empty(x.shape, device="meta"), lib=lib)
        library.register_autograd(op, lambda ctx, g: g * 7, lib=lib)
        library.register_vmap(op, rule, lib=lib)
        library.register_autocast(op, "cpu", tp.bfloat16, lib=lib)
        assert op(tp.empty(3, device="meta")).shape == (3,)
        x = tp.ones(1, requires_grad=True)
        op(x).sum().backward()
        assert x.grad.tolist() == [7.0]
        with tp.autocast("cpu"):
            assert op(tp.ones(1)).dtype == tp.bfloat16
    assert op._fake is None and op._vjp is original_vjp and op._vmap is None
    x = tp.ones(1, requires_grad=True)
    op(x).sum().backward()
    assert x.grad.tolist() == [2.0]
    with tp.autocast("cpu"):
        assert op(tp.ones(1)).dtype == tp.float32


def test_a_registration_made_over_the_library_s_survives_its_exit(qualname):
    op = library.custom_op(qualname(), lambda x: x * 2, mutates_args=())
    with _scoped_library(op.namespace, "IMPL") as lib:
        lib.impl(op.opname, lambda x: x * 3, device_type="CPU")
        op.register_kernel("cpu", lambda x: x * 5)  # not through lib: not the library's
    assert op(tp.ones(1)).tolist() == [5.0]


def test_top_level_define_and_impl_with_lib_are_withdrawn(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        library.define(f"{ns}::op", "(Tensor x) -> Tensor", lib=lib)
        library.impl(f"{ns}::op", "cpu", lambda x: x - 1, lib=lib)

        @library.register_kernel(f"{ns}::op", "cuda", lib=lib)
        def _(x):
            return x

        assert getattr(tp.ops, ns).op(tp.ones(1)).tolist() == [0.0]
    assert not library.has_op(f"{ns}::op")


def test_a_fragment_repeating_a_definition_does_not_withdraw_it(qualname):
    ns = _ns(qualname)
    library.define(f"{ns}::op(Tensor x) -> Tensor")
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")  # the same schema: the existing op
    assert library.has_op(f"{ns}::op")


def test_lib_must_be_a_library(qualname):
    with pytest.raises(TypeError, match="lib must be None or a tensorplay.library.Library"):
        library.define(qualname(), "(Tensor x) -> Tensor", lib="mylib")
    op = library.custom_op(qualname("b"), lambda x: x)
    with pytest.raises(TypeError, match="got int"):
        library.register_kernel(op, "cpu", lambda x: x, lib=3)


def test_a_destroyed_library_refuses_further_use(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("op(Tensor x) -> Tensor")
    lib._destroy()  # idempotent
    with pytest.raises(RuntimeError, match="was destroyed.*create a new Library"):
        lib.define("other(Tensor x) -> Tensor")
    with pytest.raises(RuntimeError, match="was destroyed"):
        lib.impl("op", lambda x: x)


def test_library_dispatch_key_is_impl_s_default(qualname):
    ns = _ns(qualname)
    library.define(f"{ns}::op(Tensor x) -> Tensor")

    def kernel(x):
        return x + 1

    with _scoped_library(ns, "IMPL", "CPU") as lib:
        lib.impl("op", kernel)
        assert library.get_kernel(f"{ns}::op", "cpu") is kernel
    with pytest.raises(LookupError):
        library.get_kernel(f"{ns}::op", "cpu")
    with pytest.raises(ValueError, match="unknown device type 'TPU'"):
        library.Library(ns, "IMPL", "TPU")


# ---- overloads ---------------------------------------------------------------------------


def test_overloads_of_one_packet_resolve_by_argument_types(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        _foo_packet(lib)
        foo = getattr(tp.ops, ns).foo
        assert foo.overloads() == ["Tensor", "Scalar"]
        assert foo(tp.ones(2)).tolist() == [2.0, 2.0]
        assert foo(tp.ones(2), 3.0).tolist() == [3.0, 3.0]
        assert foo(tp.ones(2), s=4.0).tolist() == [4.0, 4.0]
        assert foo.Scalar(tp.ones(1), 5.0).tolist() == [5.0]


def test_resolution_takes_the_first_overload_that_accepts_like_torch(qualname, torch):
    ns = _ns(qualname)
    results = {}
    for name, lib_module, ops, tensor in (
        ("torch", torch.library, torch.ops, torch.zeros),
        ("tp", library, tp.ops, tp.zeros),
    ):
        with lib_module._scoped_library(f"tp_oracle_{ns}", "FRAGMENT") as lib:
            lib.define("q.float(Tensor x, float n) -> Tensor")  # an int is a float too
            lib.define("q.int(Tensor x, int n) -> Tensor")
            lib.impl("q.float", lambda x, n: x + 2, "CompositeExplicitAutograd")
            lib.impl("q.int", lambda x, n: x + 1, "CompositeExplicitAutograd")
            q = getattr(ops, f"tp_oracle_{ns}").q
            results[name] = (q(tensor(1), 3).tolist(), q(tensor(1), 3.0).tolist(), q.overloads())
    assert results["tp"] == results["torch"] == ([2.0], [2.0], ["float", "int"])


def test_optional_and_list_types_take_part_in_resolution(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("f.list(Tensor x, int[] dims) -> Tensor")
        lib.define("f.opt(Tensor x, Tensor? w=None) -> Tensor")
        lib.impl("f.list", lambda x, dims: x + len(dims))
        lib.impl("f.opt", lambda x, w=None: x.clone() if w is None else x * w)
        f = getattr(tp.ops, ns).f
        assert f(tp.ones(1), [0, 1, 2]).tolist() == [4.0]
        assert f(tp.ones(1)).tolist() == [1.0]  # dims missing: f.opt with its default
        assert f(tp.ones(1), None).tolist() == [1.0]
        assert f(tp.ones(1), tp.full((1,), 3.0)).tolist() == [3.0]


def test_no_accepting_overload_is_a_type_error_saying_why_each_refused(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        _foo_packet(lib)
        with pytest.raises(TypeError) as e:
            getattr(tp.ops, ns).foo(tp.ones(2), "x")
    message = str(e.value)
    assert f"tp.ops.{ns}.foo: no overload accepts (Tensor, str)" in message
    assert f"{ns}::foo.Tensor: takes at most 1 positional argument(s), got 2" in message
    assert f"{ns}::foo.Scalar: argument 's' expects float, got str" in message
    assert f"call an overload directly, e.g. tp.ops.{ns}.foo.Tensor(...)" in message


def test_overload_objects_describe_themselves_like_torch(qualname, torch):
    ns = _ns(qualname)
    described = {}
    for name, lib_module, ops in (("torch", torch.library, torch.ops), ("tp", library, tp.ops)):
        with lib_module._scoped_library(f"tp_oracle_{ns}", "FRAGMENT") as lib:
            lib.define("foo.Tensor(Tensor x) -> Tensor")
            foo = getattr(ops, f"tp_oracle_{ns}").foo
            o = foo.Tensor
            described[name] = (
                repr(o),
                str(o),
                o.name(),
                o._overloadname,
                o.__name__,
                o.__qualname__,
                o.overloadpacket is foo,
                o is foo.Tensor,
                repr(foo),
                str(foo),
                foo._qualified_op_name,
                foo.__name__,
            )
    assert described["tp"] == described["torch"]


def test_an_unknown_overload_lists_the_known_ones(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        _foo_packet(lib)
        with pytest.raises(
            AttributeError, match=r"has no overload 'out' \(overloads: \['Tensor', 'Scalar'\]\)"
        ):
            _ = getattr(tp.ops, ns).foo.out


def test_a_custom_op_is_its_own_packet_with_a_default_overload(qualname):
    name = qualname("scaled")

    @library.custom_op(name, mutates_args=())
    def scaled(x, factor: float = 2.0):
        return x * factor

    packet = getattr(tp.ops, scaled.namespace).scaled
    assert packet is scaled and scaled.overloads() == ["default"]
    assert scaled._qualified_op_name == name
    default = scaled.default
    assert default is scaled.default and default.name() == name
    assert default(tp.ones(1), factor=3.0).tolist() == [3.0]
    assert default.overloadpacket is scaled


def test_a_named_overload_turns_the_name_into_a_packet_and_back(qualname):
    ns = _ns(qualname)
    plain = library.custom_op(f"{ns}::foo", lambda x: x + 1, mutates_args=())
    with _scoped_library(ns, "FRAGMENT") as lib:
        lib.define("foo.Scalar(Tensor x, float s) -> Tensor")
        lib.impl("foo.Scalar", lambda x, s: x + s)
        foo = getattr(tp.ops, ns).foo
        assert foo is not plain and foo.overloads() == ["default", "Scalar"]
        assert foo.default(tp.zeros(1)).tolist() == [1.0]
        assert foo(tp.zeros(1)).tolist() == [1.0]
        assert foo(tp.zeros(1), 5.0).tolist() == [5.0]
    assert getattr(tp.ops, ns).foo is plain


def test_registration_functions_take_overload_names_and_objects(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        _foo_packet(lib)
        tensor_op = library.get_op(f"{ns}::foo.Tensor")
        assert tensor_op.name == f"{ns}::foo.Tensor" and tensor_op.overload_name == "Tensor"
        library.register_kernel(getattr(tp.ops, ns).foo.Tensor, "cpu", lambda x: x * 10, lib=lib)
        assert getattr(tp.ops, ns).foo(tp.ones(1)).tolist() == [10.0]
        library.register_fake(f"{ns}::foo.Tensor", lambda x: x.new_empty(x.shape), lib=lib)
        failures = library.opcheck(
            getattr(tp.ops, ns).foo.Tensor,
            (tp.ones(2),),
            test_utils="test_faketensor",
            raise_exception=False,
        )
        assert failures == {}


def test_default_names_the_default_overload_when_looking_up(qualname):
    op = library.custom_op(qualname(), lambda x: x, mutates_args=())
    assert library.get_op(f"{op.name}.default") is op and library.has_op(f"{op.name}.default")


def test_a_packet_is_refused_where_one_overload_is_needed(qualname):
    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        _foo_packet(lib)
        with pytest.raises(
            TypeError, match=r"several overloads \['Tensor', 'Scalar'\].*foo\.Tensor"
        ):
            library.register_kernel(getattr(tp.ops, ns).foo, "cpu", lambda x: x)
        with pytest.raises(RuntimeError, match=r"has no default overload.*'Tensor', 'Scalar'"):
            lib.impl("foo", lambda x: x)


def test_default_is_reserved_when_defining_like_torch(qualname, torch):
    ns = _ns(qualname)
    with torch.library._scoped_library(f"tp_oracle_{ns}", "FRAGMENT") as lib:
        with pytest.raises(RuntimeError, match="default is not a legal overload name"):
            lib.define("foo.default(Tensor x) -> Tensor")
    with _scoped_library(ns, "FRAGMENT") as lib:
        with pytest.raises(ValueError, match=f"'default' is reserved.*define it as '{ns}::foo'"):
            lib.define("foo.default(Tensor x) -> Tensor")


@pytest.mark.parametrize("bad", ["ns::foo.1x", "ns::foo.", "ns::foo.a.b", "ns.x::foo"])
def test_malformed_overload_names_are_value_errors(bad):
    with pytest.raises(ValueError, match="operator name"):
        library.get_op(bad)


def test_a_packet_call_under_capture_records_the_chosen_overload(qualname):
    class Symbolic(capture.Proxy):
        pass

    class Tracer:
        def __init__(self):
            self.calls = []

        def record_call(self, target, args, kwargs):
            self.calls.append(target)
            return Symbolic()

    ns = _ns(qualname)
    with _scoped_library(ns, "FRAGMENT") as lib:
        _foo_packet(lib)
        tracer = Tracer()
        with capture.tracing(tracer):
            getattr(tp.ops, ns).foo(Symbolic(), 2.0)
        assert tracer.calls == [library.get_op(f"{ns}::foo.Scalar")]


# ---- schemas -----------------------------------------------------------------------------

_SCHEMAS = [
    "ns::foo.out(Tensor x, *, int a=1, Tensor(a!) out) -> Tensor(a!)",
    'ns::f(Tensor x, float? e=None, str m="mean", bool b=False, SymInt n=3) -> (Tensor, Tensor)',
    "ns::g(Tensor[] xs, Scalar s=1, ScalarType? dt=None) -> ()",
    "ns::h(Tensor(a) x) -> Tensor(a)",
    "ns::k(Tensor x) -> (Tensor values, Tensor indices)",
    "ns::c(Tensor(a!)? x, Tensor(b)[] y) -> Tensor(a!)?",
    "foo(Tensor x) -> Tensor",
]


@pytest.mark.parametrize("text", _SCHEMAS)
def test_schema_str_round_trips_and_matches_torch(text, torch):
    ours = parse_schema(text)
    assert str(ours) == text == str(torch._C.parse_schema(text))


@pytest.mark.parametrize("text", _SCHEMAS)
def test_schema_fields_match_torch(text, torch):
    ours, theirs = parse_schema(text), torch._C.parse_schema(text)
    assert (ours.name, ours.overload_name) == (theirs.name, theirs.overload_name)
    assert [(a.name, a.kwarg_only) for a in ours.arguments] == [
        (a.name, a.kwarg_only) for a in theirs.arguments
    ]
    assert [a.name or "" for a in ours.returns] == [r.name for r in theirs.returns]


def test_spacing_is_canonical_and_float_defaults_keep_their_text():
    assert str(parse_schema("ns::m( Tensor  x,float eps=1e-05 )->Tensor")) == (
        "ns::m(Tensor x, float eps=1e-05) -> Tensor"
    )


def test_defined_overloads_carry_their_schema(qualname, torch):
    ns = _ns(qualname)
    schemas = {}
    for name, lib_module, ops in (("torch", torch.library, torch.ops), ("tp", library, tp.ops)):
        with lib_module._scoped_library(f"tp_oracle_{ns}", "FRAGMENT") as lib:
            lib.define("foo.Scalar(Tensor x, *, int n=2) -> Tensor")
            lib.define("bar(Tensor x) -> Tensor")
            space = getattr(ops, f"tp_oracle_{ns}")
            scalar, bar = space.foo.Scalar._schema, space.bar.default._schema
            schemas[name] = (
                str(scalar),
                scalar.name,
                scalar.overload_name,
                [a.name for a in scalar.arguments],
                str(bar),
                bar.overload_name,
            )
    assert schemas["tp"] == schemas["torch"]


def test_a_custom_op_without_schema_infers_one_like_torch(qualname, torch):
    def body(x, n: int = 3, m: str = "a", b: bool = True):
        return x * n

    # the fixture's torch is not a module global, so a string annotation would not resolve
    body.__annotations__.update({"x": torch.Tensor, "return": torch.Tensor})

    def tp_body(x: tp.Tensor, n: int = 3, m: str = "a", b: bool = True) -> tp.Tensor:
        return x * n

    ns = _ns(qualname)
    theirs = torch.library.custom_op(f"tp_oracle_{ns}::op", body, mutates_args=())
    ours = library.custom_op(f"tp_oracle_{ns}::op", tp_body, mutates_args=())
    assert str(ours.default._schema) == str(theirs._opoverload._schema)
    assert str(ours.default._schema) == (
        f'tp_oracle_{ns}::op(Tensor x, SymInt n=3, str m="a", bool b=True) -> Tensor'
    )


def test_an_op_without_schema_or_kernel_has_no_schema_yet(qualname):
    name = qualname()
    library.define(name)
    op = library.get_op(name)
    with pytest.raises(RuntimeError, match="defined without a schema and has no kernel yet"):
        _ = op.default._schema
    library.impl(name, "cpu", lambda x, scale: x * scale)
    assert str(op.default._schema) == f"{name}(Tensor x, Tensor scale) -> Tensor"


def test_a_default_without_a_schema_spelling_is_a_clear_error(qualname):
    op = library.custom_op(qualname(), lambda x, dtype=tp.float16: x.to(dtype), mutates_args=())
    with pytest.raises(
        ValueError, match="default .* of parameter 'dtype' .* has no schema spelling"
    ):
        _ = op.default._schema
