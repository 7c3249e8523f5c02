"""``__tensorplay_function__`` and ``TensorPlayFunctionMode`` (tensorplay.overrides)."""

import threading

import pytest

import tensorplay as tp
from tensorplay import overrides
from tensorplay.overrides import (
    TensorPlayFunctionMode,
    get_overridable_functions,
    handle_tensorplay_function,
    has_tensorplay_function,
    is_tensor_like,
)

# ---- the seed examples (docs: "Extending the Python API"), verbatim ----------------------


class MyArray:
    def __init__(self, tensor):
        self.tensor = tensor

    def __tensorplay_function__(self, func, types, args, kwargs):
        if func is tp.add:
            return MyArray(tp.add(args[0].tensor, args[1].tensor))
        return NotImplemented


def test_seed_wrapper_type():
    m1, m2 = MyArray(tp.ones(2)), MyArray(tp.ones(2))
    assert has_tensorplay_function((m1, m2))
    result = handle_tensorplay_function(tp.add, (m1, m2), m1, m2)
    assert isinstance(result, MyArray)
    assert result.tensor.tolist() == [2.0, 2.0]
    # the public function itself dispatches the same way
    assert tp.add(m1, m2).tensor.tolist() == [2.0, 2.0]


class DoubleInputsMode(TensorPlayFunctionMode):
    def __tensorplay_function__(self, func, types, args, kwargs):
        if func is tp.add:
            return tp.add(args[0] * 2, args[1] * 2)
        return super().__tensorplay_function__(func, types, args, kwargs)


def test_seed_mode():
    with DoubleInputsMode():
        inside = tp.add(tp.ones(2), tp.ones(2))  # -> tensor([4., 4.])
    outside = tp.add(tp.ones(2), tp.ones(2))  # -> tensor([2., 2.])
    assert inside.tolist() == [4.0, 4.0]
    assert outside.tolist() == [2.0, 2.0]
    assert overrides._active_modes() == ()


# ---- dispatch order ----------------------------------------------------------------------


class Recorder:
    """Records which handler ran; returns ``NotImplemented`` unless ``accept``."""

    log: list = []
    accept = True

    def __init__(self, name="x"):
        self.name = name

    def __tensorplay_function__(self, func, types, args, kwargs):
        Recorder.log.append((type(self).__name__, func, types))
        return type(self).__name__ if type(self).accept else NotImplemented


class Base(Recorder):
    pass


class Sub(Base):
    pass


class Other(Recorder):
    pass


@pytest.fixture(autouse=True)
def _clear_log():
    Recorder.log = []
    yield
    Recorder.log = []


def test_subclass_before_base():
    assert tp.add(Base(), Sub()) == "Sub"
    assert Recorder.log[0][2] == (Sub, Base)


def test_left_to_right():
    assert tp.add(Other(), Base()) == "Other"
    assert tp.add(Base(), Other()) == "Base"


def test_each_type_once():
    assert tp.add(Base(), Base()) == "Base"
    assert Recorder.log[0][2] == (Base,)


def test_not_implemented_defers():
    class Decline(Recorder):
        accept = False

    assert tp.mul(Decline(), Other()) == "Other"
    assert [entry[0] for entry in Recorder.log] == ["Decline", "Other"]
    assert Recorder.log[0][2] == (Decline, Other)


def test_no_implementation_type_error():
    class Decline(Recorder):
        accept = False

    with pytest.raises(TypeError, match=r"no implementation found for 'tensorplay.add' on types"):
        tp.add(Decline(), tp.ones(2))


def test_func_args_kwargs():
    seen = {}

    class Spy:
        def __tensorplay_function__(self, func, types, args, kwargs):
            seen.update(func=func, types=types, args=args, kwargs=kwargs)
            return "spy"

    s = Spy()
    t = tp.ones(2)
    assert tp.add(t, s, alpha=2) == "spy"
    assert seen["func"] is tp.add and seen["types"] == (Spy,)
    assert seen["args"] == (t, s) and seen["kwargs"] == {"alpha": 2}
    assert tp.sum(s, dim=0) == "spy"
    assert seen["func"] is tp.sum and seen["args"] == (s, 0)


def test_inside_a_list():
    t = tp.ones(2)
    assert tp.cat([Other(), t]) == "Other"
    assert Recorder.log[0][1] is tp.cat
    assert tp.stack((t, Base())) == "Base"


