"""P8: a TVM-compiled 8-op pointwise chain vs eager TensorPlay, numpy, torch and inductor.

The chain is ``sigmoid((tanh(exp(x/2)-1)*2)+x)*x`` on 10M float32 (exp, tanh and sigmoid
among 8 ops). All candidates are timed interleaved in one run (tools/bench/_harness.py);
a plain copy of x is the memory floor. Also reported: the first-call compile time of
``tp.compile`` (tracing + TVM lowering + LLVM) with the one-off ``import tvm`` shown
apart, and inductor's first call when torch and a C++ compiler are present.

    python tools/bench/compile_tvm.py [--quick] [--json PATH] [--no-inductor]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402

import tensorplay as tp  # noqa: E402


def chain(x):
    """The P8 chain, written once for TensorPlay and torch (same method names)."""
    return ((((x / 2).exp() - 1).tanh() * 2) + x).sigmoid() * x


def chain_numpy(x: np.ndarray) -> np.ndarray:
    t = np.tanh(np.exp(x / 2) - 1) * 2 + x
    return x / (1 + np.exp(-t))


def main() -> None:
    argv = [a for a in sys.argv[1:] if a != "--no-inductor"]
    use_inductor = "--no-inductor" not in sys.argv
    sys.argv = [sys.argv[0], *argv]
    args = _harness.parse_args(__doc__.splitlines()[0])
    n = 1_000_000 if args.quick else 10_000_000
    number, repeats = (2, 3) if args.quick else (3, 9)

    xn = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x = tp.from_numpy(xn.copy())
    out_copy = np.empty_like(xn)
    candidates = {
        "tensorplay eager": lambda: chain(x),
        "numpy": lambda: chain_numpy(xn),
        "copy (memory floor)": lambda: np.copyto(out_copy, xn),
    }
    notes = {}

    t0 = time.perf_counter()
    status = tp.compiler.tvm_status()  # imports tvm (and torch, which tvm_ffi imports)
    notes["import tvm (s)"] = round(time.perf_counter() - t0, 3)
    if not status:
        print(f"TVM backend unavailable: {status.reason}")
    else:
        compiled = tp.compile(chain, backend="tvm")
        t0 = time.perf_counter()
        y = compiled(x)
        notes["tvm first call (s)"] = round(time.perf_counter() - t0, 3)
        err = float(np.max(np.abs(y.numpy() - chain_numpy(xn.astype(np.float64)))))
        notes["tvm max abs error vs float64"] = err
        notes["tvm report"] = str(compiled.report()).splitlines()[0]
        candidates["tp.compile (tvm)"] = lambda: compiled(x)

    try:
        import torch  # noqa: PLC0415 - optional reference
    except ImportError:
        torch = None
    if torch is not None:
        xt = torch.from_numpy(xn.copy())
        candidates["torch eager"] = lambda: chain(xt)
        if use_inductor:
            try:
                inductor = torch.compile(chain)
                t0 = time.perf_counter()
                inductor(xt)
                notes["inductor first call (s)"] = round(time.perf_counter() - t0, 1)
                candidates["torch.compile (inductor)"] = lambda: inductor(xt)
            except Exception as e:  # noqa: BLE001 - inductor needs a working C++ toolchain
                notes["inductor"] = f"unavailable: {type(e).__name__}: {e}"[:200]

    us = _harness.compare(candidates, number, repeats)
    base = us["tensorplay eager"]
    rows = [
        (name, f"{t / 1000:.2f}", f"{base / t:.2f}x")
        for name, t in sorted(us.items(), key=lambda kv: kv[1])
    ]
    print(_harness.table(f"P8 chain on {n:,} float32 (median ms, speedup vs TensorPlay eager)",
                         rows, ("candidate", "ms", "vs tp eager")))  # fmt: skip
    ratios = {}
    if "tp.compile (tvm)" in us:
        tvm_us = us["tp.compile (tvm)"]
        ratios["tvm vs tensorplay eager (>= 3)"] = round(base / tvm_us, 2)
        ratios["tvm vs numpy"] = round(us["numpy"] / tvm_us, 2)
        if "torch.compile (inductor)" in us:
            ratios["tvm vs inductor (>= 1.0)"] = round(us["torch.compile (inductor)"] / tvm_us, 2)
        ratios["copy / tvm (fraction of memory floor)"] = round(
            us["copy (memory floor)"] / tvm_us, 2
        )
    for k, v in {**ratios, **notes}.items():
        print(f"{k}: {v}")
    _harness.write_json(args.json, {"n": n, "us": us, "ratios": ratios, "notes": notes})


if __name__ == "__main__":
    main()
