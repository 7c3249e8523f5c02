"""Editing graphs as torch.fx passes do: insertion points, uses, erasing, dead code, lint,
concrete args, wrap, node names, the subgraph rewriter, submodules, and passes under
tp.compile. torch.fx (the local CPU wheel) is the behavioural reference where it applies."""

from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.graph import (
    Graph,
    GraphModule,
    Interpreter,
    Match,
    PythonCode,
    Tracer,
    get_graph_node_names,
    propagate_shapes,
    replace_pattern,
    symbolic_trace,
    wrap,
)


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


def _names(graph):
    return [n.name for n in graph.nodes]


def _chain(x, y):
    a = x + y
    b = tp.relu(a)
    return b * 2


def _traced_chain():
    return symbolic_trace(_chain, {"x": tp.randn(3), "y": tp.randn(3)})


def _xy():
    return tp.tensor([-1.0, 0.5, 2.0]), tp.tensor([0.25, -2.0, 1.0])


# ---- insertion points ------------------------------------------------------------------------


def test_inserting_after_keeps_creation_order():
    gm = _traced_chain()
    g = gm.graph
    relu = g.find_nodes(op="call_function", target=tp.relu)[0]
    with g.inserting_after(relu):
        s = g.call_function(tp.sin, (relu,))
        c = g.call_function(tp.cos, (s,))
    assert _names(g) == ["x", "y", "add", "relu", "sin", "cos", "mul", "output"]
    assert c.args == (s,) and list(relu.users) == [g.nodes[6], s]  # in order of use


def test_torch_fx_reverses_nodes_created_in_a_row_after_a_node():
    fx = pytest.importorskip("torch.fx")
    torch = pytest.importorskip("torch")
    g = fx.Graph()
    x = g.placeholder("x")
    g.output(x)
    with g.inserting_after(x):
        a = g.call_function(torch.relu, (x,))
        g.call_function(torch.sin, (a,))
    # torch.fx puts sin before the relu it reads; ours keeps creation order (see above)
    assert [n.name for n in g.nodes] == ["x", "sin", "relu", "output"]


def test_inserting_before_a_node_and_at_the_start():
    gm = _traced_chain()
    g = gm.graph
    mul = g.find_nodes(op="call_function", target=tp.mul)[0]
    with g.inserting_before(mul):
        g.call_function(tp.exp, (mul.args[0],))
        g.call_function(tp.neg, (mul.args[0],))
    with g.inserting_before(None):
        g.placeholder("z")
    assert _names(g) == ["z", "x", "y", "add", "relu", "exp", "neg", "mul", "output"]


def test_insertion_point_is_restored_after_the_block():
    g = Graph()
    x = g.placeholder("x")
    out = g.output(x)
    with g.inserting_before(out):
        inner = g.call_function(tp.relu, (x,))
    outer = g.call_function(tp.sin, (x,))  # no block: at the end again, as in torch.fx
    assert _names(g) == ["x", "relu", "output", "sin"]
    assert inner.name == "relu" and outer is g.nodes[-1]


def test_inserting_next_to_a_node_of_another_graph_is_refused():
    other = Graph().placeholder("x")
    with pytest.raises(ValueError, match="not a live node of this graph"):
        Graph().inserting_after(other)


# ---- uses ----------------------------------------------------------------------------------


def test_replace_all_uses_with_returns_the_changed_users():
    gm = _traced_chain()
    g = gm.graph
    relu = g.find_nodes(op="call_function", target=tp.relu)[0]
    with g.inserting_after(relu):
        new = g.call_function(tp.sigmoid, (relu.args[0],))
    changed = relu.replace_all_uses_with(new)
    assert [n.name for n in changed] == ["mul"] and not relu.users
    g.erase_node(relu)
    gm.recompile()
    x, y = _xy()
    _close(gm(x, y), tp.sigmoid(x + y) * 2)


def test_replace_all_uses_with_leaves_the_new_node_reading_the_old_one():
    gm = _traced_chain()
    g = gm.graph
    add = g.find_nodes(op="call_function", target=tp.add)[0]
    with g.inserting_after(add):
        doubled = g.call_function(tp.mul, (add, 10.0))
    changed = add.replace_all_uses_with(doubled)  # no delete_user_cb needed
    assert doubled.args == (add, 10.0) and [n.name for n in changed] == ["relu"]
    gm.recompile()
    x, y = _xy()
    _close(gm(x, y), tp.relu((x + y) * 10.0) * 2)


