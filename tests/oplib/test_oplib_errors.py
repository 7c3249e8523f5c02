"""Bad definitions are refused at build time with ``file:line: namespace::op: ...`` and what
to change, and nothing is left behind; a library built for another TensorPlay is refused
when loaded."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

import tensorplay as tp
from tensorplay import oplib

KERNELS = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

using tvm::ffi::TensorView;

// out = 2 * x (float32 or float64)
void twice_cpu(TensorView x, TensorView out) {
  if (x.dtype().bits == 32) {
    for (int64_t i = 0; i < x.numel(); ++i)
      static_cast<float*>(out.data_ptr())[i] = 2.0f * static_cast<const float*>(x.data_ptr())[i];
  } else {
    for (int64_t i = 0; i < x.numel(); ++i)
      static_cast<double*>(out.data_ptr())[i] = 2.0 * static_cast<const double*>(x.data_ptr())[i];
  }
}

// throws something that is not a std::exception
void throws_cpu(TensorView x, TensorView out) { throw 42; }

TVM_FFI_DLL_EXPORT_TYPED_FUNC(twice_cpu, twice_cpu);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(throws_cpu, throws_cpu);
"""

GOOD_OP = """\
namespace: {ns}
sources: {{cpp: [{kernels}]}}
ops:
  - schema: twice(Tensor x) -> Tensor
    kernels: {{cpu: twice_cpu}}
    fake: {{same_as: x}}
    derivatives:
      x: {formula}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """One kernel file for every build here (same path and content: compiled once)."""
    path = tmp_path_factory.mktemp("kernels") / "kernels.cc"
    path.write_text(KERNELS)
    return path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ops.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def build_error(tmp_path: Path, text: str, **kwargs) -> str:
    schema = write(tmp_path, text)
    with pytest.raises(oplib.OplibError) as info:
        oplib.build(schema, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing
    return str(info.value)


def test_malformed_yaml_names_the_line(tmp_path):
    msg = build_error(
        tmp_path,
        "namespace: bad_yaml\nops:\n  - schema: f(Tensor x) -> Tensor\n   kernels: {cpu: f}\n",
    )
    assert msg.startswith(f"{tmp_path / 'ops.yaml'}:4: malformed YAML")


def test_unknown_key_names_the_operator_and_line(tmp_path, kernels):
    msg = build_error(
        tmp_path,
        f"""\
        namespace: bad_key
        sources: {{cpp: [{kernels}]}}
        ops:
          - schema: twice(Tensor x) -> Tensor
            kernels: {{cpu: twice_cpu}}
            fake: {{same_as: x}}
            derivative: {{x: grad * 2}}
        """,
    )
    assert msg.startswith(f"{tmp_path / 'ops.yaml'}:7: bad_key::twice: unknown key 'derivative'")
    assert "'derivatives'" in msg


def test_unknown_library_key_and_duplicate_key(tmp_path):
    msg = build_error(tmp_path, "namespace: dup\nnamespace: dup2\nops: []\n")
    assert msg.startswith(
        f"{tmp_path / 'ops.yaml'}:2: key 'namespace' is given twice (first on line 1)"
    )
    msg = build_error(tmp_path, "namespace: x\nsource: []\nops: []\n")
    assert ":2: unknown key 'source' in the library" in msg


def test_a_kernel_the_sources_do_not_export(tmp_path, kernels):
    msg = build_error(
        tmp_path,
        f"""\
        namespace: no_symbol
        sources: {{cpp: [{kernels}]}}
        ops:
          - schema: twice(Tensor x) -> Tensor
            fake: {{same_as: x}}
            kernels: {{cpu: thrice_cpu}}
        """,
    )
    assert msg.startswith(
        f"{tmp_path / 'ops.yaml'}:6: no_symbol::twice: the cpu kernel 'thrice_cpu'"
    )
    assert "TVM_FFI_DLL_EXPORT_TYPED_FUNC(thrice_cpu, thrice_cpu)" in msg


def test_a_kernel_whose_signature_does_not_fit_the_schema(tmp_path, kernels):
    msg = build_error(
        tmp_path,
        f"""\
        namespace: mismatch
        sources: {{cpp: [{kernels}]}}
        ops:
          - schema: scaled(Tensor x, float alpha) -> Tensor
            kernels: {{cpu: twice_cpu}}
            fake: {{same_as: x}}
        """,
    )
    assert msg.startswith(
        f"{tmp_path / 'ops.yaml'}:5: mismatch::scaled: the cpu kernel 'twice_cpu'"
    )
    assert "takes 2 parameter(s), the schema needs 3 (x, alpha, output 0)" in msg
    assert "void twice_cpu(tvm::ffi::TensorView x, double alpha, tvm::ffi::TensorView out)" in msg


def test_a_schema_type_without_a_kernel_argument(tmp_path, kernels):
    msg = build_error(
        tmp_path,
        f"""\
        namespace: bad_type
        sources: {{cpp: [{kernels}]}}
        ops:
          - schema: twice(Tensor x, ScalarType dtype) -> Tensor
            kernels: {{cpu: twice_cpu}}
        """,
    )
    assert f"{tmp_path / 'ops.yaml'}:4: " in msg
    assert "argument 'dtype' has type ScalarType, which has no kernel argument" in msg


def test_an_aliasing_return_is_refused(tmp_path, kernels):
    msg = build_error(
        tmp_path,
        f"""\
        namespace: alias
        sources: {{cpp: [{kernels}]}}
        ops:
          - schema: twice_(Tensor(a!) x) -> Tensor(a!)
            kernels: {{cpu: twice_cpu}}
        """,
    )
    assert ":4: " in msg and "return '()'" in msg


@pytest.mark.parametrize(
    "formula,expected",
    [
        ("grad * 2 * y", "unknown name 'y'"),
        ("grad.__class__", "attribute '__class__' is private"),
        ("(lambda: 0)()", "Lambda is not allowed"),
        ("tp.load('f')", "tp.load is not available in expressions"),
        ("grad *", "invalid syntax"),
    ],
)
def test_a_bad_formula_names_the_operator_and_line(tmp_path, kernels, formula, expected):
    text = GOOD_OP.format(ns="bad_formula", kernels=kernels, formula=json.dumps(formula))
    msg = build_error(tmp_path, text)
    head = f"{tmp_path / 'ops.yaml'}:8: bad_formula::twice: the derivative for 'x': {expected}"
    assert msg.startswith(head), msg


def test_a_derivative_for_an_argument_that_does_not_exist(tmp_path, kernels):
    text = GOOD_OP.format(ns="bad_input", kernels=kernels, formula="grad * 2") + "      y: grad\n"
    msg = build_error(tmp_path, text)
    assert msg.startswith(
        f"{tmp_path / 'ops.yaml'}:9: bad_input::twice: derivatives: 'y' is not an argument "
        "(arguments: ['x'])"
    )


def test_a_fake_rule_naming_a_scalar(tmp_path, kernels):
    msg = build_error(
        tmp_path,
        f"""\
        namespace: bad_fake
        sources: {{cpp: [{kernels}]}}
        ops:
          - schema: scaled(Tensor x, float alpha) -> Tensor
            kernels: {{cpu: twice_cpu}}
            fake: {{same_as: alpha}}
        """,
    )
    assert msg.startswith(
        f"{tmp_path / 'ops.yaml'}:6: bad_fake::scaled: the shape rule of output 0"
    )
    assert "'alpha', which is not a Tensor argument" in msg


def test_check_catches_a_wrong_derivative(tmp_path, kernels):
    text = GOOD_OP.format(ns="wrong_grad", kernels=kernels, formula="grad * 3")
    msg = build_error(tmp_path, text, check=True)
    assert msg.startswith(
        f"{tmp_path / 'ops.yaml'}:8: wrong_grad::twice: opcheck failed (test_gradcheck of the "
        "derivative for 'x')"
    ), msg


def test_check_passes_a_right_derivative(tmp_path, kernels):
    text = GOOD_OP.format(ns="right_grad", kernels=kernels, formula="grad * 2")
    built = oplib.build(write(tmp_path, text), tmp_path / "out", check=True)
    assert (built / "oplib.json").is_file()


def test_a_library_built_for_another_tensorplay_is_refused(tmp_path, kernels):
    text = GOOD_OP.format(ns="old_build", kernels=kernels, formula="grad * 2")
    built = oplib.build(write(tmp_path, text), tmp_path / "out")
    meta = json.loads((built / "oplib.json").read_text())
    meta["tensorplay_version"] = "0.0.1"
    (built / "oplib.json").write_text(json.dumps(meta))
    with pytest.raises(
        ImportError, match=r"built for TensorPlay 0\.0\.1, but this is TensorPlay .*Rebuild it"
    ):
        oplib.load(built)
    meta["tensorplay_version"] = __import__("tensorplay").__version__
    meta["tvm_ffi_version"] = "9.9.0"
    (built / "oplib.json").write_text(json.dumps(meta))
    with pytest.raises(ImportError, match=r"built with apache-tvm-ffi 9\.9\.0 \(ABI 9\.9\)"):
        oplib.load(built)


def test_a_kernel_that_throws_a_non_exception_raises_naming_the_operator(tmp_path, kernels):
    built = oplib.build(
        write(
            tmp_path,
            f"""\
            namespace: thrower
            sources: {{cpp: [{kernels}]}}
            ops:
              - schema: boom(Tensor x) -> Tensor
                kernels: {{cpu: throws_cpu}}
                fake: {{same_as: x}}
            """,
        ),
        tmp_path / "out",
    )
    import tensorplay as tp

    oplib.load(built)
    with pytest.raises(
        RuntimeError, match=r"thrower::boom \(cpu kernel throws_cpu\): the kernel threw .*int"
    ):
        tp.ops.thrower.boom(tp.ones(3))


def test_a_failed_build_keeps_the_previous_library(tmp_path, kernels):
    out = tmp_path / "out"
    text = GOOD_OP.format(ns="kept", kernels=kernels, formula="grad * 2")
    good = oplib.build(write(tmp_path, text), out)
    before = {p.name: p.read_bytes() for p in good.iterdir()}
    write(tmp_path, text.replace("grad * 2", "grad * 3"))  # fails only after compiling
    with pytest.raises(oplib.OplibError, match="opcheck failed"):
        oplib.build(tmp_path / "ops.yaml", out, check=True)
    assert {p.name: p.read_bytes() for p in good.iterdir()} == before
    assert [p.name for p in out.iterdir()] == [good.name]  # no staging folder left


def test_a_damaged_metadata_file_says_to_rebuild(tmp_path, kernels):
    text = GOOD_OP.format(ns="damaged", kernels=kernels, formula="grad * 2")
    built = oplib.build(write(tmp_path, text), tmp_path / "out")
    meta = json.loads((built / "oplib.json").read_text())
    del meta["ops"][0]["kernels"]
    (built / "oplib.json").write_text(json.dumps(meta))
    with pytest.raises(oplib.OplibError, match=r"is damaged \(KeyError: 'kernels'\); rebuild"):
        oplib.load(built)


def test_a_formula_in_a_built_library_is_held_to_the_whitelist_before_it_compiles(
    tmp_path, kernels
):
    text = GOOD_OP.format(ns="edited_formula", kernels=kernels, formula="grad * 2")
    built = oplib.build(write(tmp_path, text), tmp_path / "out")
    meta = json.loads((built / "oplib.json").read_text())
    meta["ops"][0]["derivatives"]["x"] = "grad.__class__"
    (built / "oplib.json").write_text(json.dumps(meta))
    lib = oplib.load(built)  # loading trusts the builder's file: formulas are read on use
    x = tp.ones(2, requires_grad=True)
    with pytest.raises(oplib.OplibError, match="attribute '__class__' is private"):
        lib.ops["twice"](x)
