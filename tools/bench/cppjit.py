"""cpp_jit speed (issue 7): call overhead of a trivial kernel with 2 tensors (P6, <= 0.3 µs)
against raw tvm-ffi tensors, numpy arrays and torch tensors; cold build and cached load
in a new process (P7, <= 2 s / <= 50 ms) against tvm-ffi's own load_inline.

    python tools/bench/cppjit.py [--quick] [--json out.json]

P6 depends on how TensorPlay tensors cross: with ``tensorplay._C``'s native
``__dlpack_c_exchange_api__`` tvm-ffi converts them in C; without it cpp_jit's ``Kernel``
wrapper hands tvm-ffi the numpy arrays holding the memory, and tvm-ffi's own fallback
(``__dlpack__``, pure Python here) is shown for reference.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

from _harness import compare, parse_args, table, write_json

import tensorplay as tp
from tensorplay.utils import cpp_jit
from tensorplay.utils.cpp_jit._module import native_exchange

try:
    import torch
except ImportError:  # torch is a comparison point; without it its rows are left out
    torch = None

TRIVIAL = "void trivial(tvm::ffi::TensorView a, tvm::ffi::TensorView b) {}"

# Run in a fresh interpreter: times the imports and one load_inline (cold or cached).
CHILD = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import tensorplay
    from tensorplay.utils import cpp_jit
    import tvm_ffi, tvm_ffi.cpp
    t1 = time.perf_counter()
    src = sys.argv[2]
    if sys.argv[1] == "tensorplay":
        cpp_jit.load_inline("bench_build", cpp_sources=src, functions=["trivial"])
    else:
        tvm_ffi.cpp.load_inline("bench_build", cpp_sources=src, functions=["trivial"])
    t2 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1}))
    """
)