def test_replace_all_uses_with_delete_user_cb_keeps_some_users():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(tp.sin, (x,))
    b = g.call_function(tp.cos, (x,))
    g.output((a, b))
    y = g.placeholder("y")
    changed = x.replace_all_uses_with(y, delete_user_cb=lambda user: user is not b)
    assert changed == [a] and a.args == (y,) and b.args == (x,)
    assert list(x.users) == [b] and list(y.users) == [a]


def test_replace_all_uses_with_refuses_a_constant():
    gm = _traced_chain()
    with pytest.raises(TypeError, match="must be a Node"):
        gm.graph.nodes[2].replace_all_uses_with(1.0)


def test_replace_input_with_changes_one_input():
    gm = _traced_chain()
    add = gm.graph.nodes[2]
    x, y_node = gm.graph.placeholders
    add.replace_input_with(y_node, x)
    assert add.args == (x, x) and list(x.users) == [add] and not y_node.users
    gm.recompile()
    x_val, y_val = _xy()
    _close(gm(x_val, y_val), tp.relu(x_val + x_val) * 2)


def test_setting_args_and_kwargs_keeps_users_consistent():
    g = Graph()
    x, y = g.placeholder("x"), g.placeholder("y")
    s = g.call_method("sum", (x,), {"dim": 0})
    assert list(x.users) == [s] and s.all_input_nodes == [x]
    s.args = (y,)
    assert not x.users and list(y.users) == [s]
    s.kwargs = {"dim": 0, "out": x}
    assert s.all_input_nodes == [y, x] and list(x.users) == [s]
    g.lint()


def test_users_is_an_ordered_dict_like_torch_fx():
    fx = pytest.importorskip("torch.fx")
    torch = pytest.importorskip("torch")

    def f(x):
        return torch.relu(x) + torch.sin(x) * x.cos()

    def g(x):
        return tp.relu(x) + tp.sin(x) * x.cos()

    theirs = fx.symbolic_trace(f).graph.nodes
    ours = symbolic_trace(g).graph.nodes
    for t, o in zip(theirs, ours):
        assert type(o.users) is dict
        assert [u.name for u in o.users] == [u.name for u in t.users]
        assert [n.name for n in o.all_input_nodes] == [n.name for n in t.all_input_nodes]


# ---- erasing, moving, dead code ------------------------------------------------------------


def test_erase_node_refuses_a_node_that_is_still_read():
    gm = _traced_chain()
    relu = gm.graph.nodes[3]
    with pytest.raises(
        RuntimeError, match=r"erase_node\(relu\): 1 node\(s\) still read it \(mul\)"
    ):
        gm.graph.erase_node(relu)
    with pytest.raises(RuntimeError, match="replace_all_uses_with"):
        gm.graph.erase_node(relu)


def test_erase_node_refuses_twice_and_foreign_nodes():
    g = Graph()
    x = g.placeholder("x")
    dead = g.call_function(tp.sin, (x,))
    g.erase_node(dead)
    with pytest.raises(RuntimeError, match="already erased"):
        g.erase_node(dead)
    with pytest.raises(RuntimeError, match="not in this graph"):
        Graph().erase_node(x)
    assert not x.users and dead.args == (None,)


def test_erasing_while_iterating_visits_every_node():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(tp.sin, (x,))
    b = g.call_function(tp.sin, (a,))
    g.output(x)
    seen = []
    for node in g.nodes:  # the linked list survives erasing the current node
        seen.append(node.name)
        if node is b:
            g.erase_node(b)
            g.erase_node(a)
    assert seen == ["x", "sin", "sin_1", "output"] and _names(g) == ["x", "output"]


def test_inserting_before_the_current_node_while_iterating_does_not_revisit_it():
    gm = _traced_chain()
    g = gm.graph
    visits = 0
    for node in g.nodes:
        if node.op == "call_function" and node.target is tp.relu:
            visits += 1
            with g.inserting_before(node):
                g.call_function(tp.abs, (node.args[0],))
    assert visits == 1 and _names(g) == ["x", "y", "add", "abs", "relu", "mul", "output"]


