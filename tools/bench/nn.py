"""tensorplay-nn speed, side by side with torch on the CPU (targets: <= 1.0x torch each):

- one training epoch of the digits MLP (examples/digits.py's model: 64-256-10 with dropout,
  AdamW, batch 32, shuffled ``DataLoader`` over a ``TensorDataset``; scikit-learn's digits
  when installed, random data of the same shape otherwise);
- one training epoch of a small CNN on the same images (8x8, one channel): conv 3x3 (16) -
  ReLU - max pool 2 - conv 3x3 (32) - ReLU - flatten - linear (10), AdamW, batch 32;
- ``nn.Linear(128, 128)`` forward + backward on a batch of 1;
- ``optim.AdamW.step()`` over 100 parameters of 10,000 elements (torch with ``foreach=True``).

    python tools/bench/nn.py [--quick] [--json out.json]

torch runs twice, interleaved with ours: with its default intra-op threads and with one
thread. On a small shared machine its threading costs more than it gains on these tiny ops
(measured on 2 cores: one thread is ~2.5x faster), so each target is judged against the
faster of the two.
"""

from __future__ import annotations

import numpy as np
from _harness import compare, parse_args, table, write_json

import tensorplay as tp
from tensorplay import nn
from tensorplay.utils.data import DataLoader, TensorDataset

try:
    import torch
except ImportError:  # torch is the comparison point; without it only our times print
    torch = None


def digits_data() -> tuple[np.ndarray, np.ndarray, str]:
    """The example's training split (1,347 x 64, standardised), or random data shaped so."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler
    except ImportError:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1347, 64)).astype(np.float32)
        return x, rng.integers(0, 10, 1347), "random 1347x64 (scikit-learn not installed)"
    x, y = load_digits(return_X_y=True)
    x_train, _, y_train, _ = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    x_train = StandardScaler().fit_transform(x_train).astype(np.float32)
    return x_train, y_train.astype(np.int64), "sklearn digits, 1347 training samples"


def _mlp(lib):
    n = lib.nn
    return n.Sequential(n.Linear(64, 256), n.ReLU(), n.Dropout(0.2), n.Linear(256, 10))


def _cnn(lib):
    n = lib.nn
    return n.Sequential(
        n.Conv2d(1, 16, 3, padding=1),
        n.ReLU(),
        n.MaxPool2d(2),
        n.Conv2d(16, 32, 3, padding=1),
        n.ReLU(),
        n.Flatten(),
        n.Linear(32 * 4 * 4, 10),
    )


def epoch_candidates(x: np.ndarray, y: np.ndarray, build=_mlp) -> dict:
    tp.manual_seed(0)
    model = build(tp)
    opt = tp.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(
        TensorDataset(tp.tensor(x), tp.tensor(y)),
        batch_size=32,
        shuffle=True,
        generator=tp.Generator().manual_seed(0),
    )

    def tp_epoch():
        for xb, yb in loader:
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()

    cands = {"tp": tp_epoch}
    if torch is not None:
        tnn = torch.nn
        torch.manual_seed(0)
        tmodel = build(torch)
        topt = torch.optim.AdamW(tmodel.parameters(), lr=2e-3, weight_decay=1e-2)
        tloss = tnn.CrossEntropyLoss()
        tloader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
            batch_size=32,
            shuffle=True,
            generator=torch.Generator().manual_seed(0),
        )

        def torch_epoch():
            for xb, yb in tloader:
                topt.zero_grad()
                tloss(tmodel(xb), yb).backward()
                topt.step()

        cands["torch"] = torch_epoch
    return cands


def linear_candidates() -> dict:
    tp.manual_seed(0)
    lin, x = nn.Linear(128, 128), tp.randn(1, 128)

    def tp_step():
        lin(x).sum().backward()

    cands = {"tp": tp_step}
    if torch is not None:
        tlin, tx = torch.nn.Linear(128, 128), torch.randn(1, 128)
        cands["torch"] = lambda: tlin(tx).sum().backward()
    return cands


def adamw_candidates() -> dict:
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(10_000).astype(np.float32) for _ in range(100)]
    grads = [rng.standard_normal(10_000).astype(np.float32) for _ in range(100)]
    params = [tp.tensor(v, requires_grad=True) for v in values]
    for p, g in zip(params, grads):
        p.grad = tp.tensor(g)
    opt = tp.optim.AdamW(params, lr=1e-3)
    cands = {"tp": opt.step}
    if torch is not None:
        tparams = [torch.tensor(v, requires_grad=True) for v in values]
        for p, g in zip(tparams, grads):
            p.grad = torch.tensor(g)
        cands["torch"] = torch.optim.AdamW(tparams, lr=1e-3, foreach=True).step
    return cands


def _with_one_thread(cands: dict) -> dict:
    """``cands`` plus ``torch1``: the torch candidate run with one intra-op thread."""
    if "torch" not in cands:
        return cands
    run = cands["torch"]

    def one_thread():
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            run()
        finally:
            torch.set_num_threads(threads)

    return {**cands, "torch1": one_thread}


def main():
    args = parse_args(__doc__)
    x, y, data = digits_data()
    quick = args.quick
    results = {
        "digits MLP epoch (ms)": {
            k: v / 1e3
            for k, v in compare(
                _with_one_thread(epoch_candidates(x, y)), 1, 3 if quick else 11
            ).items()
        },
        "small CNN epoch (ms)": {
            k: v / 1e3
            for k, v in compare(
                _with_one_thread(epoch_candidates(x.reshape(-1, 1, 8, 8), y, _cnn)),
                1,
                3 if quick else 7,
            ).items()
        },
        "Linear(128,128) fwd+bwd, batch 1 (µs)": compare(
            _with_one_thread(linear_candidates()), 200 if quick else 2000, 3 if quick else 11
        ),
        "AdamW.step, 100 x 10k params (ms)": {
            k: v / 1e3
            for k, v in compare(
                _with_one_thread(adamw_candidates()), 3 if quick else 5, 3 if quick else 15
            ).items()
        },
    }
    rows = [
        (
            name,
            f"{res['tp']:.2f}",
            f"{res['torch']:.2f}" if "torch" in res else "-",
            f"{res['torch1']:.2f}" if "torch1" in res else "-",
        )
        for name, res in results.items()
    ]
    print(f"data: {data}; torch {torch.__version__ if torch else 'not installed'}")
    headers = ("step", "tp", "torch (default threads)", "torch (1 thread)")
    print(table("tensorplay-nn vs torch, CPU (median per call)", rows, headers))
    if torch is not None:
        targets = []
        for name, res in results.items():
            ratio = res["tp"] / min(res["torch"], res["torch1"])
            res["ratio"] = ratio
            status = "ok" if ratio <= 1.0 else "MISS"
            targets.append((name.rsplit(" (", 1)[0], f"{ratio:.2f}x", "<= 1.0x", status))
        print()
        print(table("Targets (tp / faster torch)", targets, ("step", "measured", "goal", "status")))
    write_json(args.json, results)


if __name__ == "__main__":
    main()