def test_methods_and_operators():
    t = tp.ones(2)
    my = Other()
    assert t.add(my) == "Other"  # Tensor.add is tp.add
    assert Recorder.log[-1][1] is tp.add
    assert t + my == "Other"
    assert my + t == "Other"  # Other has no __add__: Tensor.__radd__ -> tp.add(my, t)
    assert Recorder.log[-1][1] is tp.add
    assert t * my == "Other"
    t += my
    assert Recorder.log[-1][1] is tp.Tensor.add_


def test_reflected_operator_falls_back():
    class Decline:
        def __tensorplay_function__(self, func, types, args, kwargs):
            return NotImplemented

        def __radd__(self, other):
            return "radd"

        def __add__(self, other):
            return "add"

    t = tp.ones(2)
    assert t + Decline() == "radd"
    assert Decline() + t == "add"
    with pytest.raises(TypeError):
        t - Decline()  # nobody handles it: Python's own TypeError


def test_wrong_return_type_is_passed_through():
    class Stringy:
        def __tensorplay_function__(self, func, types, args, kwargs):
            return "not a tensor"

    assert tp.add(tp.ones(2), Stringy()) == "not a tensor"
    assert tp.max(Stringy()) == "not a tensor"


def test_tensor_subclass():
    class Logged(tp.Tensor):
        calls: list = []

        @classmethod
        def __tensorplay_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(func)
            return super().__tensorplay_function__(func, types, args, kwargs)

    a = Logged([1.0, 2.0])
    r = tp.add(a, tp.ones(2))
    assert Logged.calls == [tp.add]
    assert type(r) is Logged and r.tolist() == [2.0, 3.0]
    m = a * 2
    assert Logged.calls[2] is tp.mul and m.tolist() == [2.0, 4.0]


def test_plain_tensor_subclass_keeps_its_type_as_in_torch():
    class Plain(tp.Tensor):
        pass

    p = Plain([1.0])
    assert has_tensorplay_function((p, tp.ones(1)))  # Tensor's default handler converts
    assert type(p + 1) is Plain and type(tp.ones(1) + p) is Plain
    assert (p + 1).tolist() == [2.0]
    assert repr(p) == "Plain([1.])"


# ---- modes -------------------------------------------------------------------------------


class Tag(TensorPlayFunctionMode):
    def __init__(self, name, log):
        self.name, self.log = name, log

    def __tensorplay_function__(self, func, types, args, kwargs):
        self.log.append((self.name, func))
        return func(*args, **(kwargs or {}))


def test_modes_stack_innermost_first():
    log = []
    one = tp.ones(1)
    with Tag("outer", log), Tag("inner", log):
        r = tp.add(one, one)
    assert r.tolist() == [2.0]
    assert log == [("inner", tp.add), ("outer", tp.add)]
    assert overrides._active_modes() == ()


def test_mode_handler_runs_with_itself_disabled():
    log = []
    one = tp.ones(1)
    with Tag("only", log):
        tp.neg(one)
    assert log == [("only", tp.neg)]  # calling func inside the handler did not recurse


def test_mode_sees_methods_and_operators():
    log = []
    t = tp.ones(2)
    with Tag("m", log):
        t + t
        t.sum()
        tp.max(t)
    # tp.max runs amax inside the handler, with the mode off: only the outer call is seen
    assert [f for _, f in log] == [tp.add, tp.sum, tp.max]


def test_mode_before_argument_handlers():
    log = []
    one = tp.ones(1)
    with Tag("mode", log):
        assert tp.add(Other(), one) == "Other"
    assert log == [("mode", tp.add)]
    assert Recorder.log[0][0] == "Other"


def test_exception_inside_mode_leaves_stack_clean():
    class Boom(TensorPlayFunctionMode):
        def __tensorplay_function__(self, func, types, args, kwargs):
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"), Boom():
        tp.add(tp.ones(1), tp.ones(1))
    assert overrides._active_modes() == ()
    assert tp.add(tp.ones(1), tp.ones(1)).tolist() == [2.0]
    assert tp._dispatch.state.plain


def test_out_of_order_exit_raises():
    a, b = TensorPlayFunctionMode(), TensorPlayFunctionMode()
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="out of order"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)
    assert overrides._active_modes() == ()
    assert tp._dispatch.state.plain


def test_modes_are_thread_local():
    log = []
    seen_in_thread = []

    def work():
        seen_in_thread.append(tp.add(tp.ones(1), tp.ones(1)).tolist())

    with Tag("main", log):
        th = threading.Thread(target=work)
        th.start()
        th.join()
    assert seen_in_thread == [[2.0]]
    assert log == []


# ---- helpers -----------------------------------------------------------------------------


