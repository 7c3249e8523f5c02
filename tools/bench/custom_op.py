"""Custom-op speed (issue 5), side by side with torch 2.13's ``torch.library.custom_op``:

* P1: dispatch overhead = op call minus a direct call of its body, no grad
  (target <= 0.5 µs and >= 15x below torch's);
* P2: op with ``register_autograd``, forward + backward (target <= 0.3x torch's); the step
  is ``op(x).backward(g)``; ``op(x).sum().backward()`` is printed too (it adds the core's
  ``sum`` and its backward node, which are not the custom op's cost).

10-element float32 CPU tensors; candidates interleaved, medians of repeats.

    python tools/bench/custom_op.py [--quick] [--json out.json]
"""

from __future__ import annotations

from _harness import compare, parse_args, table, write_json

import tensorplay as tp
from tensorplay import library

try:
    import torch
except ImportError:  # torch is the comparison point; without it only our times print
    torch = None


def tp_candidates() -> dict:
    def body(x, y):
        return tp.add(x, y)

    op = library.custom_op("bench::add", body, mutates_args=())

    @library.custom_op("bench::scale", mutates_args=())
    def scale(x):
        return x * 2

    scale.register_autograd(lambda ctx, g: g * 2)
    a, b = tp.ones(10), tp.ones(10)
    leaf, g = tp.ones(10, requires_grad=True), tp.ones(10)
    return {
        "tp body": lambda: body(a, b),
        "tp op": lambda: op(a, b),
        "tp fwd+bwd": lambda: scale(leaf).backward(g),
        "tp fwd+sum+bwd": lambda: scale(leaf).sum().backward(),
    }


def torch_candidates() -> dict:
    def body(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.add(x, y)

    op = torch.library.custom_op("bench::add", body, mutates_args=())

    @torch.library.custom_op("bench::scale", mutates_args=())
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    scale.register_autograd(lambda ctx, g: g * 2)
    a, b = torch.ones(10), torch.ones(10)
    leaf, g = torch.ones(10, requires_grad=True), torch.ones(10)
    return {
        "torch body": lambda: body(a, b),
        "torch op": lambda: op(a, b),
        "torch fwd+bwd": lambda: scale(leaf).backward(g),
        "torch fwd+sum+bwd": lambda: scale(leaf).sum().backward(),
    }


def main():
    args = parse_args(__doc__)
    cands = tp_candidates()
    if torch is not None:
        cands.update(torch_candidates())
    # P1 is a difference of two ~1 µs medians: many more repeats than the fwd+bwd steps
    calls = {k: v for k, v in cands.items() if k.endswith(("body", "op"))}
    steps = {k: v for k, v in cands.items() if k not in calls}
    res = compare(calls, *((2000, 3) if args.quick else (20000, 21)))
    res.update(compare(steps, *((300, 3) if args.quick else (2000, 15))))
    rows = [(k, f"{v:.2f}") for k, v in res.items()]
    print(table("custom op calls, 10 float32 elements (µs per call, median)", rows, ("call", "µs")))
    p1 = res["tp op"] - res["tp body"]
    res["P1 tp overhead"] = p1
    targets = [
        ("P1 tp dispatch overhead", f"{p1:.2f} µs", "<= 0.5 µs", "ok" if p1 <= 0.5 else "MISS")
    ]
    if torch is not None:
        torch_overhead = res["torch op"] - res["torch body"]
        ratio = torch_overhead / max(p1, 1e-3)
        p2 = res["tp fwd+bwd"] / res["torch fwd+bwd"]
        p2_sum = res["tp fwd+sum+bwd"] / res["torch fwd+sum+bwd"]
        res.update(
            {"torch overhead": torch_overhead, "P1 ratio": ratio, "P2": p2, "P2 with sum": p2_sum}
        )
        targets += [
            (
                "P1 torch overhead / tp overhead",
                f"{ratio:.1f}x",
                ">= 15x",
                "ok" if ratio >= 15 else "MISS",
            ),
            ("P2 fwd+bwd vs torch", f"{p2:.2f}x", "<= 0.3x", "ok" if p2 <= 0.3 else "MISS"),
            ("(info) fwd+sum+bwd vs torch", f"{p2_sum:.2f}x", "-", "-"),
        ]
    print()
    print(table("Targets", targets, ("target", "measured", "goal", "status")))
    write_json(args.json, res)


if __name__ == "__main__":
    main()
