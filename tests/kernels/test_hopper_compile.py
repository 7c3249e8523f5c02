"""Every Triton kernel variant the tpk ops launch compiles for the H200 (sm_90) here,
without a GPU: Triton's CUDA backend (bundled ptxas) builds the cubins ahead of time, in a
separate process in compiled mode (see hopper_compile.py). This catches kernels that only
the interpreter accepts before they reach the GPU run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="Triton is not installed")

HERE = Path(__file__).resolve().parent
NAMES = [
    *(
        f"unary-{a}-{t}"
        for a in ("gelu", "gelu_tanh", "tanh", "silu", "relu")
        for t in ("bf16", "fp64")
    ),
    *(f"bias_act-{a}-{t}" for a in ("gelu", "silu") for t in ("bf16", "fp64")),
    "binary_contig-div-bf16",
    "binary-strided-maximum-fp16",
    "binary-strided-mul-bf16-int32",
    "binary_rows-mul-bf16",
    "row_reduce-max",
    "row_reduce-sum",
    "softmax-single",
    "softmax-chunked",
    "softmax_backward-single",
    "softmax_backward-chunked",
    "layer_norm-single",
    "layer_norm-chunked",
    "layer_norm_backward_dx",
    "layer_norm_backward_dwdb",
    *(f"matmul-{v}" for v in ("bf16-ieee", "fp16-ieee", "fp32-tf32", "fp32-ieee", "fp64-ieee")),
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    # a fresh Triton cache: every variant is really compiled, none is a cached success
    cache = str(tmp_path_factory.mktemp("triton_cache"))
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": cache}
    proc = subprocess.run(
        [sys.executable, str(HERE / "hopper_compile.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", NAMES)
def test_kernel_variant_compiles_for_sm90(compiled, name):
    assert compiled[name] == "ok", compiled[name]


def test_every_variant_is_checked(compiled):
    assert set(NAMES) <= set(compiled) and all(v == "ok" for v in compiled.values()), {
        k: v for k, v in compiled.items() if v != "ok"
    }
