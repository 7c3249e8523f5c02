"""tensorplay-kernels on the GPU (issue 8, P9): bandwidth and FLOP rates of the tpk kernels
against the measured device-to-device copy bandwidth and torch/cuBLAS, side by side.

    python tools/bench/kernels_gpu.py [--quick] [--json out.json]

Targets (H200): Triton elementwise >= 90% of copy bandwidth; softmax and layer norm
>= 80%; bf16 matmul (Triton) and the TileLang GEMM >= 0.8x torch.matmul; a triton_op
call <= 1.3x a raw Triton launch of the same kernel. Every section runs on its own:
one that fails prints its error and the others still run. GPU times come from CUDA events
on TensorPlay's stream (CuPy's current stream, which torch's default stream shares);
each number is the median of repeated timed runs after warm-up (which also autotunes).
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import parse_args, table, write_json  # noqa: E402

import tensorplay as tp  # noqa: E402
import tensorplay.kernels as tpk  # noqa: E402

try:
    import torch
except ImportError:  # torch is a comparison point; without it its rows are left out
    torch = None

ARGS = parse_args(__doc__.splitlines()[0])
QUICK = ARGS.quick
REPS = 5 if QUICK else 30
RESULTS: dict = {}


def gpu_ms(
    fn: Callable[..., object], *args: object, reps: int = REPS, warmup: int = 3, batch: int = 10
) -> float:
    """Median device milliseconds per call of ``fn(*args)``: CUDA events around ``batch``
    back-to-back calls on the current stream, divided by ``batch``. Back to back, the
    host work of one call overlaps the previous call's kernel, so this is the device
    throughput of large kernels (the kernel-bandwidth targets); what a single call costs
    on the host is the launch-overhead section's business."""
    import cupy as cp

    for _ in range(warmup):
        fn(*args)
    cp.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(batch):
            fn(*args)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / batch)
    return statistics.median(times)


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def section(name: str):
    """Run a benchmark section; on failure print the error and carry on."""

    def run(fn: Callable[[], list[tuple]]) -> None:
        only = os.environ.get("TP_BENCH_ONLY")  # e.g. "TileLang": run matching sections only
        if only and only not in name and name != "environment":
            return
        print(f"\n... {name}", flush=True)
        try:
            rows = fn()
        except Exception as e:  # noqa: BLE001 - one section failing must not lose the rest
            traceback.print_exc(limit=4)
            RESULTS[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"## {name}: FAILED ({type(e).__name__}: {e})")
            return
        RESULTS[name] = [dict(zip(HEADERS, r)) for r in rows]
        print(table(name, rows, HEADERS))

    return run


HEADERS = ("case", "ms", "rate", "vs reference", "target", "met")
COPY_GBPS: list[float] = []


def _copy_gbps() -> float:
    if not COPY_GBPS:  # its section was filtered out (TP_BENCH_ONLY): measure it now
        _measure_copy()
    return COPY_GBPS[0]


def _row(case: str, ms: float, rate: float, unit: str, ratio: float, target: float | None, up=True):
    met = (
        "-" if target is None else ("yes" if (ratio >= target if up else ratio <= target) else "NO")
    )
    tgt = "-" if target is None else (f">= {target:.2f}" if up else f"<= {target:.2f}")
    return (case, f"{ms:.4f}", f"{rate:.1f} {unit}", f"{ratio:.3f}", tgt, met)


def randn(*shape: int, dtype=tp.float32):
    return tp.randn(*shape, device="cuda").to(dtype)


N_ELEM = (1 << 24) if QUICK else (1 << 26)  # 64M elements: far beyond the 50 MB L2


@section("environment")
def _env():
    import cupy as cp
    import triton

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    rows = [
        ("device", "-", props["name"].decode(), "-", "-", "-"),
        ("tensorplay", "-", tp.__version__, "-", "-", "-"),
        ("triton", "-", triton.__version__, "-", "-", "-"),
        ("cupy", "-", cp.__version__, "-", "-", "-"),
        ("torch", "-", getattr(torch, "__version__", "absent"), "-", "-", "-"),
        ("tilelang", "-", tpk.tilelang_unavailable_reason() or "available", "-", "-", "-"),
    ]
    return rows


def _measure_copy():
    import cupy as cp

    src = cp.random.standard_normal(N_ELEM, dtype=cp.float32)
    dst = cp.empty_like(src)
    ms = gpu_ms(cp.copyto, dst, src)
    rate = gbps(2 * src.nbytes, ms)
    COPY_GBPS.append(rate)
    rows = [_row("cupy copyto fp32", ms, rate, "GB/s", 1.0, None)]
    if torch is not None:
        ts, td = torch.randn(N_ELEM, device="cuda"), torch.empty(N_ELEM, device="cuda")
        tms = gpu_ms(td.copy_, ts)
        rows.append(_row("torch copy_ fp32", tms, gbps(2 * ts.nbytes, tms), "GB/s", ms / tms, None))
    return rows


