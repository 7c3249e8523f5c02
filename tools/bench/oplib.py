"""Op library speed (issue 20): a call of a generated operator against the same operator
declared with custom_op (target: <= 0.5 µs more) and the bare kernel; and the time a library
of 50 operators adds to the first ``tp.ops.<namespace>`` access in a new process (target:
<= 50 ms), found through its entry point like an installed wheel.

    python tools/bench/oplib.py [--quick] [--json out.json]

The library is built once into a temporary folder (the kernels through cpp_jit's cache) and
made "installed" for the child processes with a dist-info folder on PYTHONPATH; they run
from bytecode, as installed code does. Its shared library is opened on the first kernel
call, not on registration: the first call (which imports tvm-ffi) is timed separately.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _harness import compare, parse_args, table, write_json

import tensorplay as tp
from tensorplay import library, oplib
from tensorplay.utils import cpp_jit

N_OPS = 50
NAMESPACE = "bench_oplib"

KERNEL = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
using tvm::ffi::TensorView;

// out = alpha * x + b (float32, same shapes); every operator of the library exports it
void axpb(TensorView x, TensorView b, double alpha, TensorView out) {
  const float* px = static_cast<const float*>(x.data_ptr());
  const float* pb = static_cast<const float*>(b.data_ptr());
  float* po = static_cast<float*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = static_cast<float>(alpha) * px[i] + pb[i];
}
"""

OP = """\
  - schema: op{i}(Tensor x, Tensor b, *, float alpha=1.0) -> Tensor
    kernels: {{cpu: op{i}_cpu}}
    fake: {{broadcast: [x, b]}}
    derivatives:
      x: grad * alpha
      b: grad
"""

# In a new process: import tensorplay, then time the first tp.ops.<ns> access and call.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    import tensorplay as tp
    if sys.argv[1] == "library-imported":
        import tensorplay.library
    t0 = time.perf_counter()
    ns = tp.ops.{ns}
    t1 = time.perf_counter()
    x = tp.ones(16)
    t2 = time.perf_counter()
    ns.op0(x, x)
    t3 = time.perf_counter()
    ns.op1(x, x)
    t4 = time.perf_counter()
    print(json.dumps({{"access": (t1 - t0) * 1e3, "first_call": (t3 - t2) * 1e3,
                       "second_op": (t4 - t3) * 1e3, "ops": len(dir(ns))}}))
    """
).format(ns=NAMESPACE)


def build_library(root: Path) -> Path:
    """A 50-operator library, built and laid out as an installed wheel would be."""
    src = root / "src"
    src.mkdir()
    exports = "".join(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC(op{i}_cpu, axpb);\n" for i in range(N_OPS))
    (src / "kernels.cc").write_text(KERNEL + exports)
    ops = "".join(OP.format(i=i) for i in range(N_OPS))
    (src / "ops.yaml").write_text(
        f"namespace: {NAMESPACE}\nsources: {{cpp: [kernels.cc]}}\nops:\n{ops}"
    )
    site = root / "site"
    package = oplib.build(src / "ops.yaml", site)
    info = site / "bench_oplib-0.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-oplib\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(
        f"[tensorplay.oplibs]\n{NAMESPACE} = {package.name}:register\n"
    )
    return site


def first_access(site: Path, mode: str, repeats: int) -> dict[str, float]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    # as installed code runs: from bytecode (pip compiles what it installs), kept out of
    # the source tree; the first, unmeasured run writes it
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(site.parent / "pycache")
    runs = []
    for _ in range(repeats + 1):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, env=env, check=True
        )
        runs.append(json.loads(out.stdout))
    assert runs[0]["ops"] == N_OPS, runs[0]
    runs = runs[1:]
    return {k: statistics.median(r[k] for r in runs) for k in ("access", "first_call", "second_op")}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    number, repeats = (200, 3) if args.quick else (3000, 9)
    with tempfile.TemporaryDirectory(prefix="tp-bench-oplib-") as tmp:
        site = build_library(Path(tmp))
        package = site / f"_tensorplay_oplib_{NAMESPACE}"

        # calls, in this process
        lib = oplib.load(package)
        generated = lib.ops["op0"]
        kernels = cpp_jit.load_module(
            package / f"{NAMESPACE}_cpu.so", read_only={"op0_cpu": [0, 1]}
        )

        @library.custom_op("bench_oplib_ref::op0", mutates_args=())
        def declared(x: tp.Tensor, b: tp.Tensor, *, alpha: float = 1.0) -> tp.Tensor:
            out = tp.empty(
                tp.broadcast_shapes(x.shape, b.shape),
                dtype=tp.promote_types(x.dtype, b.dtype),
                device=x.device,
            )
            kernels.op0_cpu(x, b, alpha, out)
            return out

        declared.register_fake(lambda x, b, *, alpha=1.0: tp.empty_like(x))
        x, b = tp.randn(16), tp.randn(16)
        out = tp.empty(16)
        assert generated(x, b, alpha=2.0).allclose(declared(x, b, alpha=2.0))
        times = compare(
            {
                "generated op (oplib)": lambda: generated(x, b, alpha=2.0),
                "same op, custom_op + cpp_jit kernel": lambda: declared(x, b, alpha=2.0),
                "kernel alone (cpp_jit, output given)": lambda: kernels.op0_cpu(x, b, 2.0, out),
            },
            number,
            repeats,
        )
        base = times["same op, custom_op + cpp_jit kernel"]
        rows = [(k, f"{v:.2f}", f"{v - base:+.2f}") for k, v in times.items()]
        print(
            table(
                "call, 16 float32 elements (median µs per call)", rows, ("", "µs", "vs custom_op")
            )
        )
        print()

        loads = {
            m: first_access(site, m, 3 if args.quick else 7) for m in ("cold", "library-imported")
        }
        rows = [
            (
                "nothing imported but tensorplay" if m == "cold" else "tensorplay.library imported",
                f"{r['access']:.1f}",
                f"{r['first_call']:.1f}",
                f"{r['second_op']:.3f}",
            )
            for m, r in loads.items()
        ]
        print(
            table(
                f"new process, library of {N_OPS} ops via its entry point (median ms)",
                rows,
                (
                    "",
                    "first tp.ops.ns",
                    "first call (opens .so, imports tvm-ffi)",
                    "first call of another op",
                ),
            )
        )
        write_json(args.json, {"calls_us": times, "first_access_ms": loads})


if __name__ == "__main__":
    main()
