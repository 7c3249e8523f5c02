"""tensorplay.graph: tracing, node names, tables, DOT, shape propagation, capture errors."""

from __future__ import annotations

import operator
import shutil

import numpy as np
import pytest
from compile_helpers import FakeLibraryOp

import tensorplay as tp
from tensorplay.graph import (
    Graph,
    GraphCaptureError,
    GraphModule,
    Interpreter,
    Node,
    Proxy,
    Tracer,
    symbolic_trace,
)


def chain(x, y):
    a = tp.exp(x / 2) - 1
    b = a.tanh() * 2 + y
    return tp.sigmoid(b) * x, b.sum(dim=0)


def _trace(fn, **samples):
    return Tracer().trace(fn, sample_inputs=samples)


def test_trace_records_functions_methods_and_operators():
    gm = _trace(chain, x=tp.randn(3, 4), y=tp.randn(4))
    ops = [(n.op, n.op_name) for n in gm.graph.nodes]
    assert ops == [
        ("placeholder", "x"),
        ("placeholder", "y"),
        ("call_function", "div"),
        ("call_function", "exp"),
        ("call_function", "sub"),
        ("call_method", "tanh"),
        ("call_function", "mul"),
        ("call_function", "add"),
        ("call_function", "sigmoid"),
        ("call_function", "mul"),
        ("call_method", "sum"),
        ("output", "output"),
    ]
    mul = gm.graph.nodes[6]
    assert mul.target is tp.mul and mul.args[1] == 2
    assert gm.graph.find_nodes(op="call_method", target="sum")[0].kwargs == {"dim": 0}


def test_graph_module_and_interpreter_match_eager():
    x, y = tp.randn(3, 4), tp.randn(4)
    gm = _trace(chain, x=x, y=y)
    expected = chain(x, y)
    for got in (gm(x, y), Interpreter(gm).run(x, y)):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6)


def test_node_names_are_readable_and_unique():
    gm = _trace(lambda x: x + x + x + 1, x=tp.ones(2))
    names = [n.name for n in gm.graph.nodes]
    assert names == ["x", "add", "add_1", "add_2", "output"]
    g = Graph()
    a = g.placeholder("add_1")  # a user name that collides with a generated one
    b = g.call_function(tp.add, (a, a))
    c = g.call_function(tp.add, (b, a))
    d = g.call_function(tp.add, (c, a))
    assert [a.name, b.name, c.name, d.name] == ["add_1", "add", "add_2", "add_3"]
    assert g.placeholder("self").name == "self_1"  # generated code uses `self`


def test_print_tabular_lists_every_node(capsys):
    gm = _trace(chain, x=tp.randn(3, 4), y=tp.randn(4))
    gm.graph.print_tabular()
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["opcode", "name", "target", "args", "kwargs"]
    assert len(out) == 2 + len(gm.graph)
    assert out[6].split()[:3] == ["call_function", "sub", "sub"]
    assert "(%exp, 1)" in out[6]


def test_to_dot_and_draw():
    gm = _trace(chain, x=tp.randn(3, 4), y=tp.randn(4))
    dot = gm.graph.to_dot()
    assert dot.startswith("digraph")
    assert '"exp" -> "sub";' in dot and "float32[3, 4]" in dot


def test_draw_without_graphviz_names_it(monkeypatch, tmp_path):
    gm = _trace(lambda x: x * 2, x=tp.ones(2))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="Graphviz"):
        gm.draw(tmp_path / "g.svg")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_draw_writes_svg(tmp_path):
    gm = _trace(lambda x: x * 2, x=tp.ones(2))
    path = gm.draw(tmp_path / "g.svg")
    assert path.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_shape_propagation_uses_meta_tensors():
    gm = _trace(chain, x=tp.randn(3, 4), y=tp.randn(4))
    vals = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    assert vals["sigmoid"].shape == (3, 4) and vals["sum"].shape == (4,)
    assert all(v.device.type == "meta" for v in vals.values() if v is not None)
    assert gm.graph.nodes[0].meta["device"].type == "cpu"


