"""What every kernel call guarantees (spec: Dispatch): outputs alias no input and no other
output, and the arguments in mutates_args get their version counter bumped."""

from __future__ import annotations

import pytest

import tensorplay as tp
from tensorplay import library


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize(
    "body, aliased",
    [
        (lambda x, w: x, "output 0 aliases input 'x'"),
        (lambda x, w: w[1:], "output 0 aliases input 'w'"),
        (lambda x, w: (x + 1, x.view(-1)), "output 1 aliases input 'x'"),
        (lambda x, w: (x + w, x), "output 1 aliases input 'x'"),
    ],
    ids=["input", "view", "second_output", "tuple"],
)
def test_an_output_aliasing_an_input_is_refused(qualname, body, aliased, requires_grad):
    # torch: "... may not alias any inputs to this custom operator or other returns ..."
    name = qualname()
    op = library.custom_op(name, body)
    op.register_autograd(lambda ctx, *g: (None, None))
    x = tp.ones(2, requires_grad=requires_grad)
    with pytest.raises(RuntimeError, match="may not alias") as e:
        op(x, tp.ones(2))
    assert str(e.value).startswith(f"{name}: {aliased}") and ".clone()" in str(e.value)
    assert x.grad_fn is None


def test_outputs_aliasing_each_other_are_refused(qualname):
    op = library.custom_op(qualname(), lambda x: (lambda y: (y, y[:1]))(x + 1))
    with pytest.raises(RuntimeError, match="output 1 aliases output 0"):
        op(tp.ones(2))


def test_a_new_tensor_over_the_same_memory_is_left_to_opcheck(qualname):
    # the per-call check compares storages (as torch's does); opcheck compares addresses
    op = library.custom_op(qualname(), lambda x: tp.from_numpy(x.numpy()))
    x = tp.ones(2)
    assert op(x).data_ptr() == x.data_ptr()


def _torch_version_bumps(torch, mutates_list: bool) -> int:
    """How much one call of a mutating torch custom op bumps its argument's version."""
    name = f"tp_oracle::bump_{int(mutates_list)}"
    if mutates_list:
        # explicit schemas: torch would resolve string annotations in this module's globals
        @torch.library.custom_op(name, mutates_args=("xs",), schema="(Tensor(a!)[] xs) -> ()")
        def op(xs) -> None:
            for x in xs:
                x.numpy()[...] += 1

        xs = [torch.zeros(2), torch.zeros(2)]
        op(xs)
        return xs[1]._version

    @torch.library.custom_op(name, mutates_args=("x",), schema="(Tensor(a!) x) -> ()")
    def op(x) -> None:
        x.numpy()[...] += 1

    x = torch.zeros(2)
    op(x)
    return x._version


@pytest.mark.parametrize("by_keyword", [False, True])
def test_a_declared_mutation_bumps_the_version(qualname, by_keyword):
    @library.custom_op(qualname(), mutates_args=("x",))
    def inc(y, x) -> None:
        x.numpy()[...] += 1  # numpy writes bump nothing by themselves

    x, y = tp.zeros(2), tp.zeros(2)
    inc(y, x=x) if by_keyword else inc(y, x)
    assert x._version == 1 and x.tolist() == [1.0, 1.0]
    assert y._version == 0
    inc(y, x=x) if by_keyword else inc(y, x)
    assert x._version == 2


def test_a_declared_list_mutation_bumps_every_element(qualname):
    @library.custom_op(qualname(), mutates_args=("xs",))
    def inc(xs) -> None:
        for x in xs:
            x.numpy()[...] += 1

    xs = [tp.zeros(2), tp.zeros(2)]
    inc(xs)
    assert [x._version for x in xs] == [1, 1]


@pytest.mark.parametrize("mutates_list", [False, True])
def test_torch_bumps_a_mutated_argument_once_per_call_as_we_do(torch, mutates_list):
    assert _torch_version_bumps(torch, mutates_list) == 1


def test_a_mutation_of_a_saved_tensor_is_caught_at_backward(qualname):
    @library.custom_op(qualname(), mutates_args=("x",))
    def inc(x) -> None:
        x.numpy()[...] += 1

    a = tp.ones(2, requires_grad=True)
    b = a * 1
    c = b * b  # saves b
    with tp.no_grad():
        inc(b)
    assert b.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
