"""``nn.Module`` and the containers, checked on values and against PyTorch where it helps."""

from __future__ import annotations

import copy
import re
from collections import OrderedDict

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.nn.modules import (
    Module,
    ModuleDict,
    ModuleList,
    ParameterDict,
    ParameterList,
    Sequential,
)
from tensorplay.nn.parameter import Buffer, Parameter


def _np(t):
    return np.asarray(t.detach().cpu().numpy())


def _classes(lib: str):
    """The same small model family in tensorplay (``"tp"``) or torch (``"torch"``)."""
    if lib == "tp":
        base, P, randn, zeros, seq, mlist = (
            Module,
            Parameter,
            tp.randn,
            tp.zeros,
            Sequential,
            ModuleList,
        )
    else:
        torch = pytest.importorskip("torch")
        base, P, randn, zeros = torch.nn.Module, torch.nn.Parameter, torch.randn, torch.zeros
        seq, mlist = torch.nn.Sequential, torch.nn.ModuleList

    class Lin(base):
        def __init__(self, i, o, bias=True):
            super().__init__()
            self.in_features, self.out_features = i, o
            self.weight = P(randn(o, i))
            self.bias = P(zeros(o)) if bias else None

        def forward(self, x):
            y = x @ self.weight.T
            return y if self.bias is None else y + self.bias

        def extra_repr(self):
            return f"in_features={self.in_features}, out_features={self.out_features}"

    class Act(base):
        def forward(self, x):
            return x * 2

    class Net(base):
        def __init__(self):
            super().__init__()
            self.fc = Lin(3, 4)
            self.register_buffer("running", zeros(4))
            self.register_buffer("scratch", zeros(2), persistent=False)
            self.body = seq(Lin(4, 4), Act(), Lin(4, 2, bias=False))
            self.heads = mlist([Act(), Act(), Lin(2, 2)])

        def forward(self, x):
            x = self.body(self.fc(x) + self.running)
            for h in self.heads:
                x = h(x)
            return x

    return Lin, Act, Net


@pytest.fixture
def tp_classes():
    return _classes("tp")


@pytest.fixture
def torch_classes():
    return _classes("torch")


def _norm(s: str) -> str:
    return s.replace("torch.", "tensorplay.").replace("tensorplay.Size", "Size")


# ---- registration ---------------------------------------------------------------------------


def test_setattr_registers_parameters_buffers_modules(tp_classes):
    Lin, _, _ = tp_classes
    m = Module()
    m.w = Parameter(tp.ones(2))
    m.b = Buffer(tp.zeros(3))
    m.nb = Buffer(tp.zeros(1), persistent=False)
    m.child = Lin(2, 2)
    m.plain = 5
    assert list(m._parameters) == ["w"]
    assert list(m._buffers) == ["b", "nb"]
    assert m._non_persistent_buffers_set == {"nb"}
    assert list(m._modules) == ["child"]
    assert m.plain == 5 and "plain" in m.__dict__
    assert m.w is m._parameters["w"]
    np.testing.assert_array_equal(_np(m.b), np.zeros(3))
    # a plain tensor assigned to a buffer name updates the buffer (and keeps persistence)
    m.nb = tp.ones(1)
    np.testing.assert_array_equal(_np(m._buffers["nb"]), [1.0])
    assert m._non_persistent_buffers_set == {"nb"}
    # None is allowed for each kind
    m.w = None
    m.b = None
    m.child = None
    assert m._parameters["w"] is None and m._buffers["b"] is None and m._modules["child"] is None
    assert list(m.parameters()) == [] and list(m.children()) == []
    # a parameter name takes only a Parameter or None (like torch); a new Parameter
    # replaces a module of the same name
    with pytest.raises(TypeError, match="as parameter 'w'"):
        m.w = Lin(1, 1)
    m.child = Parameter(tp.ones(1))
    assert "child" not in m._modules and "child" in m._parameters
    del m.w, m.b, m.plain
    assert "w" not in m._parameters and "b" not in m._buffers and not hasattr(m, "plain")
    with pytest.raises(AttributeError, match="'Module' object has no attribute 'nope'"):
        _ = m.nope