def test_prepend_and_append_move_nodes():
    g = Graph()
    x = g.placeholder("x")
    a = g.call_function(tp.sin, (x,))
    b = g.call_function(tp.cos, (x,))
    out = g.output((a, b))
    a.prepend(b)
    assert _names(g) == ["x", "cos", "sin", "output"]
    x.append(a)
    assert _names(g) == ["x", "sin", "cos", "output"]
    with pytest.raises(ValueError, match="cannot move next to itself"):
        out.prepend(out)


def test_eliminate_dead_code_keeps_inplace_ops_and_reports_change():
    def f(x, buf):
        tp.exp(x) * 3  # pure and unread: removed
        buf.add_(1.0)  # in place: kept although unread
        buf[0] = 5.0  # setitem: kept
        return x + 1

    gm = symbolic_trace(f, {"x": tp.ones(2), "buf": tp.zeros(2)})
    assert gm.graph.eliminate_dead_code() is True
    assert [n.op_name for n in gm.graph.nodes] == ["x", "buf", "add_", "setitem", "add", "output"]
    assert gm.graph.eliminate_dead_code() is False
    gm.recompile()
    buf = tp.zeros(2)
    assert gm(tp.ones(2), buf).tolist() == [2.0, 2.0] and buf.tolist() == [5.0, 1.0]


def test_eliminate_dead_code_keeps_what_torch_fx_keeps_and_inplace_methods():
    fx = pytest.importorskip("torch.fx")
    torch = pytest.importorskip("torch")

    def f(x, y):
        torch.exp(x)
        y.mul_(2)
        return x.sin()

    def g(x, y):
        tp.exp(x)
        y.mul_(2)
        return x.sin()

    theirs, ours = fx.symbolic_trace(f).graph, symbolic_trace(g).graph
    assert theirs.eliminate_dead_code() is True and ours.eliminate_dead_code() is True
    # torch.fx drops the unread in-place method call mul_ as well; we keep it (it writes y)
    assert [n.name for n in theirs.nodes] == ["x", "y", "sin", "output"]
    assert _names(ours) == ["x", "y", "mul_", "sin", "output"]


def test_eliminate_dead_code_with_a_custom_impurity_rule():
    g = symbolic_trace(lambda x: (tp.exp(x), x)[1]).graph
    assert g.eliminate_dead_code(is_impure_node=lambda n: n.op != "call_function") is True
    assert _names(g) == ["x", "output"]


# ---- lint --------------------------------------------------------------------------------


def test_lint_accepts_traced_graphs():
    assert _traced_chain().graph.lint() is None


def test_lint_names_a_node_read_before_it_is_defined():
    gm = _traced_chain()
    add, relu = gm.graph.nodes[2], gm.graph.nodes[3]
    add.prepend(relu)
    with pytest.raises(RuntimeError, match="'relu' .* reads %add before it is defined"):
        gm.graph.lint()


def test_lint_names_a_node_after_the_output():
    g = Graph()
    x = g.placeholder("x")
    g.output(x)
    g.call_function(tp.sin, (x,))
    with pytest.raises(RuntimeError, match="'sin' .* comes after the output node 'output'"):
        g.lint()


def test_lint_names_a_dangling_user_and_a_missing_attribute():
    gm = _traced_chain()
    x = gm.graph.nodes[0]
    x.users[gm.graph.nodes[3]] = None  # relu does not read x
    with pytest.raises(RuntimeError, match="lists 'relu' as a user, which does not read it"):
        gm.graph.lint()
    del x.users[gm.graph.nodes[3]]
    with gm.graph.inserting_before(gm.graph.output_node):
        gm.graph.get_attr("missing")
    with pytest.raises(RuntimeError, match="'missing', which the GraphModule does not have"):
        gm.graph.lint()


def test_nodes_of_another_graph_or_erased_ones_cannot_be_arguments():
    g, other = Graph(), Graph()
    foreign = other.placeholder("x")
    with pytest.raises(ValueError, match="belongs to another graph.*node_copy"):
        g.call_function(tp.sin, (foreign,))
    x = g.placeholder("x")
    dead = g.call_function(tp.sin, (x,))
    g.erase_node(dead)
    with pytest.raises(ValueError, match="was erased"):
        g.call_function(tp.cos, (dead,))


# ---- names, targets, code (issue 18 decisions) ---------------------------------------------


