"""Autograd speed, side by side with torch: P3 (``autograd.Function`` forward + backward,
target <= 0.5x torch's) and plain ``x*2 -> sum -> backward`` on 8 elements (<= 1.0x).

    python tools/bench/autograd.py [--quick] [--json out.json]
"""

from __future__ import annotations

from _harness import compare, parse_args, table, write_json

import tensorplay as tp

try:
    import torch
except ImportError:  # torch is the comparison point; without it only our times print
    torch = None


class TpMulTwo(tp.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def tp_function_step(x):
    TpMulTwo.apply(x).sum().backward()


def tp_plain_step(x):
    (x * 2).sum().backward()


def candidates():
    x = tp.ones(8, requires_grad=True)
    cands = {
        "tp Function fwd+bwd": lambda: tp_function_step(x),
        "tp x*2 sum backward": lambda: tp_plain_step(x),
    }
    if torch is not None:

        class TorchMulTwo(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        tx = torch.ones(8, requires_grad=True)
        cands["torch Function fwd+bwd"] = lambda: TorchMulTwo.apply(tx).sum().backward()
        cands["torch x*2 sum backward"] = lambda: (tx * 2).sum().backward()
    return cands


def main():
    args = parse_args(__doc__)
    res = compare(candidates(), 300 if args.quick else 3000, 3 if args.quick else 11)
    rows = [(k, f"{v:.2f}") for k, v in res.items()]
    print(
        table("forward + backward, 8 float32 elements (µs per step, median)", rows, ("step", "µs"))
    )
    if torch is not None:
        p3 = res["tp Function fwd+bwd"] / res["torch Function fwd+bwd"]
        plain = res["tp x*2 sum backward"] / res["torch x*2 sum backward"]
        rows = [
            (
                "P3 Function fwd+bwd vs torch",
                f"{p3:.2f}x",
                "<= 0.5x",
                "ok" if p3 <= 0.5 else "MISS",
            ),
            (
                "x*2 -> sum -> backward vs torch",
                f"{plain:.2f}x",
                "<= 1.0x",
                "ok" if plain <= 1.0 else "MISS",
            ),
        ]
        print()
        print(table("Targets", rows, ("target", "measured", "goal", "status")))
        res.update(P3=p3, plain_ratio=plain)
    write_json(args.json, res)


if __name__ == "__main__":
    main()
