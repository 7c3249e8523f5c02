"""Dispatch overhead (issue 4): the fast path of ``tp.add`` on 10 elements vs ``torch.add``
(P4), and the cost of an active but empty ``TensorPlayFunctionMode`` / dispatch mode
(target: <= 2x the fast path).

    python tools/bench/dispatch.py [--quick] [--json out.json]
"""

from __future__ import annotations

from _harness import compare, parse_args, table, write_json

import tensorplay as tp
from tensorplay.overrides import TensorPlayFunctionMode
from tensorplay.utils._python_dispatch import TensorPlayDispatchMode

try:
    import torch
except ImportError:  # torch is the comparison point; without it only our times print
    torch = None


def main():
    args = parse_args(__doc__)
    number, repeats = (2000, 3) if args.quick else (20000, 11)
    a, b = tp.ones(10), tp.ones(10)
    fast = {"tp.add fast path": lambda: tp.add(a, b)}
    if torch is not None:
        ta, tb = torch.ones(10), torch.ones(10)
        fast["torch.add"] = lambda: torch.add(ta, tb)
    res = compare(fast, number, repeats)
    with TensorPlayFunctionMode():
        res.update(compare({"tp.add, empty function mode": lambda: tp.add(a, b)}, number, repeats))
    with TensorPlayDispatchMode():
        res.update(compare({"tp.add, empty dispatch mode": lambda: tp.add(a, b)}, number, repeats))
    base = res["tp.add fast path"]
    rows = [(k, f"{v:.2f}", f"{v / base:.2f}x") for k, v in res.items()]
    print(
        table(
            "tp.add on 10 float32 elements (µs per call, median)",
            rows,
            ("call", "µs", "vs fast path"),
        )
    )
    mode_ratio = res["tp.add, empty function mode"] / base
    targets = [
        (
            "empty TensorPlayFunctionMode vs fast path",
            f"{mode_ratio:.2f}x",
            "<= 2x",
            "ok" if mode_ratio <= 2 else "MISS",
        )
    ]
    if torch is not None:
        p4 = base / res["torch.add"]
        targets.insert(
            0, ("P4 fast path vs torch.add", f"{p4:.2f}x", "<= 1.0x", "ok" if p4 <= 1.0 else "MISS")
        )
    print()
    print(table("Targets", targets, ("target", "measured", "goal", "status")))
    write_json(args.json, res)


if __name__ == "__main__":
    main()