def test_assign_plain_tensor_to_parameter_raises():
    m = Module()
    m.weight = Parameter(tp.ones(2))
    with pytest.raises(
        TypeError,
        match=re.escape(
            "cannot assign 'tensorplay.Tensor' as parameter 'weight' "
            "(nn.Parameter or None expected)"
        ),
    ):
        m.weight = tp.zeros(2)
    m.child = Module()
    with pytest.raises(TypeError, match="as child module 'child'"):
        m.child = 3
    m.register_buffer("buf", tp.zeros(1))
    with pytest.raises(TypeError, match="as buffer 'buf'"):
        m.buf = [1.0]


def test_assign_before_init_raises():
    class Early(Module):
        def __init__(self, what):
            if what == "param":
                self.w = Parameter(tp.ones(1))
            elif what == "module":
                self.c = Module()
            else:
                self.register_buffer("b", tp.ones(1))
            super().__init__()

    with pytest.raises(
        AttributeError, match=r"cannot assign parameters before Module.__init__\(\)"
    ):
        Early("param")
    with pytest.raises(AttributeError, match=r"cannot assign module before Module.__init__\(\)"):
        Early("module")
    with pytest.raises(AttributeError, match=r"cannot assign buffer before Module.__init__\(\)"):
        Early("buffer")


def test_registration_name_and_type_errors():
    m = Module()
    m.x = 1
    with pytest.raises(KeyError, match="contain"):
        m.register_parameter("a.b", Parameter(tp.ones(1)))
    with pytest.raises(KeyError, match="empty string"):
        m.register_buffer("", tp.ones(1))
    with pytest.raises(TypeError, match="parameter name should be a string. Got int"):
        m.register_parameter(3, None)
    with pytest.raises(KeyError, match="attribute 'x' already exists"):
        m.register_buffer("x", tp.ones(1))
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        m.add_module("forward", Module())
    with pytest.raises(
        TypeError, match="cannot assign 'tensorplay.Tensor' object to parameter 'p'"
    ):
        m.register_parameter("p", tp.ones(1))
    with pytest.raises(TypeError, match="object to buffer 'q'"):
        m.register_buffer("q", 3.0)
    with pytest.raises(TypeError, match="int is not a Module subclass"):
        m.add_module("c", 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        Module(foo=1)
    m.register_module("c", Module())
    assert isinstance(m.c, Module)


def test_forward_missing_names_class():
    class NoForward(Module):
        pass

    with pytest.raises(NotImplementedError, match=r"Module \[NoForward\] is missing"):
        NoForward()(tp.ones(1))


# ---- calling and hooks ----------------------------------------------------------------------


class _Affine(Module):
    def forward(self, x, scale=1.0):
        return x * scale + 1


def test_forward_pre_hook_replaces_args():
    m = _Affine()
    x = tp.ones(2)
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 10,))
    np.testing.assert_allclose(_np(m(x)), [11.0, 11.0])
    h1.remove()
    h2 = m.register_forward_pre_hook(lambda mod, args: args[0] * 3)  # a single value
    np.testing.assert_allclose(_np(m(x)), [4.0, 4.0])
    h2.remove()
    seen = []
    m.register_forward_pre_hook(lambda mod, args: seen.append(mod) or None)
    np.testing.assert_allclose(_np(m(x)), [2.0, 2.0])
    assert seen == [m]


def test_forward_hook_replaces_output_and_order():
    m = _Affine()
    calls = []

    def first(mod, args, out):
        calls.append("first")
        return out * 2

    def second(mod, args, out):
        calls.append("second")
        return out - 1

    m.register_forward_hook(first)
    h = m.register_forward_hook(second, prepend=True)
    np.testing.assert_allclose(_np(m(tp.ones(1))), [2.0])  # ((1+1)-1)*2
    assert calls == ["second", "first"]
    h.remove()
    np.testing.assert_allclose(_np(m(tp.ones(1))), [4.0])
    h.remove()  # removing twice is harmless