section("device-to-device copy (the bandwidth ceiling)")(_measure_copy)


@section("Triton elementwise vs copy bandwidth (target >= 0.90)")
def _elementwise():
    copy = _copy_gbps()
    rows = []
    for dtype in (tp.float32, tp.bfloat16):
        a, b = randn(N_ELEM, dtype=dtype), randn(N_ELEM, dtype=dtype)
        size = a.element_size()
        name = str(dtype).split(".")[-1]
        for case, fn, args, nbytes in [
            (f"tpk.add {name}", tp.ops.tpk.add, (a, b), 3 * N_ELEM * size),
            (f"tpk.gelu {name}", tp.ops.tpk.gelu, (a,), 2 * N_ELEM * size),
            (
                f"tpk.mul broadcast {name}",
                tp.ops.tpk.mul,
                (a.view(-1, 1024), b[:1024]),
                2 * N_ELEM * size,
            ),
        ]:
            ms = gpu_ms(fn, *args)
            rate = gbps(nbytes, ms)
            rows.append(_row(case, ms, rate, "GB/s", rate / copy, 0.90))
            if torch is not None and "add" not in case:  # reference: the same op in torch
                targs = [torch.from_dlpack(t.contiguous() if t.dim() else t) for t in args]
                tfn = torch.nn.functional.gelu if "gelu" in case else torch.mul
                tms = gpu_ms(tfn, *targs)
                trate = gbps(nbytes, tms)
                rows.append(
                    _row(case.replace("tpk.", "torch "), tms, trate, "GB/s", trate / copy, None)
                )
    # the core op routed through enable() vs its CuPy kernel
    a, b = randn(N_ELEM), randn(N_ELEM)
    tpk.disable()
    ms_cupy = gpu_ms(tp.add, a, b)
    tpk.enable()
    try:
        ms_routed = gpu_ms(tp.add, a, b)
    finally:
        tpk.disable()
    nbytes = 3 * N_ELEM * 4
    rows.append(
        _row(
            "tp.add fp32 (CuPy)",
            ms_cupy,
            gbps(nbytes, ms_cupy),
            "GB/s",
            gbps(nbytes, ms_cupy) / copy,
            None,
        )
    )
    rows.append(
        _row(
            "tp.add fp32 (enable())",
            ms_routed,
            gbps(nbytes, ms_routed),
            "GB/s",
            gbps(nbytes, ms_routed) / copy,
            0.90,
        )
    )
    return rows


def _rows_case(op_name: str, call: tuple, x, reference: tuple | None) -> list[tuple]:
    """Rows for a row-wise op reading and writing ``x``-sized tensors once: ``call`` and
    ``reference`` are ``(fn, *args)``."""
    copy = _copy_gbps()
    nbytes = 2 * x.numel() * x.element_size()
    ms = gpu_ms(*call)
    rate = gbps(nbytes, ms)
    rows = [_row(op_name, ms, rate, "GB/s", rate / copy, 0.80)]
    if reference is not None:
        rms = gpu_ms(*reference)
        ref_rate = gbps(nbytes, rms)
        rows.append(
            _row(op_name.replace("tpk.", "torch."), rms, ref_rate, "GB/s", ref_rate / copy, None)
        )
    return rows


@section("softmax and layer norm vs copy bandwidth (target >= 0.80)")
def _rows():
    rows = []
    shapes = [(4096, 4096)] if QUICK else [(16384, 4096), (4096, 16384), (65536, 1024)]
    for m, n in shapes:
        for dtype in (tp.bfloat16, tp.float32):
            name = f"{str(dtype).split('.')[-1]} {m}x{n}"
            x = randn(m, n, dtype=dtype)
            w, bias = randn(n, dtype=dtype), randn(n, dtype=dtype)
            tx = torch.from_dlpack(x) if torch is not None else None
            tw = torch.from_dlpack(w) if torch is not None else None
            tb = torch.from_dlpack(bias) if torch is not None else None
            rows += _rows_case(
                f"tpk.softmax {name}",
                (tp.ops.tpk.softmax, x),
                x,
                (torch.softmax, tx, -1) if torch is not None else None,
            )
            rows += _rows_case(
                f"tpk.layer_norm {name}",
                (tp.ops.tpk.layer_norm, x, w, bias),
                x,
                (torch.nn.functional.layer_norm, tx, (n,), tw, tb) if torch is not None else None,
            )
    return rows


def _matmul_rows(label: str, fn: Callable[..., object], m: int, n: int, k: int, a, b):
    if torch is None:
        raise RuntimeError("torch is needed for the cuBLAS reference")
    ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
    flops = 2 * m * n * k
    ms = gpu_ms(fn, a, b)
    ref = gpu_ms(torch.matmul, ta, tb)
    tflops, ref_tflops = flops / ms / 1e9, flops / ref / 1e9
    return [
        _row(f"{label} {m}x{n}x{k}", ms, tflops, "TFLOP/s", ref / ms, 0.80),
        _row(f"torch.matmul {m}x{n}x{k}", ref, ref_tflops, "TFLOP/s", 1.0, None),
    ]


