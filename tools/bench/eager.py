"""Eager-op speed: P4 (tp.add on 10 elements vs torch.add / np.add), P5 (10M elements vs
numpy) and P10 (``import tensorplay`` time). Prints a table; ``--json PATH`` saves it.

    python tools/bench/eager.py [--quick] [--json out.json]
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from _harness import compare, parse_args, table, write_json

import tensorplay as tp

try:
    import torch
except ImportError:  # torch is an optional comparison point
    torch = None


def small(number, repeats):
    a_np, b_np = np.ones(10, np.float32), np.ones(10, np.float32)
    a, b = tp.from_numpy(a_np.copy()), tp.from_numpy(b_np.copy())
    cands = {
        "np.add": lambda: np.add(a_np, b_np),
        "tp.add": lambda: tp.add(a, b),
        "tp a + b": lambda: a + b,
    }
    if torch is not None:
        ta, tb = torch.ones(10), torch.ones(10)
        cands["torch.add"] = lambda: torch.add(ta, tb)
    return compare(cands, number, repeats)


def large(number, repeats):
    n = 10_000_000
    a_np = np.random.default_rng(0).random(n, np.float32)
    b_np = np.random.default_rng(1).random(n, np.float32)
    a, b = tp.from_numpy(a_np), tp.from_numpy(b_np)
    cands = {"np.add": lambda: np.add(a_np, b_np), "tp.add": lambda: tp.add(a, b)}
    if torch is not None:
        ta, tb = torch.from_numpy(a_np), torch.from_numpy(b_np)
        cands["torch.add"] = lambda: torch.add(ta, tb)
    return compare(cands, number, repeats)


def import_time(repeats):
    code = "import time; t=time.perf_counter(); import tensorplay; print(time.perf_counter()-t)"
    # as users run it: with cached bytecode (a first import writes the .pyc files)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.check_call([sys.executable, "-c", "import tensorplay"], env=env)
    times = sorted(
        float(subprocess.check_output([sys.executable, "-c", code], env=env))
        for _ in range(repeats)
    )
    return times[len(times) // 2]


def main():
    args = parse_args(__doc__)
    reps = 3 if args.quick else 15
    s = small(2000 if args.quick else 20000, reps)
    big = large(2 if args.quick else 10, reps)
    imp = import_time(3 if args.quick else 9)
    rows = [
        (
            k,
            f"{v:.3f}",
            f"{v / s['np.add']:.2f}x",
            f"{v / s['torch.add']:.2f}x" if "torch.add" in s else "n/a",
        )
        for k, v in s.items()
    ]
    print(
        table(
            "10-element float32 add (µs per call, median, interleaved)",
            rows,
            ("call", "µs", "vs np.add", "vs torch.add"),
        )
    )
    print()
    rows = [(k, f"{v / 1000:.2f}", f"{v / big['np.add']:.2f}x") for k, v in big.items()]
    print(table("10M-element float32 add (ms per call)", rows, ("call", "ms", "vs np.add")))
    print()
    p4 = s["tp.add"] / s["torch.add"] if "torch.add" in s else None
    p5 = big["tp.add"] / big["np.add"]
    rows = [
        (
            "P4 tp.add / torch.add (10 el.)",
            f"{p4:.2f}x" if p4 else "n/a (no torch)",
            "<= 1.0x",
            "ok" if p4 and p4 <= 1.0 else ("MISS" if p4 else "-"),
        ),
        ("P5 tp.add / np.add (10M el.)", f"{p5:.2f}x", "<= 1.1x", "ok" if p5 <= 1.1 else "MISS"),
        ("P10 import tensorplay", f"{imp:.3f} s", "<= 0.15 s", "ok" if imp <= 0.15 else "MISS"),
    ]
    print(table("Targets", rows, ("target", "measured", "goal", "status")))
    write_json(args.json, {"small_us": s, "large_us": big, "import_s": imp, "P4": p4, "P5": p5})


if __name__ == "__main__":
    main()
