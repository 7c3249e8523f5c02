"""Every Triton kernel variant the tpk ops launch compiles for the H200 (sm_90) here,
without a GPU: Triton's CUDA backend (bundled ptxas) builds the cubin ahead of time.
This catches kernels that only the interpreter accepts before they reach the GPU run."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton", reason="Triton is not installed")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from tensorplay.kernels import _triton_src as src  # noqa: E402

tl = triton.language
F32, F64 = tl.float32, tl.float64
H200 = GPUTarget("cuda", 90, 32)


@pytest.fixture(autouse=True)
def compiled_helpers(monkeypatch):
    # under the interpreter the device helper is interpreted; compile it for the GPU here
    monkeypatch.setattr(src, "activation", JITFunction(src._activation))


def _compile(fn, pointers, scalars, constexprs, **options):
    signature = {**{k: f"*{v}" for k, v in pointers.items()}, **scalars}
    signature.update({k: "constexpr" for k in constexprs})
    source = ASTSource(fn=JITFunction(fn), signature=signature, constexprs=constexprs)
    compiled = triton.compile(source, target=H200, options=options or None)
    assert len(compiled.asm["cubin"]) > 1000  # a real sm_90 binary came out
    return compiled


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "tanh", "silu", "relu"])
@pytest.mark.parametrize("ty", ["bf16", "fp64"])
def test_unary_and_bias_act_compile(act, ty):
    acc = F64 if ty == "fp64" else F32
    _compile(
        src._unary,
        {"x_ptr": ty, "out_ptr": ty},
        {"n": "i32"},
        {"ACT": act, "ACC": acc, "BLOCK": 4096},
        num_warps=8,
    )
    _compile(
        src._bias_act,
        {"x_ptr": ty, "b_ptr": ty, "out_ptr": ty},
        {"n": "i32", "n_cols": "i32"},
        {"ACT": act, "ACC": acc, "BLOCK": 1024},
    )


@pytest.mark.parametrize("contig", [True, False])
def test_binary_compiles(contig):
    ints = {
        k: "i64"
        for k in ("n", "s1", "s2", "s3", "as0", "as1", "as2", "as3", "bs0", "bs1", "bs2", "bs3")
    }
    _compile(
        src._binary,
        {"a_ptr": "fp16", "b_ptr": "fp16", "out_ptr": "fp16"},
        ints,
        {"OP": "maximum", "CONTIG": contig, "ACC": F32, "BLOCK": 2048},
    )


@pytest.mark.parametrize("single", [True, False])
def test_row_kernels_compile(single):
    rows = {"x_ptr": "bf16", "out_ptr": "bf16"}
    block = 4096
    _compile(src._row_reduce, rows, {"n_cols": "i32"}, {"OP": "max", "ACC": F32, "BLOCK": block})
    _compile(
        src._softmax,
        rows,
        {"n_cols": "i32"},
        {"SINGLE": single, "ACC": F32, "BLOCK": block},
        num_warps=8,
    )
    _compile(
        src._softmax_backward,
        {"g_ptr": "fp32", "y_ptr": "fp32", "out_ptr": "fp32"},
        {"n_cols": "i32"},
        {"SINGLE": single, "ACC": F32, "BLOCK": block},
    )
    _compile(
        src._layer_norm,
        {"x_ptr": "fp16", "w_ptr": "fp16", "b_ptr": "fp16", "out_ptr": "fp16"},
        {"n_cols": "i32", "eps": "fp32"},
        {"HAS_W": True, "HAS_B": single, "SINGLE": single, "ACC": F32, "BLOCK": block},
    )


def test_layer_norm_backward_kernels_compile():
    _compile(
        src._layer_norm_backward_dx,
        {
            "g_ptr": "bf16",
            "x_ptr": "bf16",
            "w_ptr": "bf16",
            "dx_ptr": "bf16",
            "mean_ptr": "fp32",
            "rstd_ptr": "fp32",
        },
        {"n_cols": "i32", "eps": "fp32"},
        {"HAS_W": True, "ACC": F32, "BLOCK": 1024},
    )
    _compile(
        src._layer_norm_backward_dwdb,
        {
            "g_ptr": "bf16",
            "x_ptr": "bf16",
            "mean_ptr": "fp32",
            "rstd_ptr": "fp32",
            "dw_ptr": "bf16",
            "db_ptr": "bf16",
        },
        {"n_rows": "i32", "n_cols": "i32"},
        {"ACC": F32, "BLOCK_M": 32, "BLOCK_N": 32},
    )


@pytest.mark.parametrize(
    "ty, precision, acc",
    [
        ("bf16", "ieee", F32),
        ("fp16", "ieee", F32),
        ("fp32", "tf32", F32),
        ("fp32", "ieee", F32),
        ("fp64", "ieee", F64),
    ],
)
def test_matmul_compiles_with_its_largest_autotune_config(ty, precision, acc):
    tensor_cores = ty in ("bf16", "fp16") or precision == "tf32"  # else matmul_fma's configs
    cfg = dict((src._MM_CONFIGS if tensor_cores else src._FMA_CONFIGS)[0])
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    ints = {
        k: "i32"
        for k in (
            "M",
            "N",
            "K",
            "stride_am",
            "stride_ak",
            "stride_bk",
            "stride_bn",
            "stride_cm",
            "stride_cn",
        )
    }
    _compile(
        src._matmul,
        {"a_ptr": ty, "b_ptr": ty, "c_ptr": ty},
        ints,
        {"PRECISION": precision, "UPCAST": False, "ACC": acc, **cfg},
        num_warps=warps,
        num_stages=stages,
    )
