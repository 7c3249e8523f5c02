"""Shape rules written as expressions, several outputs, optional and list arguments, and
the expression whitelist on its own."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import tensorplay as tp
from tensorplay import library, oplib
from tensorplay.oplib._errors import OplibError, Where
from tensorplay.oplib._formula import Expression

KERNELS = r"""
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/optional.h>
using tvm::ffi::TensorView;

// mean and max of each row (last dimension), the mean times `scale` when given
void row_stats_cpu(TensorView x, tvm::ffi::Optional<double> scale, TensorView mean,
                   TensorView max) {
  int64_t n = x.size(x.ndim() - 1), rows = x.numel() / n;
  const float* px = static_cast<const float*>(x.data_ptr());
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0, m = px[r * n];
    for (int64_t i = 0; i < n; ++i) {
      s += px[r * n + i];
      m = px[r * n + i] > m ? px[r * n + i] : m;
    }
    static_cast<float*>(mean.data_ptr())[r] = s / n * (scale.has_value() ? *scale : 1.0);
    static_cast<float*>(max.data_ptr())[r] = m;
  }
}
// out = x with widths[0] zero columns appended
template <typename T>
void Pad(TensorView x, int64_t extra, TensorView out) {
  int64_t n = x.size(x.ndim() - 1), rows = x.numel() / n, w = n + extra;
  const T* px = static_cast<const T*>(x.data_ptr());
  T* po = static_cast<T*>(out.data_ptr());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < w; ++i) po[r * w + i] = i < n ? px[r * n + i] : T(0);
}
void pad_cpu(TensorView x, tvm::ffi::Array<int64_t> widths, TensorView out) {
  if (x.dtype().bits == 64) Pad<double>(x, widths[0], out); else Pad<float>(x, widths[0], out);
}
TVM_FFI_DLL_EXPORT_TYPED_FUNC(row_stats_cpu, row_stats_cpu);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(pad_cpu, pad_cpu);
"""

YAML = """\
namespace: oplib_rules
sources: {cpp: [kernels.cc]}
ops:
  - schema: row_stats(Tensor x, float? scale=None) -> (Tensor, Tensor)
    kernels: {cpu: row_stats_cpu}
    fake:
      - {shape: "x.shape[:-1]"}
      - {shape: "tuple(x.shape)[:-1]", dtype: x.dtype}
    derivatives:
      x: "(grads[0] * (1.0 if scale is None else scale) / x.shape[-1]).unsqueeze(-1).expand_as(x)"
  - schema: pad(Tensor x, int[] widths) -> Tensor
    kernels: {cpu: pad_cpu}
    fake: {shape: "x.shape[:-1] + (x.shape[-1] + widths[0],)"}
    derivatives: {x: "grad.narrow(-1, 0, x.shape[-1])"}
  - schema: pad_no_grad(Tensor x, int[] widths) -> Tensor
    kernels: {cpu: pad_cpu}
    fake: {shape: "x.shape[:-1] + (x.shape[-1] + widths[0],)"}
"""


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    if "oplib_rules" not in oplib.loaded():
        src = tmp_path_factory.mktemp("rules")
        (src / "kernels.cc").write_text(KERNELS)
        (src / "ops.yaml").write_text(YAML)
        oplib.load(oplib.build(src / "ops.yaml", src / "build"))
    return tp.ops.oplib_rules


def test_two_outputs_with_expression_rules_and_an_optional_scalar(ops):
    x = tp.randn(3, 5)
    mean, mx = ops.row_stats(x)
    np.testing.assert_allclose(mean.numpy(), x.numpy().mean(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mx.numpy(), x.numpy().max(-1))
    scaled, _ = ops.row_stats(x, scale=2.0)
    np.testing.assert_allclose(scaled.numpy(), 2.0 * x.numpy().mean(-1), rtol=1e-5, atol=1e-6)
    m, _ = ops.row_stats(tp.empty(2, 7, 5, device="meta"))
    assert (m.device.type, tuple(m.shape)) == ("meta", (2, 7))


def test_the_gradient_of_one_of_two_outputs(ops):
    x = tp.randn(2, 4, requires_grad=True)
    mean, _ = ops.row_stats(x, scale=3.0)
    mean.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 4), 3.0 / 4), rtol=1e-6)


def test_a_list_argument_in_the_shape_rule(ops):
    x = tp.randn(2, 3)
    y = ops.pad(x, [2])
    assert tuple(y.shape) == (2, 5)
    np.testing.assert_allclose(y.numpy(), np.pad(x.numpy(), ((0, 0), (0, 2))))
    with pytest.warns(UserWarning, match="test_vmap skipped"):
        assert library.opcheck(ops.pad, (x, [1]), test_utils="all") == {}


def test_an_operator_without_derivatives_says_where_to_add_them(ops):
    x = tp.randn(2, 3, requires_grad=True)
    y = ops.pad_no_grad(x, [1])
    with pytest.raises(
        RuntimeError, match=r"oplib_rules::pad_no_grad has no derivatives \(ops.yaml:\d+\)"
    ):
        y.sum().backward()


def test_the_schema_is_the_custom_ops(ops):
    assert ops.row_stats.schema == "(Tensor x, float? scale=None) -> (Tensor, Tensor)"


@pytest.mark.parametrize(
    "text,problem",
    [
        ("x.__dict__", "attribute '__dict__' is private"),
        ("[i for i in x]", "ListComp is not allowed"),
        ("open('f')", "unknown name 'open'"),
        ("x.numpy()", "attribute 'numpy' is not a Tensor method"),
        ("tp.ops", "tp.ops is not available"),
        ("f(**k)", r"'\*\*' arguments are not allowed"),
        ("x if", "invalid syntax"),
    ],
)
def test_expressions_outside_the_whitelist_are_refused(text, problem):
    with pytest.raises(OplibError, match=problem) as info:
        Expression(text, Where("ops.yaml", 3, "ns::op"), "the rule", ["x"], ["f", "k"])
    assert str(info.value).startswith("ops.yaml:3: ns::op: the rule: ")


def test_an_expression_is_a_function_of_the_names_it_uses():
    e = Expression("tp.exp(x) * 2 + len(y.shape)", Where("f.yaml", 1), "e", ["x", "y", "z"], ())
    assert e.names == ("x", "y")
    value = e.bind({}).fn(tp.zeros(2), tp.zeros(3, 4))
    assert value.tolist() == [4.0, 4.0]


def test_a_traceback_through_a_formula_points_at_the_yaml_line():
    e = Expression("x / y", Where("lib/ops.yaml", 42), "e", ["x", "y"], ()).bind({})
    with pytest.raises(ZeroDivisionError) as info:
        e.fn(1, 0)
    frame = info.traceback[-1]
    assert (str(frame.path), frame.lineno + 1) == ("lib/ops.yaml", 42)


def test_yaml_keys_are_plain_strings(tmp_path):
    (tmp_path / "ops.yaml").write_text(
        textwrap.dedent("""\
        namespace: yaml_keys
        ops:
          - schema: f(Tensor on) -> Tensor
            kernels: {cpu: f}
            fake: {same_as: "on"}
            derivatives: {on: grad}
        """)
    )
    with pytest.raises(OplibError, match="no C.. sources") as info:
        oplib.build(tmp_path / "ops.yaml", tmp_path / "out")
    # the derivative's key 'on' stayed a name (YAML 1.1 reads a plain on as True)
    assert ":4: yaml_keys::f: names the cpu kernel 'f'" in str(info.value)