def test_shape_propagation_never_runs_real_kernels():
    op = FakeLibraryOp()
    gm = _trace(lambda x: op(x.exp()).sin(), x=tp.randn(5))
    assert op.calls == 0  # only the meta call ran
    node = gm.graph.find_nodes(op="call_function", target=op)[0]
    assert node.meta["val"].shape == (5,) and node.meta["opaque"] is True
    x = tp.randn(5)
    np.testing.assert_allclose(gm(x).numpy(), np.sin(np.exp(x.numpy()) * 3), rtol=1e-5)
    assert op.calls == 1


def test_library_op_records_one_opaque_node():
    op = FakeLibraryOp()
    gm = _trace(lambda x: op(x) + 1, x=tp.ones(3))
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.op_name for n in calls] == ["demo::scaled", "add"]
    assert calls[0].name == "demo_scaled"


def test_data_dependent_control_flow_names_the_line():
    def f(x):
        y = x * 2
        if y.sum() > 0:  # the offending line
            return y
        return -y

    with pytest.raises(GraphCaptureError) as info:
        _trace(f, x=tp.ones(3))
    msg = str(info.value)
    assert "test_graph.py" in msg and "if y.sum() > 0:" in msg and "tp.where" in msg
    assert GraphCaptureError is tp.capture.GraphCaptureError


@pytest.mark.parametrize(
    "body", [lambda x: x.item(), lambda x: float(x.sum()), lambda x: x.tolist(), lambda x: int(x)]
)
def test_concrete_conversions_raise(body):
    with pytest.raises(GraphCaptureError, match="traced value"):
        _trace(body, x=tp.ones(2))


def test_shapes_metadata_and_properties_are_static():
    def f(x):
        return x[0] + x.T.sum() + len(x) + x.shape[1] + x.dim(), x.float()

    tracer = Tracer()
    gm = tracer.trace(f, sample_inputs={"x": tp.ones(3, 2)})
    assert tracer.shape_specialized
    a, b = gm(tp.ones(3, 2))
    assert a.tolist() == [14.0, 14.0] and b.dtype == tp.float32


def test_constants_become_get_attr_nodes():
    w = tp.tensor([1.0, 2.0])
    gm = _trace(lambda x: x * w + w, x=tp.ones(2))
    consts = gm.graph.find_nodes(op="get_attr")
    assert len(consts) == 1 and gm.constants[consts[0].target] is w
    assert gm(tp.ones(2)).tolist() == [2.0, 4.0]


def test_multi_output_ops_unpack_into_getitem_nodes():
    def f(x):
        values, indices = tp.max(x, dim=1)
        return values + 1, indices

    x = tp.tensor([[1.0, 5.0], [7.0, 2.0]])
    gm = _trace(f, x=x)
    assert len(gm.graph.find_nodes(op="call_function", target=operator.getitem)) == 2
    v, i = gm(x)
    assert v.tolist() == [6.0, 8.0] and i.tolist() == [1, 0]


def test_nested_outputs_and_reflected_operators():
    gm = _trace(lambda x: {"a": [1 - x, 2**x], "b": (-x, abs(x))}, x=tp.tensor([2.0, -1.0]))
    out = gm(tp.tensor([2.0, -1.0]))
    assert out["a"][0].tolist() == [-1.0, 2.0] and out["a"][1].tolist() == [4.0, 0.5]
    assert out["b"][0].tolist() == [-2.0, 1.0] and out["b"][1].tolist() == [2.0, 1.0]


def test_recompile_after_editing_the_graph():
    gm = _trace(lambda x: x + 1, x=tp.ones(2))
    add = gm.graph.find_nodes(op="call_function", target=tp.add)[0]
    add.target = tp.mul
    add.args = (add.args[0], 5)
    gm.recompile()
    assert "tp.mul(x, 5)" in gm.code
    assert gm(tp.ones(2)).tolist() == [5.0, 5.0]


def test_code_is_readable_python():
    gm = _trace(lambda x: (x * 2).exp().sum(dim=0), x=tp.ones(2, 2))
    assert gm.code.splitlines() == [
        "def forward(self, x):",
        "    mul = tp.mul(x, 2)",
        "    exp = mul.exp()",
        "    sum = exp.sum(dim=0)",
        "    return sum",
    ]