def test_hooks_with_kwargs_and_context_manager():
    m = _Affine()

    def pre(mod, args, kwargs):
        return args, {**kwargs, "scale": 5.0}

    def post(mod, args, kwargs, out):
        assert kwargs["scale"] == 5.0
        return out + 100

    with (
        m.register_forward_pre_hook(pre, with_kwargs=True),
        m.register_forward_hook(post, with_kwargs=True),
    ):
        np.testing.assert_allclose(_np(m(tp.ones(1), scale=2.0)), [106.0])
    assert not m._forward_hooks and not m._forward_pre_hooks_with_kwargs
    np.testing.assert_allclose(_np(m(tp.ones(1), scale=2.0)), [3.0])
    m.register_forward_pre_hook(lambda mod, a, k: 3, with_kwargs=True)
    with pytest.raises(RuntimeError, match="must return None or a tuple"):
        m(tp.ones(1))


def test_always_call_hook_runs_when_forward_raises():
    class Boom(Module):
        def forward(self, x):
            raise ValueError("boom")

    m = Boom()
    seen = []
    m.register_forward_hook(lambda mod, a, out: seen.append(out), always_call=True)
    m.register_forward_hook(lambda mod, a, out: seen.append("never"))
    with pytest.raises(ValueError, match="boom"):
        m(tp.ones(1))
    assert seen == [None]


def test_hook_must_be_callable():
    with pytest.raises(TypeError, match="hook="):
        Module().register_forward_hook(3)


# ---- traversal ------------------------------------------------------------------------------


def test_named_members_match_torch(tp_classes, torch_classes):
    ours, theirs = tp_classes[2](), torch_classes[2]()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_children()] == [n for n, _ in theirs.named_children()]
    assert [n for n, _ in ours.named_modules(prefix="m")] == [
        n for n, _ in theirs.named_modules(prefix="m")
    ]
    assert [n for n, _ in ours.named_parameters(recurse=False)] == []
    assert [n for n, _ in ours.fc.named_parameters(prefix="x")] == ["x.weight", "x.bias"]
    assert len(list(ours.parameters())) == 7 == len(list(theirs.parameters()))
    assert len(list(ours.modules())) == len(list(theirs.modules()))


def test_shared_parameters_and_modules_yielded_once(tp_classes):
    Lin, _, _ = tp_classes
    a, b = Lin(2, 2), Lin(2, 2)
    b.weight = a.weight
    m = Sequential(a, b, a)
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.bias"]
    assert len(list(m.named_parameters(remove_duplicate=False))) == 6
    assert [n for n, _ in m.named_modules()] == ["", "0", "1"]
    assert [n for n, _ in m.named_modules(remove_duplicate=False)] == ["", "0", "1", "2"]
    assert len(list(m.children())) == 2
    # state_dict keeps every name, like torch
    assert list(m.state_dict()) == [
        "0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"
    ]  # fmt: skip


def test_get_submodule_and_parameter(tp_classes):
    net = tp_classes[2]()
    assert net.get_submodule("body.0") is net.body[0]
    assert net.get_submodule("") is net
    assert net.get_parameter("body.2.weight") is net.body[2].weight
    assert net.get_buffer("running") is net.running
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        net.get_submodule("body.nope")
    with pytest.raises(AttributeError, match="`running` is not an nn.Parameter"):
        net.get_parameter("running")


def test_dir_lists_registered_names(tp_classes):
    net = tp_classes[2]()
    d = dir(net)
    for name in ("fc", "running", "body", "forward", "state_dict", "training"):
        assert name in d
    assert "0" not in dir(net.body)


# ---- modes and gradients --------------------------------------------------------------------


def test_train_eval_propagate(tp_classes):
    net = tp_classes[2]()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.body.train()
    assert net.body[1].training and not net.fc.training and not net.training
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        net.train("yes")


def test_zero_grad_both_ways(tp_classes):
    Lin = tp_classes[0]
    m = Lin(3, 2)
    m(tp.ones(4, 3)).sum().backward()
    np.testing.assert_allclose(_np(m.bias.grad), [4.0, 4.0])
    grad = m.weight.grad
    m.zero_grad(set_to_none=False)
    assert m.weight.grad is grad
    np.testing.assert_array_equal(_np(m.weight.grad), np.zeros((2, 3)))
    np.testing.assert_array_equal(_np(m.bias.grad), np.zeros(2))
    m.zero_grad()
    assert m.weight.grad is None and m.bias.grad is None
    m.zero_grad()  # no grads: a no-op