# P6 without tensorplay._C (TENSORPLAY_PURE_PYTHON=1, so no exchange table on tp.Tensor):
# cpp_jit's own conversion wrapper, in a fresh interpreter (tvm-ffi caches the converter it
# picks per type).
FALLBACK_CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np, tvm_ffi
    import tensorplay as tp
    from tensorplay.utils import cpp_jit
    from _harness import compare
    assert not hasattr(tp.Tensor, "__dlpack_c_exchange_api__")
    mod = cpp_jit.load_inline("bench_trivial", cpp_sources=sys.argv[2], functions=["trivial"])
    x, y = tp.ones(10), tp.ones(10)
    a, b = np.ones(10, np.float32), np.ones(10, np.float32)
    ta, tb = tvm_ffi.from_dlpack(a), tvm_ffi.from_dlpack(b)
    raw = mod.ffi_module.trivial
    cands = {"floor": lambda: raw(ta, tb), "tp": lambda: mod.trivial(x, y)}
    print(json.dumps(compare(cands, int(sys.argv[3]), int(sys.argv[4]))))
    """
)
BENCH_DIR = Path(__file__).resolve().parent


def fallback_call_overhead(number: int, repeats: int) -> dict:
    args = [str(BENCH_DIR), TRIVIAL, str(number), str(repeats)]
    env = {**os.environ, "TENSORPLAY_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", FALLBACK_CHILD, *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout)


def _child(engine: str, src: str, env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, engine, src],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(out.stdout)


def call_overhead(number: int, repeats: int) -> dict:
    import numpy as np
    import tvm_ffi

    mod = cpp_jit.load_inline("bench_trivial", cpp_sources=TRIVIAL, functions=["trivial"])
    kernel = mod.trivial  # what users call
    raw = mod.ffi_module.trivial  # the engine's function, no TensorPlay code around it
    x, y = tp.ones(10), tp.ones(10)
    a, b = np.ones(10, np.float32), np.ones(10, np.float32)
    ta, tb = tvm_ffi.from_dlpack(a), tvm_ffi.from_dlpack(b)
    cands = {
        "tvm_ffi.Tensor args (engine floor)": lambda: raw(ta, tb),
        "numpy arrays": lambda: raw(a, b),
    }
    if torch is not None:
        pa, pb = torch.ones(10), torch.ones(10)
        cands["torch tensors"] = lambda: raw(pa, pb)
    cands["tp.Tensor, cpp_jit module (what users call)"] = lambda: kernel(x, y)
    res = compare(cands, number, repeats)
    # tvm-ffi's own __dlpack__ fallback is ~100x slower: fewer calls, same interleaving idea
    res.update(
        compare(
            {"tp.Tensor, engine function directly": lambda: raw(x, y)},
            max(number // 50, 20),
            repeats,
        )
    )
    return res


def build_times(repeats: int) -> dict:
    samples: dict = {k: [] for k in ("tp_cold", "tvm_cold", "tp_cached", "tvm_cached", "import")}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TENSORPLAY_CACHE_DIR": tmp, "TVM_FFI_CACHE_DIR": f"{tmp}/tvm"}
        # The first use of a cache also precompiles tvm-ffi's headers and builds
        # TensorPlay's allocator library (once per cache): reported on its own row.
        samples["first_use"] = [_child("tensorplay", TRIVIAL, env)["load_s"]]
        for _ in range(repeats):
            src = TRIVIAL + f"\n// {uuid.uuid4()}\n"  # content never built before: cold
            for engine, key in (("tensorplay", "tp"), ("tvm_ffi", "tvm")):
                samples[f"{key}_cold"].append(_child(engine, src, env)["load_s"])
                cached = _child(engine, src, env)
                samples[f"{key}_cached"].append(cached["load_s"])
                samples["import"].append(cached["import_s"])
    return {k: statistics.median(v) for k, v in samples.items()}


def _status(value: float, goal: float) -> str:
    return "ok" if value <= goal else "MISS"


def main() -> None:
    args = parse_args(__doc__)
    number, repeats, build_repeats = (2000, 3, 1) if args.quick else (20000, 11, 3)
    calls = call_overhead(number, repeats)
    fallback = fallback_call_overhead(number, repeats)
    floor = calls["tvm_ffi.Tensor args (engine floor)"]
    mode = "native table" if native_exchange() else "no native table"
    rows = [(k, f"{v:.3f}", f"{v / floor:.1f}x") for k, v in calls.items()]
    rows.append(
        (
            "tp.Tensor, cpp_jit module, TENSORPLAY_PURE_PYTHON=1 (new process)",
            f"{fallback['tp']:.3f}",
            f"{fallback['tp'] / fallback['floor']:.1f}x",
        )
    )
    rows.append(("  engine floor in that process", f"{fallback['floor']:.3f}", "1.0x"))
    title = f"trivial kernel, 2 tensors of 10 float32 (µs per call; this process: {mode})"
    print(table(title, rows, ("args", "µs", "vs floor")))

    b = build_times(build_repeats)
    rows = [
        ("cold build", f"{b['tp_cold']:.2f} s", f"{b['tvm_cold']:.2f} s",
         f"{b['tp_cold'] / b['tvm_cold']:.2f}x"),
        ("cached load_inline in a new process", f"{b['tp_cached'] * 1e3:.1f} ms",
         f"{b['tvm_cached'] * 1e3:.1f} ms", f"{b['tp_cached'] / b['tvm_cached']:.2f}x"),
        ("first use of a new cache (+ PCH + allocator)", f"{b['first_use']:.2f} s", "", ""),
        ("(imports before it: tensorplay + tvm_ffi)", f"{b['import'] * 1e3:.0f} ms", "", ""),
    ]  # fmt: skip
    print()
    print(
        table(
            "builds (median, fresh interpreter each)",
            rows,
            ("step", "cpp_jit", "tvm_ffi.cpp", "ratio"),
        )
    )

    p6 = calls["tp.Tensor, cpp_jit module (what users call)"]
    targets = [
        (f"P6 call, 2 tp tensors ({mode})", f"{p6:.3f} µs", "<= 0.3 µs", _status(p6, 0.3)),
        ("P6 call, 2 tp tensors (pure Python core)", f"{fallback['tp']:.3f} µs", "<= 0.3 µs",
         _status(fallback["tp"], 0.3)),
        ("P7 cold build", f"{b['tp_cold']:.2f} s", "<= 2 s", _status(b["tp_cold"], 2)),
        ("P7 cached load, new process", f"{b['tp_cached'] * 1e3:.1f} ms", "<= 50 ms",
         _status(b["tp_cached"], 0.05)),
    ]  # fmt: skip
    print()
    print(table("Targets", targets, ("target", "measured", "goal", "status")))
    out = {
        "calls_us": calls,
        "pure_python_us": fallback,
        "builds_s": b,
        "native": native_exchange(),
    }
    write_json(args.json, out)


if __name__ == "__main__":
    main()