def test_node_names_follow_torch_fx_namespace():
    fx = pytest.importorskip("torch.fx")
    torch = pytest.importorskip("torch")
    requested = ["add_1", None, None, None, "add_5", "add_5", None, "class", "mul_0", None]

    def build(graph, fn):
        x = graph.placeholder("x")
        return [graph.create_node("call_function", fn, (x, x), name=n).name for n in requested]

    theirs = build(fx.Graph(), torch.add)
    ours = build(Graph(), tp.add)
    assert ours == theirs
    assert ours[:4] == ["add_1", "add", "add_2", "add_3"]  # add_1 after add, never add_0
    assert ours[4:7] == ["add_5", "add_6", "add_7"]


def test_python_operators_record_the_op_function():
    fx = pytest.importorskip("torch.fx")
    torch = pytest.importorskip("torch")
    theirs = fx.symbolic_trace(lambda a, b: (a + b, torch.add(a, b))).graph
    ours = symbolic_trace(lambda a, b: (a + b, tp.add(a, b))).graph
    assert [n.target for n in theirs.nodes if n.op == "call_function"] == [
        operator.add,
        torch.add,
    ]
    assert [n.target for n in ours.nodes if n.op == "call_function"] == [tp.add, tp.add]
    assert _names(ours) == [n.name for n in theirs.nodes]


def test_recompile_returns_python_code():
    gm = _traced_chain()
    code = gm.recompile()
    assert isinstance(code, PythonCode) and code.src == gm.code
    assert code.src.splitlines()[0] == "def forward(self, x, y):"
    assert code.globals["tp"] is tp


# ---- concrete_args, wrap, node names ---------------------------------------------------------


def _branchy(x, flag, scale=2.0):
    if flag:
        return x * scale
    return x - scale


def test_concrete_args_specialise_a_python_branch():
    gm = symbolic_trace(_branchy, {"x": tp.ones(2)}, concrete_args={"flag": False})
    assert _names(gm.graph) == ["x", "sub", "output"]
    assert gm(tp.tensor([5.0, 1.0])).tolist() == [3.0, -1.0]
    gm = Tracer().trace(_branchy, concrete_args={"flag": True, "scale": 4.0})
    assert gm(tp.tensor([1.0, 2.0])).tolist() == [4.0, 8.0]


def test_concrete_args_drop_the_input_where_torch_fx_keeps_a_checked_one():
    fx = pytest.importorskip("torch.fx")
    theirs = fx.symbolic_trace(_branchy, concrete_args={"flag": False})
    ours = symbolic_trace(_branchy, concrete_args={"flag": False})
    assert [n.name for n in theirs.graph.nodes if n.op == "placeholder"] == [
        "x",
        "flag_1",
        "scale",
    ]
    assert [n.name for n in ours.graph.placeholders] == ["x"]


def test_concrete_args_name_unknown_and_doubled_parameters():
    with pytest.raises(TypeError, match=r"concrete_args names \['flg'\] are not parameters"):
        symbolic_trace(_branchy, concrete_args={"flg": True})
    with pytest.raises(TypeError, match=r"\['x'\] given in both"):
        symbolic_trace(_branchy, {"x": tp.ones(1)}, concrete_args={"x": 1.0})


@wrap
def _positive_part(x):
    # data-dependent: cannot be traced, so it must be a leaf
    return x if float(x.min()) >= 0 else x.clamp(min=0.0)


def _halve(x):
    return x / 2


wrap("_halve")  # by name, at module level, as torch.fx.wrap


def test_wrap_records_one_call_function_leaf():
    gm = symbolic_trace(lambda x: _positive_part(x * 2) + _halve(x), {"x": tp.ones(3)})
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [n.name for n in calls] == ["mul", "_positive_part", "_halve", "add"]
    assert calls[1].target is _positive_part.__wrapped__
    assert calls[2].meta["val"].shape == (3,)  # its body ran on meta tensors only
    x = tp.tensor([-1.0, 2.0, 3.0])
    assert gm(x).tolist() == [-0.5, 5.0, 7.5]
    assert _positive_part(x).tolist() == [0.0, 2.0, 3.0]  # outside a capture: the function


def test_wrap_by_name_inside_a_function_is_refused():
    with pytest.raises(RuntimeError, match="top level of a module"):
        wrap("_halve")


def test_wrap_of_an_unknown_name_or_a_non_function_says_how():
    with pytest.raises(NameError, match="has no function 'nope'"):
        exec("wrap('nope')", {"wrap": wrap, "__name__": "m"})  # noqa: S102 - a module body
    with pytest.raises(TypeError, match="expected a function"):
        wrap(3)


