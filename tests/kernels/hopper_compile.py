"""Compile every Triton kernel variant the tpk ops launch for the H200 (sm_90), without a
GPU: ``python hopper_compile.py`` prints ``{variant: "ok" | error}`` as JSON.

Run in its own process with ``TRITON_INTERPRET=0``: compiling needs Triton in compiled
mode, and a process that chose the interpreter cannot switch back (its ``tl.sum`` & co.
are interpreter functions).
"""

from __future__ import annotations

import json
import sys


def variants():
    """``name -> (kernel function, pointer dtypes, scalar types, constexprs, options)``."""
    import triton.language as tl

    from tensorplay.kernels import _triton_src as src

    f32, f64 = tl.float32, tl.float64
    out: dict = {}
    for act in ("gelu", "gelu_tanh", "tanh", "silu", "relu"):
        for ty in ("bf16", "fp64"):
            acc = f64 if ty == "fp64" else f32
            half = ty == "bf16"
            out[f"unary-{act}-{ty}"] = (
                src._unary,
                {"x_ptr": ty, "out_ptr": ty},
                {"n": "i32"},
                {"ACT": act, "ACC": acc, "BLOCK": 4096, "HALF": half},
                {"num_warps": 8},
            )
            out[f"bias_act-{act}-{ty}"] = (
                src._bias_act,
                {"x_ptr": ty, "b_ptr": ty, "out_ptr": ty},
                {"n": "i32", "n_cols": "i32"},
                {"ACT": act, "ACC": acc, "BLOCK": 1024, "HALF": half, "WIDE": not half},
                {},
            )
    out["binary_contig-div-bf16"] = (
        src._binary_contig,
        {"a_ptr": "bf16", "b_ptr": "bf16", "out_ptr": "bf16"},
        {"n": "i32"},
        {"OP": "div", "ACC": f32, "BLOCK": 4096},
        {"num_warps": 8},
    )
    names = ("n", "s1", "s2", "s3", "as0", "as1", "as2", "as3", "bs0", "bs1", "bs2", "bs3")
    out["binary-strided-maximum-fp16"] = (
        src._binary,
        {"a_ptr": "fp16", "b_ptr": "fp16", "out_ptr": "fp16"},
        dict.fromkeys(names, "i64"),
        {"OP": "maximum", "ACC": f32, "BLOCK": 2048, "WIDE": True},
        {},
    )
    out["binary-strided-mul-bf16-int32"] = (
        src._binary,
        {"a_ptr": "bf16", "b_ptr": "bf16", "out_ptr": "bf16"},
        dict.fromkeys(names, "i32"),
        {"OP": "mul", "ACC": f32, "BLOCK": 4096, "WIDE": False},
        {"num_warps": 8},
    )
    row_names = ("s1", "s2", "s3", "as0", "as1", "as2", "as3", "bs0", "bs1", "bs2")
    out["binary_rows-mul-bf16"] = (  # bs3 = 1: contiguous along the last dimension
        src._binary_rows,
        {"a_ptr": "bf16", "b_ptr": "bf16", "out_ptr": "bf16"},
        dict.fromkeys(row_names, "i32"),
        {"bs3": 1, "OP": "mul", "ACC": f32, "BLOCK": 1024},
        {"num_warps": 4},
    )
    rows = {"x_ptr": "bf16", "out_ptr": "bf16"}
    for op in ("max", "sum", "mean"):
        out[f"row_reduce-{op}"] = (
            src._row_reduce,
            rows,
            {"n_cols": "i32"},
            {"OP": op, "ACC": f32, "BLOCK": 4096},
            {},
        )
    for single in (True, False):
        tag = "single" if single else "chunked"
        out[f"softmax-{tag}"] = (
            src._softmax,
            rows,
            {"n_cols": "i32"},
            {"SINGLE": single, "ACC": f32, "BLOCK": 4096},
            {"num_warps": 8},
        )
        out[f"softmax_backward-{tag}"] = (
            src._softmax_backward,
            {"g_ptr": "fp32", "y_ptr": "fp32", "out_ptr": "fp32"},
            {"n_cols": "i32"},
            {"SINGLE": single, "ACC": f32, "BLOCK": 4096},
            {"num_warps": 8},
        )
        out[f"layer_norm-{tag}"] = (
            src._layer_norm,
            {"x_ptr": "fp16", "w_ptr": "fp16", "b_ptr": "fp16", "out_ptr": "fp16"},
            {"n_cols": "i32", "eps": "fp32"},
            {"HAS_W": True, "HAS_B": single, "SINGLE": single, "ACC": f32, "BLOCK": 4096},
            {"num_warps": 8},
        )
    out["layer_norm_backward_dx"] = (
        src._layer_norm_backward_dx,
        {"g_ptr": "bf16", "x_ptr": "bf16", "w_ptr": "bf16", "dx_ptr": "bf16"}
        | {"mean_ptr": "fp32", "rstd_ptr": "fp32"},
        {"n_cols": "i32", "eps": "fp32"},
        {"HAS_W": True, "ACC": f32, "BLOCK": 1024},
        {},
    )
    out["layer_norm_backward_dwdb"] = (
        src._layer_norm_backward_dwdb,
        {"g_ptr": "bf16", "x_ptr": "bf16", "mean_ptr": "fp32", "rstd_ptr": "fp32"}
        | {"dw_ptr": "bf16", "db_ptr": "bf16"},
        {"n_rows": "i32", "n_cols": "i32"},
        {"ACC": f32, "BLOCK_M": 32, "BLOCK_N": 32},
        {},
    )
    mm_ints = ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn")
    for ty, precision, acc in [
        ("bf16", "ieee", f32),
        ("fp16", "ieee", f32),
        ("fp32", "tf32", f32),
        ("fp32", "ieee", f32),
        ("fp64", "ieee", f64),
    ]:
        tensor_cores = ty in ("bf16", "fp16") or precision == "tf32"  # else matmul_fma
        cfg = dict((src._MM_CONFIGS if tensor_cores else src._FMA_CONFIGS)[0])
        options = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
        out[f"matmul-{ty}-{precision}"] = (
            src._matmul,
            {"a_ptr": ty, "b_ptr": ty, "c_ptr": ty},
            dict.fromkeys((*mm_ints, "stride_cm", "stride_cn"), "i32"),
            {"PRECISION": precision, "UPCAST": False, "ACC": acc, **cfg},
            options,
        )
    return out


def main() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if triton.knobs.runtime.interpret:
        sys.exit("run with TRITON_INTERPRET=0: the interpreter cannot compile GPU binaries")
    target = GPUTarget("cuda", 90, 32)
    results = {}
    for name, (fn, pointers, scalars, constexprs, options) in variants().items():
        signature = {**{k: f"*{v}" for k, v in pointers.items()}, **scalars}
        signature.update(dict.fromkeys(constexprs, "constexpr"))
        try:
            jit = triton.runtime.jit.JITFunction(fn)
            source = ASTSource(fn=jit, signature=signature, constexprs=constexprs)
            compiled = triton.compile(source, target=target, options=options or None)
            size = len(compiled.asm["cubin"])
            results[name] = "ok" if size > 1000 else f"cubin of only {size} bytes"
        except Exception as e:  # noqa: BLE001 - report every variant
            results[name] = f"{type(e).__name__}: {str(e)[-600:]}"
    print(json.dumps(results))


if __name__ == "__main__":
    main()
