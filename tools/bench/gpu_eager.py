"""CUDA eager speed (issue 16), TensorPlay vs torch vs CuPy side by side in one run.

    python tools/bench/gpu_eager.py [--quick] [--json out.json]

* host µs per call: ``batch`` calls back to back without a sync between them, then one
  sync, divided by ``batch`` (for small tensors this is the host cost of one call: what
  a model made of many small ops pays); median of repeats, candidates interleaved;
* the MLP training step of the issue (784 -> 1024 -> 1024 -> 10, batch 256, float32:
  matmul, relu, log_softmax, gather, mean, backward, SGD update written by hand), and
  the same forward under no_grad, in ms per step;
* a transformer block step (layer norm, 4-head attention, residuals, GELU MLP; batch 8 x
  128 tokens, width 256) the same way;
* each step captured into a CUDA graph and replayed (tp.cuda.graph), against torch eager
  (target <= 0.3x) and torch's own graph replay;
* device bandwidth on 64M float32 (CUDA events), TB/s: ``x * 2.0``, ``x + y``, a bias
  add, ``exp``, ``relu`` and ``sum``, against copy bandwidth.

Targets (issue 16): per-op host cost <= 1.0x torch; the MLP step <= 1.0x torch; pointwise
bandwidth >= 90% of copy bandwidth, reductions >= 80%. A candidate whose library is absent
is left out; without CUDA the script says so and exits 0.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import parse_args, table, write_json  # noqa: E402

import tensorplay as tp  # noqa: E402

try:
    import torch
except ImportError:  # a comparison point; its columns are left out without it
    torch = None

try:
    import cupy as cp
except ImportError:
    cp = None

ARGS = parse_args(__doc__.splitlines()[0])
QUICK = ARGS.quick


def _sync_all() -> None:
    tp.cuda.synchronize()
    if torch is not None:
        torch.cuda.synchronize()


def host_us(fn: Callable[[], object], batch: int) -> float:
    """µs per call of ``batch`` back-to-back calls followed by one device sync."""
    t0 = time.perf_counter()
    for _ in range(batch):
        fn()
    _sync_all()
    return (time.perf_counter() - t0) / batch * 1e6


def compare(cands: dict, batch: int, repeats: int) -> dict:
    """Median host µs per call of each candidate, interleaved (A, B, C, A, B, C...)."""
    for fn in cands.values():  # warm-up: kernel compilation, allocator pools
        host_us(fn, max(batch // 5, 3))
    samples: dict = {k: [] for k in cands}
    for _ in range(repeats):
        for k, fn in cands.items():
            samples[k].append(host_us(fn, batch))
    return {k: statistics.median(v) for k, v in samples.items()}


# ---- per-op host cost ---------------------------------------------------------------------


def _op_cases(n: int) -> dict:
    """case -> {library: zero-argument callable}, for 1-D float32 inputs of n elements."""
    rng = __import__("numpy").random.default_rng(0)
    host = rng.standard_normal(n).astype("float32")
    idx_host = rng.integers(0, n, n)
    lib: dict = {}
    rows = (-1, min(n, 16))  # log_softmax and sum(0) over rows of 16 (a classifier's logits)
    a, b = tp.tensor(host, device="cuda"), tp.tensor(host[::-1].copy(), device="cuda")
    i = tp.tensor(idx_host, device="cuda")
    upd = tp.tensor(host, device="cuda")
    lib["tp"] = {
        "log_softmax": lambda: a.reshape(rows).log_softmax(1),
        "sum(0)": lambda: a.reshape(rows).sum(0),
        "sub_ in place": lambda: upd.sub_(b),
        "add": lambda: a + b,
        "mul scalar": lambda: a * 2.0,
        "relu": lambda: tp.relu(a),
        "exp": lambda: tp.exp(a),
        "sum": lambda: a.sum(),
        "view (reshape)": lambda: a.reshape(-1, 1),
        "index_select": lambda: a.index_select(0, i),
        "gather": lambda: a.gather(0, i),
        "scatter add": lambda: a.scatter(0, i, b, reduce="add"),
        "zeros": lambda: tp.zeros(n, device="cuda"),
    }
    if torch is not None:
        ta, tb = torch.tensor(host, device="cuda"), torch.tensor(host[::-1].copy(), device="cuda")
        ti = torch.tensor(idx_host, device="cuda")
        tupd = torch.tensor(host, device="cuda")
        lib["torch"] = {
            "log_softmax": lambda: ta.reshape(rows).log_softmax(1),
            "sum(0)": lambda: ta.reshape(rows).sum(0),
            "sub_ in place": lambda: tupd.sub_(tb),
            "add": lambda: ta + tb,
            "mul scalar": lambda: ta * 2.0,
            "relu": lambda: torch.relu(ta),
            "exp": lambda: torch.exp(ta),
            "sum": lambda: ta.sum(),
            "view (reshape)": lambda: ta.reshape(-1, 1),
            "index_select": lambda: ta.index_select(0, ti),
            "gather": lambda: ta.gather(0, ti),
            "scatter add": lambda: ta.scatter(0, ti, tb, reduce="add"),
            "zeros": lambda: torch.zeros(n, device="cuda"),
        }
    if cp is not None:
        ca, cb, ci = cp.asarray(host), cp.asarray(host[::-1].copy()), cp.asarray(idx_host)
        cupd = cp.asarray(host)

        def c_log_softmax():
            x = ca.reshape(rows)
            shifted = x - x.max(axis=1, keepdims=True)
            return shifted - cp.log(cp.exp(shifted).sum(axis=1, keepdims=True))

        lib["cupy"] = {
            "log_softmax": c_log_softmax,
            "sum(0)": lambda: ca.reshape(rows).sum(0),
            "sub_ in place": lambda: cp.subtract(cupd, cb, out=cupd),
            "add": lambda: ca + cb,
            "mul scalar": lambda: ca * 2.0,
            "relu": lambda: cp.maximum(ca, 0),
            "exp": lambda: cp.exp(ca),
            "sum": lambda: ca.sum(),
            "view (reshape)": lambda: ca.reshape(-1, 1),
            "index_select": lambda: ca.take(ci),
            "gather": lambda: cp.take_along_axis(ca, ci, 0),
            "zeros": lambda: cp.zeros(n, dtype=cp.float32),
        }
    return lib


def _matmul_case() -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((256, 784), "float32"), rng.standard_normal((784, 1024), "float32")
    out = {}
    tx, tw = tp.tensor(x, device="cuda"), tp.tensor(w, device="cuda")
    out["tp"] = lambda: tx @ tw
    if torch is not None:
        ux, uw = torch.tensor(x, device="cuda"), torch.tensor(w, device="cuda")
        out["torch"] = lambda: ux @ uw
    if cp is not None:
        cx, cw = cp.asarray(x), cp.asarray(w)
        out["cupy"] = lambda: cx @ cw
    return out


def per_op(results: dict) -> None:
    batch, repeats = (50, 5) if QUICK else (200, 15)
    libs = ("tp", "torch", "cupy")
    rows = []
    for n in (1, 1024, 1 << 20) if not QUICK else (1024,):
        lib = _op_cases(n)
        for case in lib["tp"]:
            cands = {name: lib[name][case] for name in libs if name in lib and case in lib[name]}
            res = compare(cands, batch, repeats)
            rows.append(_op_row(f"{case}, {n}", res))
            results[f"{case}, {n}"] = res
    res = compare(_matmul_case(), batch // 4, repeats)
    rows.append(_op_row("matmul 256x784 @ 784x1024", res))
    results["matmul"] = res
    print(
        table(
            "host µs per call (back to back, one sync), float32 on CUDA",
            rows,
            ("case", "tp", "torch", "cupy", "tp / torch", "target <= 1.0x"),
        )
    )


def _op_row(case: str, res: dict) -> tuple:
    t, ref = res.get("tp"), res.get("torch")
    ratio = t / ref if ref else None
    return (
        case,
        f"{t:.1f}",
        f"{ref:.1f}" if ref else "-",
        f"{res['cupy']:.1f}" if "cupy" in res else "-",
        f"{ratio:.2f}x" if ratio else "-",
        ("ok" if ratio <= 1.0 else "MISS") if ratio else "-",
    )


# ---- the MLP training step of the issue ----------------------------------------------------


def _mlp(lib, rng):
    """(step, forward_no_grad) for library ``lib`` ("tp" or "torch"), same weights."""
    sizes = (784, 1024, 1024, 10)
    ws = [rng.standard_normal((m, n), "float32") * (2 / m) ** 0.5 for m, n in zip(sizes, sizes[1:])]
    x = rng.standard_normal((256, 784), "float32")
    y = rng.integers(0, 10, (256, 1))
    mod = tp if lib == "tp" else torch
    tensor = (
        (lambda a: tp.tensor(a, device="cuda"))
        if lib == "tp"
        else (lambda a: torch.tensor(a, device="cuda"))
    )
    params = []
    for w in ws:
        params += [tensor(w).requires_grad_(), tensor(w[0] * 0).requires_grad_()]
    xt, yt = tensor(x), tensor(y)

    def forward():
        h = xt
        for k in range(0, len(params), 2):
            h = h @ params[k] + params[k + 1]
            if k + 2 < len(params):
                h = mod.relu(h)
        return -h.log_softmax(dim=1).gather(1, yt).mean()

    def step():
        loss = forward()
        loss.backward()
        with mod.no_grad():
            for p in params:
                p -= 0.01 * p.grad
                p.grad = None

    def forward_no_grad():
        with mod.no_grad():
            forward()

    return step, forward_no_grad


def _graphed(mod, step):
    """``step`` captured into a CUDA graph (after a warm-up on a side stream): its replay."""
    side = mod.cuda.Stream()
    side.wait_stream(mod.cuda.current_stream())
    with mod.cuda.stream(side):
        for _ in range(3):
            step()
    mod.cuda.current_stream().wait_stream(side)
    g = mod.cuda.CUDAGraph()
    with mod.cuda.graph(g):
        step()
    return g.replay


def _block(lib, rng):
    """(step, forward_no_grad) of a transformer block written with tensor ops: layer norm,
    4-head self-attention, residuals, a GELU MLP; batch 8, sequence 128, width 256."""
    b, s, d, h, f = 8, 128, 256, 4, 1024
    mod = tp if lib == "tp" else torch

    def tensor(a):
        return mod.tensor(a.astype("float32"), device="cuda")

    def weight(m, n):
        return tensor(rng.standard_normal((m, n)) * (1 / m) ** 0.5).requires_grad_()

    params = [weight(d, d) for _ in range(4)] + [weight(d, f), weight(f, d)]
    x = tensor(rng.standard_normal((b, s, d)))

    def norm(t):
        mu = t.mean(dim=-1, keepdim=True)
        return (t - mu) * (t.var(dim=-1, keepdim=True, unbiased=False) + 1e-5).rsqrt()

    def forward():
        wq, wk, wv, wo, w1, w2 = params
        y = norm(x)
        q, k, v = ((y @ w).reshape(b, s, h, d // h).transpose(1, 2) for w in (wq, wk, wv))
        att = ((q @ k.transpose(-2, -1)) * (d // h) ** -0.5).softmax(dim=-1)
        z = x + (att @ v).transpose(1, 2).reshape(b, s, d) @ wo
        z = z + mod.nn.functional.gelu(norm(z) @ w1) @ w2
        return (z * z).mean()

    def step():
        forward().backward()
        with mod.no_grad():
            for p in params:
                p -= 0.01 * p.grad
                p.grad = None

    def forward_no_grad():
        with mod.no_grad():
            forward()

    return step, forward_no_grad


def _model_rows(name: str, build, results: dict) -> None:
    import numpy as np

    cands_step, cands_fwd, cands_graph = {}, {}, {}
    for lib in ("tp", "torch") if torch is not None else ("tp",):
        mod = tp if lib == "tp" else torch
        step, fwd = build(lib, np.random.default_rng(0))[:2]
        cands_step[lib], cands_fwd[lib] = step, fwd
        if hasattr(mod.cuda, "CUDAGraph"):
            cands_graph[lib + " graph"] = _graphed(mod, step)
    batch, repeats = (5, 3) if QUICK else (20, 9)
    step = compare({**cands_step, **cands_graph}, batch, repeats)
    fwd = compare(cands_fwd, batch, repeats)
    results[f"{name} step"], results[f"{name} forward"] = step, fwd
    rows = []
    cases = (
        ("training step", step["tp"], step, 1.0),
        ("forward, no_grad", fwd["tp"], fwd, 1.0),
        ("step, CUDA graph replay", step.get("tp graph"), step, 0.3),
    )
    for label, ours, res, target in cases:
        if ours is None:
            continue
        ref = res.get("torch")
        rows.append(
            (
                label,
                f"{ours / 1e3:.3f}",
                f"{ref / 1e3:.3f}" if ref else "-",
                f"{ours / ref:.2f}x" if ref else "-",
                f"<= {target}x " + (("ok" if ours <= target * ref else "MISS") if ref else "-"),
            )
        )
    own = f"; torch's own graph replay: {step['torch graph'] / 1e3:.3f} ms" if torch else ""
    print()
    print(
        table(
            f"{name} (ms per step, vs torch eager{own})",
            rows,
            ("case", "tp", "torch eager", "tp / torch", "target"),
        )
    )


def mlp(results: dict) -> None:
    _model_rows("MLP 784-1024-1024-10, batch 256, float32", _mlp, results)
    _model_rows("transformer block, batch 8 x 128 tokens, width 256, float32", _block, results)


# ---- bandwidth -----------------------------------------------------------------------------


def _device_ms(fn: Callable[[], object], reps: int) -> float:
    import cupy

    for _ in range(3):
        fn()
    tp.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return statistics.median(times)


def _bandwidth_cases(n: int) -> dict:
    """case -> (bytes moved per call, {library: callable}) on n float32 elements."""
    cases: dict = {}
    libs = {"tp": tp}
    if torch is not None:
        libs["torch"] = torch
    if cp is not None:
        libs["cupy"] = cp
    width = 1024  # the bias case: (n / width, width) + (width,)
    for lib_name, lib in libs.items():
        if lib_name == "cupy":
            x = cp.random.standard_normal(n, dtype=cp.float32)
            y, bias = cp.random.standard_normal(n, dtype=cp.float32), x[:width].copy()
        elif lib_name == "torch":
            x, y, bias = (torch.randn(k, device="cuda") for k in (n, n, width))
        else:
            x, y, bias = (tp.randn(k, device="cuda") for k in (n, n, width))
        x2 = x.reshape(n // width, width)
        exp = lib.exp
        relu = (lambda v: cp.maximum(v, 0)) if lib_name == "cupy" else lib.relu
        total = lib.sum
        bind = [
            ("x * 2.0", 8 * n, lambda x=x: x * 2.0),
            ("x + y", 12 * n, lambda x=x, y=y: x + y),
            ("x + bias (rows of 1024)", 8 * n, lambda x2=x2, b=bias: x2 + b),
            ("exp(x)", 8 * n, lambda x=x, f=exp: f(x)),
            ("relu(x)", 8 * n, lambda x=x, f=relu: f(x)),
            ("sum(x)", 4 * n, lambda x=x, f=total: f(x)),
        ]
        for case, nbytes, fn in bind:
            cases.setdefault(case, (nbytes, {}))[1][lib_name] = fn
    return cases


def bandwidth(results: dict) -> None:
    """Device TB/s of pointwise, broadcast and reduction ops on 64M float32, as a fraction of
    copy bandwidth (cudaMemcpy through cupy.copyto). Targets: pointwise >= 0.9, sum >= 0.8."""
    if cp is None:
        return
    n = (1 << 24) if QUICK else (1 << 26)
    reps = 5 if QUICK else 20
    src = cp.random.standard_normal(n, dtype=cp.float32)
    dst = cp.empty_like(src)
    copy_tbs = 8 * n / (_device_ms(lambda: cp.copyto(dst, src), reps) * 1e-3) / 1e12
    rows = [("copy (cupy.copyto)", f"{copy_tbs:.2f}", "-", "-", "1.00", "-")]
    results["bandwidth copy"] = copy_tbs
    for case, (nbytes, cands) in _bandwidth_cases(n).items():
        tbs = {k: nbytes / (_device_ms(fn, reps) * 1e-3) / 1e12 for k, fn in cands.items()}
        goal = 0.8 if case.startswith("sum") else 0.9
        share = tbs["tp"] / copy_tbs
        rows.append(
            (
                case,
                f"{tbs['tp']:.2f}",
                f"{tbs['torch']:.2f}" if "torch" in tbs else "-",
                f"{tbs['cupy']:.2f}" if "cupy" in tbs else "-",
                f"{share:.2f}",
                f">= {goal} {'ok' if share >= goal else 'MISS'}",
            )
        )
        results[f"bandwidth {case}"] = tbs
    print()
    print(
        table(
            f"device bandwidth on {n >> 20}M float32 (TB/s, CUDA events)",
            rows,
            ("case", "tp", "torch", "cupy", "tp of copy", "goal"),
        )
    )


def main() -> None:
    if not tp.cuda.is_available():
        print(f"CUDA is not available here ({tp.cuda.unavailable_reason()}): nothing to measure")
        return
    results: dict = {}
    per_op(results)
    mlp(results)
    bandwidth(results)
    write_json(ARGS.json, results)


if __name__ == "__main__":
    main()