def test_wrapped_function_under_compile_is_one_interpreter_node():
    cf = tp.compile(lambda x: _positive_part(x - 1) * 2, backend="eager")
    assert cf(tp.tensor([0.0, 3.0])).tolist() == [0.0, 4.0]
    assert [r.node for r in cf.report()] == ["sub", "_positive_part", "mul"]


def test_get_graph_node_names_of_a_function():
    train, evaluation = get_graph_node_names(_chain, {"x": tp.ones(2), "y": tp.ones(2)})
    assert train == evaluation == ["x", "y", "add", "relu", "mul"]


def test_get_graph_node_names_of_a_module_in_both_modes():
    nn = pytest.importorskip("tensorplay.nn")
    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5))
    model.eval()
    train, evaluation = get_graph_node_names(model, {"input": tp.randn(2, 4)})
    assert evaluation == ["input", "_0_weight", "_0_bias", "linear"]
    assert train[:4] == evaluation and len(train) > len(evaluation)  # dropout only trains
    assert model.training is False  # left in the mode it was in


# ---- modules ---------------------------------------------------------------------------------


class _Scale:
    """A duck-typed submodule: anything callable."""

    def __init__(self, factor):
        self.factor = tp.tensor(factor)

    def __call__(self, x):
        return x * self.factor


def test_call_module_runs_a_duck_typed_submodule():
    gm = _traced_chain()
    g = gm.graph
    assert gm.add_submodule("scale", _Scale(3.0)) is True
    relu = g.find_nodes(op="call_function", target=tp.relu)[0]
    with g.inserting_after(relu):
        scaled = g.call_module("scale", (relu,))
    relu.replace_all_uses_with(scaled)
    g.lint()
    gm.recompile()
    assert "scale = self.scale(relu)" in gm.code
    x, y = _xy()
    _close(gm(x, y), tp.relu(x + y) * 3.0 * 2)
    _close(Interpreter(gm).run(x, y), gm(x, y))
    assert gm.constants["scale"] is gm.get_submodule("scale")


def test_add_submodule_refuses_non_callables_and_get_submodule_names_the_fix():
    gm = _traced_chain()
    with pytest.raises(TypeError, match="must be callable"):
        gm.add_submodule("w", 3)
    with pytest.raises(AttributeError, match=r"gm.add_submodule\('nope', module\)"):
        gm.get_submodule("nope")
    gm.add_submodule("scale", _Scale(2.0))
    assert gm.delete_submodule("scale") is True and gm.delete_submodule("scale") is False


def test_dotted_targets_walk_into_submodules():
    g = Graph()
    x = g.placeholder("x")
    w = g.get_attr("block.factor")
    g.output(g.call_function(tp.mul, (x, w)))
    gm = GraphModule(g, {"block": _Scale(4.0)})
    assert "getattr(self, 'block.factor')" in gm.code
    assert gm(tp.ones(2)).tolist() == [4.0, 4.0]


def test_graph_module_from_an_object_root_reads_each_target():
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call_module("inner", (x,)))
    root = type("Root", (), {"inner": _Scale(5.0)})()
    gm = GraphModule(g, root)
    assert gm(tp.ones(1)).tolist() == [5.0]
    with pytest.raises(AttributeError, match="reads 'inner', which Root root does not have"):
        GraphModule(g, type("Root", (), {})())


def test_tracing_a_module_names_its_parameters_and_call_module_runs_nn_modules():
    nn = pytest.importorskip("tensorplay.nn")
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    gm = symbolic_trace(model, {"input": tp.randn(2, 4)})
    attrs = gm.graph.find_nodes(op="get_attr")
    assert [n.target for n in attrs] == ["0.weight", "0.bias"]
    assert gm.constants["0.weight"] is model[0].weight
    x = tp.randn(2, 4)
    _close(gm(x), model(x))
    relu = gm.graph.find_nodes(op="call_function", target=tp.relu)[0]
    gm.add_submodule("act", nn.GELU())
    with gm.graph.inserting_before(relu):
        act = gm.graph.call_module("act", relu.args)
    relu.replace_all_uses_with(act)
    gm.graph.erase_node(relu)
    gm.recompile()
    _close(gm(x), nn.GELU()(model[0](x)))


# ---- subgraph rewriter -----------------------------------------------------------------------