def test_requires_grad_and_apply(tp_classes):
    net = tp_classes[2]()
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    net.requires_grad_()
    assert all(p.requires_grad for p in net.parameters())
    order = []
    assert net.body.apply(lambda m: order.append(type(m).__name__)) is net.body
    assert order == ["Lin", "Act", "Lin", "Sequential"]


# ---- conversions ----------------------------------------------------------------------------


def test_to_dtype_keeps_parameters(tp_classes):
    Lin = tp_classes[0]
    m = Lin(2, 3)
    m.register_buffer("count", tp.zeros(1, dtype=tp.int64))
    w = _np(m.weight)
    m(tp.ones(1, 2)).sum().backward()
    assert m.to(tp.float64) is m
    assert m.weight.dtype == tp.float64 and m.bias.dtype == tp.float64
    assert isinstance(m.weight, Parameter) and m.weight.requires_grad
    assert m.weight.grad.dtype == tp.float64
    assert m.count.dtype == tp.int64  # only floating tensors change dtype
    np.testing.assert_allclose(_np(m.weight), w)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    m.float()
    assert m.weight.dtype == tp.float32 and isinstance(m.weight, Parameter)
    m.double()
    assert m.bias.dtype == tp.float64
    m.to(device="cpu", dtype=tp.float32)
    assert m.weight.dtype == tp.float32 and m.weight.device == tp.device("cpu")
    m.to("cpu")
    m.to(tp.device("cpu"), tp.float64)
    assert m.weight.dtype == tp.float64
    m.to(tp.zeros(1, dtype=tp.float32))
    assert m.weight.dtype == tp.float32
    m.cpu()
    # frozen parameters stay frozen
    m.bias.requires_grad_(False)
    m.double()
    assert not m.bias.requires_grad and m.weight.requires_grad


def test_to_unchanged_keeps_identity_and_sharing(tp_classes):
    Lin = tp_classes[0]
    a, b = Lin(2, 2), Lin(2, 2)
    b.weight = a.weight
    m = Sequential(a, b)
    w = a.weight
    m.to(tp.float32)
    assert a.weight is w  # nothing changed: same objects
    m.to(tp.float64)
    assert a.weight is b.weight and a.weight.dtype == tp.float64
    assert len(list(m.parameters())) == 3


def test_to_bad_arguments():
    m = Module()
    with pytest.raises(TypeError, match="only accepts floating point or complex dtypes"):
        m.to(tp.int64)
    with pytest.raises(TypeError, match="to\\(dtype=\\)"):
        m.to(dtype="float")
    with pytest.raises(TypeError, match="invalid combination"):
        m.to([1])
    with pytest.raises(TypeError, match="unexpected keyword"):
        m.to(colour="red")


def test_deepcopy_keeps_parameters(tp_classes):
    net = tp_classes[2]()
    net.body[0].weight.requires_grad_(False)
    other = copy.deepcopy(net)
    for (n1, p1), (n2, p2) in zip(net.named_parameters(), other.named_parameters(), strict=True):
        assert n1 == n2 and p1 is not p2 and isinstance(p2, Parameter)
        assert p1.requires_grad == p2.requires_grad
        np.testing.assert_array_equal(_np(p1), _np(p2))
    assert other.scratch is not net.scratch
    assert other._non_persistent_buffers_set == {"scratch"}


# ---- state dict -----------------------------------------------------------------------------


def test_state_dict_keys_match_torch(tp_classes, torch_classes):
    ours, theirs = tp_classes[2](), torch_classes[2]()
    sd = ours.state_dict()
    assert list(sd) == list(theirs.state_dict())
    assert "scratch" not in sd
    assert isinstance(sd, OrderedDict)
    assert all(not v.requires_grad for v in sd.values())
    assert not isinstance(sd["fc.weight"], Parameter)
    np.testing.assert_array_equal(_np(sd["fc.weight"]), _np(ours.fc.weight))
    kept = ours.state_dict(keep_vars=True)
    assert kept["fc.weight"] is ours.fc.weight
    assert list(ours.state_dict(prefix="net.")) == ["net." + k for k in sd]
    dest = {}
    assert ours.fc.state_dict(dest, "fc.") is dest and list(dest) == ["fc.weight", "fc.bias"]