MM_SHAPES = (
    [(4096, 4096, 4096)] if QUICK else [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 2048, 8192)]
)


def _bf16_matmuls(label: str, fn: Callable[..., object]) -> list[tuple]:
    rows = []
    for m, n, k in MM_SHAPES:
        a, b = randn(m, k, dtype=tp.bfloat16), randn(k, n, dtype=tp.bfloat16)
        rows += _matmul_rows(label, fn, m, n, k, a, b)
    return rows


def _require_tilelang() -> None:
    why = tpk.tilelang_unavailable_reason()
    if why is not None:
        raise RuntimeError(why)


@section("bf16 matmul: Triton tpk.matmul vs torch.matmul/cuBLAS (target >= 0.80x)")
def _matmul():
    return _bf16_matmuls("tpk.matmul bf16", tp.ops.tpk.matmul)


@section("bf16 GEMM: TileLang tpk.gemm vs torch.matmul/cuBLAS (target >= 0.80x)")
def _gemm():
    _require_tilelang()
    return _bf16_matmuls("tpk.gemm bf16", tp.ops.tpk.gemm)


@section("TileLang attention vs torch scaled_dot_product_attention (reference only)")
def _attention():
    _require_tilelang()
    if torch is None:
        raise RuntimeError("torch is needed for the reference")
    rows = []
    for causal in (False, True):
        b, h, s, d = (4, 16, 4096, 128) if not QUICK else (1, 8, 1024, 64)
        q, k, v = (randn(b, h, s, d, dtype=tp.float16) for _ in range(3))
        tq, tk, tv = (torch.from_dlpack(t) for t in (q, k, v))
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
        ms = gpu_ms(tp.ops.tpk.attention, q, k, v, causal)
        sdpa = functools.partial(torch.nn.functional.scaled_dot_product_attention, is_causal=causal)
        ref = gpu_ms(sdpa, tq, tk, tv)
        rows.append(
            _row(f"tpk.attention causal={causal}", ms, flops / ms / 1e9, "TFLOP/s", ref / ms, None)
        )
        rows.append(
            _row(f"torch sdpa causal={causal}", ref, flops / ref / 1e9, "TFLOP/s", 1.0, None)
        )
    return rows


@section("launch overhead: triton_op call vs raw Triton launch (target <= 1.30x)")
def _launch():
    import cupy as cp

    from tensorplay.kernels import _common

    src = _common.triton_src()
    a, b = randn(1024), randn(1024)
    out = tp.empty(1024, device="cuda")
    # the Triton kernel tp.ops.tpk.add launches for same-shape operands
    raw = src.binary_contig.kernel.jit_function
    acc = src.ACC_TYPES[tp.float32]

    grid, meta = src.elementwise_launch(1024)

    def raw_launch():
        raw[grid](a, b, out, 1024, OP="add", ACC=acc, **meta)

    def raw_launch_with_alloc():
        raw[grid](a, b, tp.empty(1024, device="cuda"), 1024, OP="add", ACC=acc, **meta)

    def op_call():
        tp.ops.tpk.add(a, b)

    op_call()  # first: installs TensorPlay's Triton driver (current stream from CuPy)
    n = 500 if QUICK else 5000
    samples: dict[str, list[float]] = {"raw": [], "raw+alloc": [], "op": []}
    fns = {"raw": raw_launch, "raw+alloc": raw_launch_with_alloc, "op": op_call}
    for fn in fns.values():
        for _ in range(50):
            fn()
    cp.cuda.get_current_stream().synchronize()
    for _ in range(7 if QUICK else 21):  # interleaved, host time per call
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n * 1e6)
            cp.cuda.get_current_stream().synchronize()
    us = {k: statistics.median(v) for k, v in samples.items()}
    return [
        ("raw Triton launch", f"{us['raw'] / 1e3:.4f}", f"{us['raw']:.2f} us", "1.000", "-", "-"),
        (
            "raw launch + tp.empty",
            f"{us['raw+alloc'] / 1e3:.4f}",
            f"{us['raw+alloc']:.2f} us",
            f"{us['raw+alloc'] / us['raw']:.3f}",
            "-",
            "-",
        ),
        (
            "tp.ops.tpk.add (triton_op)",
            f"{us['op'] / 1e3:.4f}",
            f"{us['op']:.2f} us",
            f"{us['op'] / us['raw']:.3f}",
            "<= 1.30",
            "yes" if us["op"] / us["raw"] <= 1.3 else "NO",
        ),
    ]


if __name__ == "__main__":
    write_json(ARGS.json, RESULTS)
    failed = [k for k, v in RESULTS.items() if isinstance(v, dict)]
    print(f"\n{len(RESULTS) - len(failed)} sections ran, {len(failed)} failed: {failed}")