def test_replace_pattern_rewrites_every_match_and_returns_them():
    def f(x, y):
        return tp.relu(x + y) * tp.relu(tp.add(y, 1.0))

    def pattern(a, b):
        return tp.relu(a + b)

    def replacement(a, b):
        return tp.sigmoid(a - b)

    gm = symbolic_trace(f, {"x": tp.randn(3), "y": tp.randn(3)})
    matches = replace_pattern(gm, pattern, replacement)
    assert all(isinstance(m, Match) for m in matches)
    assert [m.nodes_map[m.anchor].name for m in matches] == ["relu", "relu_1"]
    assert all(m.anchor.graph is not gm.graph for m in matches)  # a pattern node
    assert [v for k, v in matches[1].nodes_map.items() if k.op == "placeholder"][1] == 1.0
    assert [n.name for n in matches[0].replacements] == ["sub", "sigmoid"]
    assert [n.op_name for n in gm.graph.nodes] == [
        "x", "y", "sub", "sigmoid", "sub", "sigmoid", "mul", "output"
    ]  # fmt: skip
    x, y = _xy()
    _close(gm(x, y), tp.sigmoid(x - y) * tp.sigmoid(y - 1.0))


def test_replace_pattern_matches_like_torch_fx():
    fx = pytest.importorskip("torch.fx")
    torch = pytest.importorskip("torch")
    from torch.fx import subgraph_rewriter  # noqa: PLC0415 - optional oracle

    def chain(lib):
        def f(x):
            y = lib.relu(x)
            return lib.relu(lib.relu(y)) + lib.sin(lib.relu(y))  # the last relu escapes

        return f

    theirs = fx.symbolic_trace(chain(torch))
    ours = symbolic_trace(chain(tp), {"x": tp.ones(2)})
    t = subgraph_rewriter.replace_pattern(
        theirs, lambda x: torch.relu(torch.relu(x)), lambda x: torch.tanh(x)
    )
    o = replace_pattern(ours, lambda x: tp.relu(tp.relu(x)), lambda x: tp.tanh(x))
    assert [m.anchor.name for m in o] == [m.anchor.name for m in t] == ["relu_1"]
    assert [m.nodes_map[m.anchor].name for m in o] == [m.nodes_map[m.anchor].name for m in t]
    assert [n.name for n in ours.graph.nodes] == [n.name for n in theirs.graph.nodes]
    x = tp.tensor([-1.0, 0.5, 2.0])
    _close(ours(x), tp.tanh(tp.relu(x)) + tp.sin(tp.relu(tp.relu(x))))


def test_replace_pattern_skips_a_match_whose_inner_value_is_read_outside():
    def f(x):
        y = tp.relu(x)
        return tp.sin(y) + y

    gm = symbolic_trace(f)
    assert replace_pattern(gm, lambda x: tp.sin(tp.relu(x)), lambda x: tp.cos(x)) == []
    assert [n.op_name for n in gm.graph.nodes] == ["x", "relu", "sin", "add", "output"]


def test_replace_pattern_with_two_returned_values():
    def f(x):
        a = tp.exp(x)
        return tp.sin(a) * tp.cos(a)

    def pattern(x):
        a = tp.exp(x)
        return tp.sin(a), tp.cos(a)

    def replacement(x):
        return tp.cos(x), tp.sin(x)

    gm = symbolic_trace(f)
    (match,) = replace_pattern(gm, pattern, replacement)
    assert match.nodes_map[match.anchor].name == "sin"
    x = tp.tensor([0.3, -1.2])
    _close(gm(x), tp.cos(x) * tp.sin(x))


def test_replace_pattern_refuses_mismatched_signatures():
    gm = _traced_chain()
    with pytest.raises(ValueError, match=r"pattern takes 2 input\(s\) \['a', 'b'\] but"):
        replace_pattern(gm, lambda a, b: a + b, lambda a: a)
    with pytest.raises(ValueError, match=r"pattern input\(s\) \['b'\] are unused"):
        replace_pattern(gm, lambda a, b: tp.relu(a), lambda a, b: a)
    with pytest.raises(ValueError, match="pattern returns 1 value"):
        replace_pattern(gm, lambda a: tp.relu(a), lambda a: (a, a))


# ---- passes under tp.compile -----------------------------------------------------------------


