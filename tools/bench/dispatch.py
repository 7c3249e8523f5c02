"""Dispatch overhead (issue 4): the fast path of ``tp.add`` on 10 elements vs ``torch.add``
(P4), and the cost of an active but empty ``TensorPlayFunctionMode`` / dispatch mode
(target: <= 2x the fast path), for the native path (``tensorplay._C``) and its Python twin
(what ``TENSORPLAY_PURE_PYTHON=1`` runs) side by side in one process.

    python tools/bench/dispatch.py [--quick] [--json out.json]
"""

from __future__ import annotations

from _harness import compare, parse_args, table, write_json

import tensorplay as tp
from tensorplay import _native
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
    native = tp.add if _native.NATIVE is not None else None
    twin = getattr(tp.add, "fallback", tp.add)  # the generated Python function
    paths = {"Python twin": twin} | ({"native": native} if native is not None else {})
    cands = {f"tp.add, {k}": (lambda f=f: f(a, b)) for k, f in paths.items()}
    if torch is not None:
        ta, tb = torch.ones(10), torch.ones(10)
        cands["torch.add"] = lambda: torch.add(ta, tb)
    res = compare(cands, number, repeats)
    with TensorPlayFunctionMode():
        res.update(
            compare(
                {
                    f"tp.add, {k}, empty function mode": (lambda f=f: f(a, b))
                    for k, f in paths.items()
                },
                number,
                repeats,
            )
        )
    with TensorPlayDispatchMode():
        res.update(compare({"tp.add, empty dispatch mode": lambda: twin(a, b)}, number, repeats))
    base = res[f"tp.add, {'native' if native is not None else 'Python twin'}"]
    rows = [(k, f"{v:.2f}", f"{v / base:.2f}x") for k, v in res.items()]
    print(
        table(
            "tp.add on 10 float32 elements (µs per call, median)",
            rows,
            ("call", "µs", "vs fast path"),
        )
    )
    targets = []
    for k in paths:
        fast = res[f"tp.add, {k}"]
        if torch is not None:
            p4 = fast / res["torch.add"]
            targets.append(
                (f"P4 {k} vs torch.add", f"{p4:.2f}x", "<= 1.0x", "ok" if p4 <= 1 else "MISS")
            )
        mode = res[f"tp.add, {k}, empty function mode"] / fast
        targets.append(
            (
                f"empty function mode vs {k} fast path",
                f"{mode:.2f}x",
                "<= 2x",
                "ok" if mode <= 2 else "MISS",
            )
        )
    if _native.NATIVE is None:
        targets.append(("native path", "not built", _native.REASON, "-"))
    print()
    print(table("Targets", targets, ("target", "measured", "goal", "status")))
    write_json(args.json, res)


if __name__ == "__main__":
    main()
