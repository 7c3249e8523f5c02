"""vmap speed (issue 19), side by side with the Python loop and torch.vmap/torch.func on the
CPU (torch at one intra-op thread, its faster setting on small machines):

- a pointwise + matmul function of one sample (tanh(W @ v + 1).sum(), W 64x32) over a
  batch of 64: targets >= 10x faster than the loop and <= 1.0x torch.vmap;
- per-sample gradients of a 2-layer MLP (32 -> 64 -> 10, tanh, squared error), batch 64:
  target <= 1.0x torch.func.vmap(grad);
- the Jacobian of tanh(W @ x), R^256 -> R^256: tp.func.jacrev (vmap over the basis) against
  tp.autograd.functional.jacobian (a loop of backward passes): target >= 10x faster;
- the same Jacobian by forward mode, R^64 -> R^64: tp.func.jacfwd (vmap over the tangent
  basis, batched forward AD) against a loop of tp.func.jvp, one per basis vector;
- the Hessian of sum(tanh(W @ x)^2), x in R^32: tp.func.hessian (jacfwd over jacrev)
  against tp.autograd.functional.hessian (loops of double backward passes).

    python tools/bench/vmap.py [--quick] [--json out.json]
"""

from __future__ import annotations

import warnings

from _harness import compare, parse_args, table, write_json

import tensorplay as tp

try:
    import torch
except ImportError:  # the comparison point; its columns are left out without it
    torch = None


def pointwise_matmul() -> dict:
    tp.manual_seed(0)
    w, x = tp.randn(64, 32), tp.randn(64, 32)

    def f(v):
        return tp.tanh(w @ v + 1.0).sum()

    batched = tp.vmap(f)
    cands = {"tp vmap": lambda: batched(x), "tp loop": lambda: tp.stack([f(v) for v in x])}
    if torch is not None:
        tw, tx = torch.from_numpy(w.numpy()), torch.from_numpy(x.numpy())
        tbatched = torch.vmap(lambda v: torch.tanh(tw @ v + 1.0).sum())
        cands["torch.vmap"] = lambda: tbatched(tx)
    return cands


def per_sample_grads() -> dict:
    tp.manual_seed(0)
    params = [tp.randn(32, 64) * 0.1, tp.randn(64), tp.randn(64, 10) * 0.1, tp.randn(10)]
    xs, ys = tp.randn(64, 32), tp.randn(64, 10)

    def grads(params, x, y):
        ps = [p.detach().requires_grad_() for p in params]
        h = tp.tanh(x @ ps[0] + ps[1])
        loss = ((h @ ps[2] + ps[3] - y) ** 2).sum()
        return tp.autograd.grad(loss, ps)

    batched = tp.vmap(grads, in_dims=(None, 0, 0))
    cands = {
        "tp vmap": lambda: batched(params, xs, ys),
        "tp loop": lambda: [grads(params, xs[i], ys[i]) for i in range(64)],
    }
    if torch is not None:
        tparams = [torch.from_numpy(p.numpy()) for p in params]
        txs, tys = torch.from_numpy(xs.numpy()), torch.from_numpy(ys.numpy())

        def tloss(ps, x, y):
            h = torch.tanh(x @ ps[0] + ps[1])
            return ((h @ ps[2] + ps[3] - y) ** 2).sum()

        tbatched = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))
        cands["torch.func"] = lambda: tbatched(tparams, txs, tys)
    return cands


def jacobian() -> dict:
    tp.manual_seed(0)
    w, x = tp.randn(256, 256, dtype=tp.float64) * 0.1, tp.randn(256, dtype=tp.float64)

    def f(v):
        return tp.tanh(w @ v)

    cands = {
        "tp vmap": lambda: tp.func.jacrev(f)(x),
        "tp loop": lambda: tp.autograd.functional.jacobian(f, x),
    }
    if torch is not None:
        tw, tx = torch.from_numpy(w.numpy()), torch.from_numpy(x.numpy())
        cands["torch.func"] = lambda: torch.func.jacrev(lambda v: torch.tanh(tw @ v))(tx)
    return cands


def jacobian_forward() -> dict:
    tp.manual_seed(0)
    w, x = tp.randn(64, 64, dtype=tp.float64) * 0.1, tp.randn(64, dtype=tp.float64)

    def f(v):
        return tp.tanh(w @ v)

    basis = tp.eye(64, dtype=tp.float64)
    cands = {
        "tp vmap": lambda: tp.func.jacfwd(f)(x),
        "tp loop": lambda: tp.stack([tp.func.jvp(f, (x,), (e,))[1] for e in basis], -1),
    }
    if torch is not None:
        tw, tx = torch.from_numpy(w.numpy()), torch.from_numpy(x.numpy())
        cands["torch.func"] = lambda: torch.func.jacfwd(lambda v: torch.tanh(tw @ v))(tx)
    return cands


def hessian() -> dict:
    tp.manual_seed(0)
    w, x = tp.randn(32, 32, dtype=tp.float64) * 0.1, tp.randn(32, dtype=tp.float64)

    def f(v):
        return (tp.tanh(w @ v) ** 2).sum()

    cands = {
        "tp vmap": lambda: tp.func.hessian(f)(x),
        "tp loop": lambda: tp.autograd.functional.hessian(f, x),
    }
    if torch is not None:
        tw, tx = torch.from_numpy(w.numpy()), torch.from_numpy(x.numpy())
        cands["torch.func"] = lambda: torch.func.hessian(lambda v: (torch.tanh(tw @ v) ** 2).sum())(
            tx
        )
    return cands


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    if torch is not None:
        torch.set_num_threads(1)
    n, reps = (20, 3) if args.quick else (100, 7)
    results = {}
    with warnings.catch_warnings():  # a row without a batching rule warns once: not timed
        warnings.simplefilter("ignore")
        results["tanh(W @ v + 1).sum(), batch 64"] = compare(pointwise_matmul(), n, reps)
        results["per-sample grads, MLP, batch 64"] = compare(
            per_sample_grads(), max(n // 10, 3), reps
        )
        results["jacobian, R^256 -> R^256"] = compare(jacobian(), max(n // 10, 2), reps)
        results["jacfwd, R^64 -> R^64"] = compare(jacobian_forward(), max(n // 10, 2), reps)
        results["hessian, R^32 -> R"] = compare(hessian(), max(n // 20, 2), reps)
    rows, targets = [], []
    for name, res in results.items():
        ref = next((k for k in res if k.startswith("torch")), None)
        rows.append(
            (
                name,
                *(f"{res[k]:.1f}" for k in ("tp vmap", "tp loop")),
                f"{res[ref]:.1f}" if ref else "-",
            )
        )
        speedup = res["tp loop"] / res["tp vmap"]
        targets.append(
            (
                name,
                "vmap vs loop",
                f"{speedup:.1f}x faster",
                ">= 10x",
                "ok" if speedup >= 10 else "MISS",
            )
        )
        if ref:
            ratio = res["tp vmap"] / res[ref]
            targets.append(
                (name, f"vmap / {ref}", f"{ratio:.2f}x", "<= 1.0x", "ok" if ratio <= 1 else "MISS")
            )
    print(table("vmap, CPU (µs per call, median)", rows, ("case", "tp vmap", "tp loop", "torch")))
    print()
    print(table("Targets", targets, ("case", "measure", "measured", "goal", "status")))
    write_json(args.json, results)


if __name__ == "__main__":
    main()