def test_load_state_dict_round_trip(tp_classes):
    Net = tp_classes[2]
    a, b = Net(), Net()
    w = b.fc.weight
    res = b.load_state_dict(a.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert repr(res) == "<All keys matched successfully>"
    assert b.fc.weight is w  # copied in place
    for (k, v1), v2 in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        np.testing.assert_array_equal(_np(v1), _np(v2), err_msg=k)
    x = tp.randn(2, 3)
    np.testing.assert_allclose(_np(a(x)), _np(b(x)), rtol=1e-6)
    assert b.fc.weight.requires_grad and b.fc.weight.grad_fn is None


def _messages_like(ours: str, theirs: str) -> None:
    assert _norm(ours) == _norm(theirs)


def test_load_state_dict_strict_errors_match_torch(tp_classes, torch_classes):
    torch = pytest.importorskip("torch")
    ours, theirs = tp_classes[2](), torch_classes[2]()
    sd_ours, sd_theirs = ours.state_dict(), theirs.state_dict()
    for sd, zeros in ((sd_ours, tp.zeros), (sd_theirs, torch.zeros)):
        del sd["fc.bias"]
        del sd["running"]
        sd["extra.weight"] = zeros(1)
        sd["body.0.bogus"] = zeros(1)
        sd["body.0.weight"] = zeros(5, 4)
    with pytest.raises(RuntimeError) as e_ours:
        ours.load_state_dict(sd_ours)
    with pytest.raises(RuntimeError) as e_theirs:
        theirs.load_state_dict(sd_theirs)
    msg = str(e_ours.value)
    assert msg.startswith(
        "Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "
    )
    assert '"running", "fc.bias"' in msg and '"extra.weight"' in msg
    assert "size mismatch for body.0.weight: copying a param with shape" in msg
    _messages_like(msg, str(e_theirs.value))


def test_failed_load_changes_nothing(tp_classes):
    Net = tp_classes[2]
    a, b = Net(), Net()
    before = {k: _np(v).copy() for k, v in b.state_dict().items()}
    sd = a.state_dict()
    sd["body.2.weight"] = tp.zeros(9, 9)  # one bad shape among good values
    with pytest.raises(RuntimeError, match="size mismatch for body.2.weight"):
        b.load_state_dict(sd, strict=False)
    sd = a.state_dict()
    del sd["fc.bias"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "fc.bias"'):
        b.load_state_dict(sd)
    for k, v in b.state_dict().items():
        np.testing.assert_array_equal(_np(v), before[k], err_msg=k)


def test_load_state_dict_non_strict(tp_classes):
    Net = tp_classes[2]
    a, b = Net(), Net()
    sd = a.state_dict()
    del sd["fc.bias"]
    sd["nope"] = tp.ones(1)
    sd["scratch"] = tp.ones(2)  # a non-persistent buffer is not loaded
    res = b.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["fc.bias"]
    assert res.unexpected_keys == ["nope", "scratch"]
    assert res == (["fc.bias"], ["nope", "scratch"])
    np.testing.assert_array_equal(_np(b.fc.weight), _np(a.fc.weight))
    np.testing.assert_array_equal(_np(b.scratch), np.zeros(2))
    assert "missing_keys=['fc.bias']" in repr(res)


def test_load_state_dict_assign_and_bad_input(tp_classes):
    Lin = tp_classes[0]
    m = Lin(2, 2)
    m.bias.requires_grad_(False)
    new_w, new_b = tp.ones(2, 2), tp.full((2,), 3.0)
    m.load_state_dict({"weight": new_w, "bias": new_b}, assign=True)
    assert isinstance(m.weight, Parameter) and m.weight.requires_grad
    assert not m.bias.requires_grad
    np.testing.assert_array_equal(_np(m.bias), [3.0, 3.0])
    with pytest.raises(TypeError, match="state_dict="):
        m.load_state_dict([("weight", new_w)])
    with pytest.raises(RuntimeError, match='named "weight", expected tensorplay Tensor'):
        m.load_state_dict({"weight": [[1.0, 1.0]], "bias": new_b})


def test_state_dict_and_load_hooks(tp_classes):
    Lin = tp_classes[0]
    m = Lin(2, 2)
    seen = []
    m.register_state_dict_pre_hook(lambda mod, prefix, keep: seen.append(prefix))
    m.state_dict(prefix="p.")
    assert seen == ["p."]

    def rename(mod, sd, prefix, *rest):
        if prefix + "w" in sd:
            sd[prefix + "weight"] = sd.pop(prefix + "w")

    m.register_load_state_dict_pre_hook(rename)
    m.load_state_dict({"w": tp.zeros(2, 2), "bias": tp.zeros(2)})
    np.testing.assert_array_equal(_np(m.weight), np.zeros((2, 2)))

    def accept_missing(mod, keys):
        keys.missing_keys.clear()

    h = m.register_load_state_dict_post_hook(accept_missing)
    m.load_state_dict({"weight": tp.ones(2, 2)})
    np.testing.assert_array_equal(_np(m.weight), np.ones((2, 2)))
    h.remove()
    with pytest.raises(RuntimeError, match="Missing key"):
        m.load_state_dict({"weight": tp.ones(2, 2)})


def test_extra_state_round_trip():
    class WithExtra(Module):
        def __init__(self):
            super().__init__()
            self.value = 1

        def get_extra_state(self):
            return {"value": self.value}

        def set_extra_state(self, state):
            self.value = state["value"]

    a, b = WithExtra(), WithExtra()
    a.value = 7
    sd = a.state_dict()
    assert list(sd) == ["_extra_state"]
    b.load_state_dict(sd)
    assert b.value == 7


# ---- repr -----------------------------------------------------------------------------------


def test_repr_matches_torch(tp_classes, torch_classes):
    ours, theirs = tp_classes[2](), torch_classes[2]()
    assert repr(ours) == repr(theirs)
    assert repr(Module()) == "Module()"
    assert repr(tp_classes[0](2, 3)) == "Lin(in_features=2, out_features=3)"


def test_parameter_container_repr_matches_torch():
    torch = pytest.importorskip("torch")
    ours = ParameterList([tp.zeros(2, 3), Parameter(tp.ones(4))])
    theirs = torch.nn.ParameterList([torch.zeros(2, 3), torch.nn.Parameter(torch.ones(4))])
    assert _norm(repr(ours)) == _norm(repr(theirs))
    ours_d = ParameterDict(OrderedDict(b=tp.zeros(1), a=tp.ones(2)))
    theirs_d = torch.nn.ParameterDict(OrderedDict(b=torch.zeros(1), a=torch.ones(2)))
    assert _norm(repr(ours_d)) == _norm(repr(theirs_d))
    assert repr(ModuleList()) == "ModuleList()" == repr(torch.nn.ModuleList())


# ---- containers -----------------------------------------------------------------------------


class _Add(Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x + self.k

    def extra_repr(self):
        return f"k={self.k}"


def test_sequential_indexing_and_forward():
    s = Sequential(_Add(1), _Add(2), _Add(3))
    np.testing.assert_array_equal(_np(s(tp.zeros(1))), [6.0])
    assert len(s) == 3 and s[0].k == 1 and s[-1].k == 3
    sub = s[1:]
    assert isinstance(sub, Sequential) and [m.k for m in sub] == [2, 3]
    assert list(sub._modules) == ["1", "2"]  # slices keep the names, like torch
    with pytest.raises(IndexError, match="index 3 is out of range"):
        s[3]
    with pytest.raises(TypeError, match="indices must be integers"):
        s["a"]
    s.append(_Add(10))
    s.insert(0, _Add(100))
    s.insert(-1, _Add(1000))
    assert [m.k for m in s] == [100, 1, 2, 3, 1000, 10]
    del s[1]
    assert list(s._modules) == ["0", "1", "2", "3", "4"]
    del s[-2:]
    assert [m.k for m in s] == [100, 2, 3]
    s.extend([_Add(5)])
    s[0] = _Add(0)
    assert [m.k for m in s] == [0, 2, 3, 5]
    assert [m.k for m in s + Sequential(_Add(9))] == [0, 2, 3, 5, 9]
    assert s.pop(0).k == 0 and len(s) == 3
    with pytest.raises(TypeError, match="module="):
        s.insert(0, 3)
    named = Sequential(OrderedDict([("first", _Add(1)), ("second", _Add(1))]))
    assert list(named.state_dict()) == [] and [n for n, _ in named.named_children()] == [
        "first",
        "second",
    ]
    np.testing.assert_array_equal(_np(named(tp.zeros(1))), [2.0])
    assert named.first.k == 1


def test_sequential_repr_matches_torch():
    torch = pytest.importorskip("torch")

    class TAdd(torch.nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k

        def extra_repr(self):
            return f"k={self.k}"

    TAdd.__name__ = "_Add"
    ours = Sequential(_Add(1), ModuleList([_Add(2), _Add(2), _Add(3)]))
    theirs = torch.nn.Sequential(TAdd(1), torch.nn.ModuleList([TAdd(2), TAdd(2), TAdd(3)]))
    assert repr(ours) == repr(theirs)


def test_module_list():
    ml = ModuleList([_Add(0), _Add(1)])
    ml.append(_Add(2))
    ml.extend([_Add(3)])
    ml += [_Add(4)]
    ml.insert(1, _Add(99))
    assert [m.k for m in ml] == [0, 99, 1, 2, 3, 4]
    assert ml.index(ml[2]) == 2
    assert [m.k for m in ml[::2]] == [0, 1, 3]
    assert isinstance(ml[1:3], ModuleList)
    assert ml[-1].k == 4 and len(ml) == 6
    del ml[1]
    assert list(ml._modules) == [str(i) for i in range(5)]
    both = ml + ModuleList([_Add(7)])
    assert [m.k for m in both] == [0, 1, 2, 3, 4, 7]
    ml[0] = _Add(-1)
    assert ml[0].k == -1
    assert ml.pop(-1).k == 4
    with pytest.raises(TypeError, match="should be called with an iterable"):
        ml.extend(3)
    with pytest.raises(IndexError):
        ml[10]
    with pytest.raises(ValueError, match="not in ModuleList"):
        ml.index(_Add(0))
    with pytest.raises(NotImplementedError):
        ml(tp.ones(1))


def test_module_dict():
    md = ModuleDict({"a": _Add(1)})
    md["b"] = _Add(2)
    md.update([("c", _Add(3))])
    md.update(OrderedDict(d=_Add(4)))
    assert list(md.keys()) == ["a", "b", "c", "d"] and len(md) == 4
    assert "c" in md and "z" not in md
    assert [m.k for m in md.values()] == [1, 2, 3, 4]
    assert [k for k, _ in md.items()] == list(md)
    assert md.pop("a").k == 1 and "a" not in md
    del md["b"]
    assert list(md) == ["c", "d"]
    assert [n for n, _ in md.named_modules()] == ["", "c", "d"]
    with pytest.raises(ValueError, match="has length 3"):
        md.update([("x", _Add(1), 3)])
    with pytest.raises(TypeError, match="iterable of key/value pairs"):
        md.update(3)
    md.clear()
    assert len(md) == 0


def test_parameter_list_and_dict_wrap_tensors():
    pl = ParameterList([tp.ones(2)])
    pl.append(tp.zeros(3))
    pl.extend([Parameter(tp.ones(1))])
    assert len(pl) == 3
    assert all(isinstance(p, Parameter) and p.requires_grad for p in pl)
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert len(pl[1:]) == 2 and pl[-1].shape == (1,)
    pl[0] = tp.full((2,), 5.0)
    np.testing.assert_array_equal(_np(pl[0]), [5.0, 5.0])
    with pytest.raises(RuntimeError, match="should not be called"):
        pl(tp.ones(1))
    pd = ParameterDict({"w": tp.ones(2)})
    pd["b"] = tp.zeros(1)
    assert isinstance(pd["w"], Parameter) and list(pd) == ["w", "b"]
    assert [n for n, _ in pd.named_parameters()] == ["w", "b"]
    assert "b" in pd and pd.get("z") is None and len(pd) == 2
    assert pd.pop("w").shape == (2,)
    assert list(pd.keys()) == ["b"] and list(pd.state_dict()) == ["b"]
    with pytest.raises(TypeError, match="not a string"):
        pd[3] = tp.ones(1)
    merged = pd | ParameterDict({"c": tp.ones(1)})
    assert list(merged) == ["b", "c"]
    # parameters in containers load and convert like any others
    holder = Module()
    holder.ps = pl
    holder.to(tp.float64)
    assert all(p.dtype == tp.float64 and isinstance(p, Parameter) for p in holder.ps)
    assert list(holder.state_dict()) == ["ps.0", "ps.1", "ps.2"]