def test_symbolic_trace_and_public_types():
    gm = symbolic_trace(lambda x: x * 2, {"x": tp.ones(2)})
    assert isinstance(gm, GraphModule) and isinstance(gm.graph.nodes[1], Node)
    assert issubclass(Proxy, tp.capture.Proxy)


def test_trace_rejects_unknown_sample_names():
    with pytest.raises(TypeError, match="not parameters"):
        Tracer().trace(lambda x: x, sample_inputs={"y": tp.ones(1)})


def test_tracer_is_popped_after_an_error():
    with pytest.raises(GraphCaptureError):
        _trace(lambda x: bool(x), x=tp.ones(1))
    assert not tp.capture.capturing()


# ---- generated code never parses user strings --------------------------------------------

_HOSTILE = "a=0) if __import__('os').system('touch {path}') else f(x, b"


class _KeywordOp:
    """A library-style op taking arbitrary keywords: ``x * 2 + sum(keyword values)``."""

    name = "demo::kw"

    def __call__(self, x, **kwargs):
        if tp.capture.capturing() and tp.capture.contains_proxy((x,)):
            return tp.capture.capture_call(self, (x,), kwargs)
        return x * 2 + sum(kwargs.values())


def test_hostile_keyword_name_never_runs_and_reaches_the_op(tmp_path):
    marker = tmp_path / "pwned"
    op, hostile = _KeywordOp(), _HOSTILE.format(path=marker)
    gm = _trace(lambda x: op(x, **{hostile: 1.0}), x=tp.ones(2))
    assert hostile not in gm.code and "__import__" not in gm.code
    assert gm(tp.ones(2)).tolist() == [3.0, 3.0]
    cf = tp.compile(lambda x: op(x, **{hostile: 1.0}), backend="eager")
    assert cf(tp.tensor([1.0, 2.0])).tolist() == [3.0, 5.0]
    assert not marker.exists()


def test_hostile_strings_in_targets_constants_and_dict_keys_stay_data(tmp_path):
    marker = tmp_path / "pwned"
    hostile = f"') or __import__('os').system('touch {marker}') or ('"
    g = Graph()
    x = g.placeholder("x")
    w = g.get_attr(hostile)  # an attribute name that is not an identifier
    echo = g.call_function(lambda a, s, d: (a, s, d), (w, hostile, {hostile: x}))
    method = g.call_method(hostile, (x,))
    g.output((echo, method))
    gm = GraphModule(g, {hostile: tp.ones(1)})
    assert hostile not in gm.code and method.name.isidentifier()
    with pytest.raises(AttributeError, match="__import__"):  # the method lookup fails clearly
        gm(tp.ones(1))
    g.output_node.args = (echo,)
    g.erase_node(method)
    gm.recompile()
    a, s, d = gm(tp.zeros(1))
    assert a.tolist() == [1.0] and s == hostile and list(d) == [hostile]
    assert not marker.exists()


@pytest.mark.parametrize("bad", ["a; import os", "class", "self", "x"])
def test_node_names_that_cannot_be_variables_are_refused(bad):
    gm = _trace(lambda x: x + 1, x=tp.ones(2))
    gm.graph.nodes[1].name = bad  # "x" duplicates the placeholder
    with pytest.raises(ValueError, match="node name") as info:
        gm.recompile()
    assert repr(bad) in str(info.value) and "Rename" in str(info.value)


def test_plain_strings_stay_readable_literals():
    gm = _trace(lambda x: tp.gelu(x, approximate="tanh"), x=tp.ones(2))
    assert "tp.gelu(x, 'tanh')" in gm.code


def test_constant_names_cannot_replace_module_attributes():
    with pytest.raises(ValueError, match="recompile"):
        GraphModule(Graph(), {"recompile": tp.ones(1)})


def test_to_dot_escapes_quotes_in_names():
    op = FakeLibraryOp(name='demo::"q"')
    dot = _trace(lambda x: op(x), x=tp.ones(2)).graph.to_dot()
    assert '\\"q\\"' in dot and '"q"' not in dot.replace('\\"q\\"', "")
