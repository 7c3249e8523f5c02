"""Shared timing harness for tools/bench: interleaved runs, medians, a table and JSON.

Machines here are noisy, so candidates are timed *interleaved* (A, B, C, A, B, C, ...)
and we report medians and ratios measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="few repeats (CI smoke run)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return p.parse_args()


def per_call_us(fn, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number * 1e6


def compare(candidates: dict, number: int, repeats: int) -> dict:
    """Median µs per call of each candidate, measured interleaved."""
    samples: dict = {k: [] for k in candidates}
    for fn in candidates.values():  # warm up
        per_call_us(fn, max(number // 10, 1))
    for _ in range(repeats):
        for name, fn in candidates.items():
            samples[name].append(per_call_us(fn, number))
    return {k: statistics.median(v) for k, v in samples.items()}


def table(title: str, rows: list[tuple], headers: tuple) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = " | ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [f"## {title}", line, "-|-".join("-" * w for w in widths)]
    out += [" | ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def write_json(path: str | None, data) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(data, f, indent=2)