def test_get_overridable_functions():
    funcs = get_overridable_functions()
    assert tp.add in funcs[tp]
    assert tp.Tensor.add in funcs[tp.Tensor]
    assert tp.Tensor.add_ in funcs[tp.Tensor]


def test_is_tensor_like():
    assert is_tensor_like(tp.ones(1))
    assert is_tensor_like(MyArray(tp.ones(1)))
    assert not is_tensor_like(1.0)
    assert not is_tensor_like([tp.ones(1)])


def test_has_tensorplay_function():
    assert not has_tensorplay_function((tp.ones(1), 2.0))
    assert has_tensorplay_function((tp.ones(1), Other()))
    with TensorPlayFunctionMode():
        assert has_tensorplay_function((tp.ones(1),))


def test_out_argument_is_checked():
    class Spy:
        def __tensorplay_function__(self, func, types, args, kwargs):
            return (func, args, kwargs)

    s, t = Spy(), tp.ones(2)
    func, args, kwargs = tp.add(t, t, out=s)
    assert func is tp.add and args == (t, t) and kwargs == {"out": s}
    func, args, kwargs = tp.permute(s, 0)
    assert func is tp.permute and args == (s, 0)


# ---- hand-written methods and factories ------------------------------------------------


class _Names(TensorPlayFunctionMode):
    def __init__(self):
        self.funcs = []

    def __tensorplay_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


def test_hand_written_methods_and_factories_reach_function_modes():
    x, z = tp.ones(2, 3), tp.zeros(2, 3)
    cases = [
        (lambda: x[0], tp.Tensor.__getitem__),
        (lambda: x.__setitem__(0, 1.0), tp.Tensor.__setitem__),
        (lambda: x.to(tp.float64), tp.Tensor.to),
        (lambda: x.copy_(z), tp.Tensor.copy_),
        (lambda: x.detach(), tp.Tensor.detach),
        (lambda: x.size(), tp.Tensor.size),
        (lambda: x.tolist(), tp.Tensor.tolist),
        (lambda: len(x), tp.Tensor.__len__),
        (lambda: tp.zeros_like(x), tp.zeros_like),
        (lambda: tp.full_like(x, 2.0), tp.full_like),
        (lambda: tp.zeros(2), tp.zeros),  # factories too (as torch's), and tp.device
        (lambda: tp.tensor([1.0]), tp.tensor),
        (lambda: tp.randn(3), tp.randn),
        (lambda: tp.device("cpu"), tp.device),
    ]
    for call, expected in cases:
        with _Names() as mode:
            call()
        assert mode.funcs[:1] == [expected], (expected, mode.funcs)
    assert tp.Tensor.to.__name__ == "to" and tp.Tensor.__getitem__.__qualname__ == (
        "Tensor.__getitem__"
    )


def test_subclass_overrides_hand_written_methods():
    class Tagged(tp.Tensor):
        seen: list = []

        @classmethod
        def __tensorplay_function__(cls, func, types, args=(), kwargs=None):
            cls.seen.append(func.__name__)
            return super().__tensorplay_function__(func, types, args, kwargs)

    t = Tagged([1.0, 2.0])
    d = t.to(tp.float64)
    item = t[1]
    ones = tp.ones_like(t)
    assert Tagged.seen == ["to", "__getitem__", "ones_like"]
    assert type(d) is Tagged and d.dtype is tp.float64
    assert type(item) is Tagged and item.item() == 2.0
    assert type(ones) is Tagged and ones.tolist() == [1.0, 1.0]


def test_overridable_functions_list_hand_written_api():
    table = get_overridable_functions()
    assert tp.zeros_like in table[tp] and tp.Tensor.to in table[tp.Tensor]
    assert tp.Tensor.__getitem__ in table[tp.Tensor]


def test_plain_calls_of_hand_written_methods_skip_the_protocol():
    x = tp.arange(6.0).reshape(2, 3)
    assert x[1, 1:].tolist() == [4.0, 5.0]  # slices are plain arguments
    assert x[..., 0].tolist() == [0.0, 3.0]
    assert x.to("cpu") is x


def test_unary_operators_do_not_rename_the_public_functions():
    x = tp.tensor([1.0, -2.0])
    assert (-x).tolist() == [-1.0, 2.0] and abs(x).tolist() == [1.0, 2.0]
    assert (~tp.tensor([True])).tolist() == [False]
    assert tp.neg.__name__ == "neg" and tp.abs.__name__ == "abs"
    assert tp.bitwise_not.__name__ == "bitwise_not"