def _exp_to_sin(gm):
    """Edits in place: every tp.exp call becomes tp.sin."""
    g = gm.graph
    for node in g.find_nodes(op="call_function", target=tp.exp):
        with g.inserting_before(node):
            new = g.call_function(tp.sin, node.args, node.kwargs)
        node.replace_all_uses_with(new)
        g.erase_node(node)


@pytest.mark.parametrize("backend", ["eager", "tvm"])
def test_compile_runs_passes_before_the_backend(backend, request):
    if backend == "tvm":
        request.getfixturevalue("tvm")
    cf = tp.compile(lambda x: tp.exp(x * 2) + 1, backend=backend, options={"passes": [_exp_to_sin]})
    x = tp.tensor([0.1, -0.7, 2.0])
    _close(cf(x), tp.sin(x * 2) + 1)
    report = cf.report()
    assert [r.node for r in report] == ["mul", "sin", "add"]
    if backend == "tvm":
        assert report.routes() == {"tvm": 3}  # the new node got its meta: it is lowered
    gm = next(iter(cf._tensorplay_cache.values())).graph_module
    assert gm.graph.find_nodes(op="call_function", target=tp.sin)[0].meta["val"].shape == (3,)


def test_compile_passes_may_return_a_graph_or_a_module_and_run_in_order():
    order = []

    def returns_graph(gm):
        order.append("graph")
        _exp_to_sin(gm)
        return gm.graph

    def returns_module(gm):
        order.append("module")
        gm.add_submodule("triple", _Scale(3.0))
        out = gm.graph.output_node
        with gm.graph.inserting_before(out):
            tripled = gm.graph.call_module("triple", (out.args[0],))
        out.args = (tripled,)
        return gm

    cf = tp.compile(
        lambda x: tp.exp(x), backend="eager", options={"passes": [returns_graph, returns_module]}
    )
    x = tp.tensor([0.5, 1.0])
    _close(cf(x), tp.sin(x) * 3.0)
    assert order == ["graph", "module"]
    assert [r.node for r in cf.report()] == ["sin", "triple"]


def test_compile_names_a_pass_with_a_bad_result_or_a_malformed_graph():
    def bad(gm):
        return 3

    with pytest.raises(TypeError, match="pass bad returned int"):
        tp.compile(lambda x: x + 1, backend="eager", options={"passes": [bad]})(tp.ones(1))

    def breaks_order(gm):
        add = gm.graph.nodes[1]
        gm.graph.nodes[0].prepend(add)

    with pytest.raises(RuntimeError, match="pass breaks_order left a malformed graph"):
        tp.compile(lambda x: x + 1, backend="eager", options={"passes": [breaks_order]})(tp.ones(1))


def test_compile_checks_the_passes_option():
    with pytest.raises(TypeError, match=r"options\['passes'\]\[1\] is a str"):
        tp.compile(lambda x: x, backend="eager", options={"passes": [_exp_to_sin, "dce"]})
    with pytest.raises(TypeError, match="must be a list of passes"):
        tp.compile(lambda x: x, backend="eager", options={"passes": 3})


def test_propagate_shapes_refills_meta_after_an_edit():
    gm = symbolic_trace(lambda x: x.sum(dim=0), {"x": tp.ones(3, 4)})
    node = gm.graph.nodes[1]
    node.kwargs = {"dim": 1}
    assert node.meta["val"].shape == (4,)  # stale until propagated
    propagate_shapes(gm)
    assert node.meta["val"].shape == (3,) and node.meta["val"].device.type == "meta"


# ---- the eager fallback is never silent --------------------------------------------------------


def test_capture_fallback_warns_once_per_function_and_report_says_why():
    def data_dependent(x):
        if x.sum() > 0:  # the offending line
            return x * 2
        return x

    cf = tp.compile(data_dependent, backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cf(tp.ones(2)).tolist() == [2.0, 2.0]
        assert cf(tp.ones(3)).tolist() == [2.0, 2.0, 2.0]  # a new specialisation: no 2nd warning
    (warning,) = [w for w in caught if "graph capture failed" in str(w.message)]
    assert warning.category is RuntimeWarning and warning.filename == __file__
    assert "runs data_dependent eagerly" in str(warning.message)
    assert "if x.sum() > 0:" in str(warning.message)
    (row,) = cf.report().rows
    assert row.route == "eager" and "if x.sum() > 0:" in row.reason
    assert "if x.sum() > 0:" in str(cf.report())
