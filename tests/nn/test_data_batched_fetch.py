"""DataLoader's batched fetch: with ``default_collate``, a TensorDataset (directly or under
Subsets) is gathered with one index op per tensor; every batch must equal what fetching
sample by sample and collating gives, in the same order."""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils.data import (
    DataLoader,
    Dataset,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)


def _per_sample_collate(batch):
    # not `default_collate` itself, so the loader fetches sample by sample and collates
    return default_collate(batch)


def _dataset(n=23):
    rng = np.random.default_rng(0)
    return TensorDataset(
        tp.tensor(rng.standard_normal((n, 3)).astype(np.float32)),
        tp.tensor(rng.integers(0, 10, n)),
        tp.tensor(rng.integers(0, 2, n).astype(bool)),
    )


def _assert_batches_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) is list and len(g) == len(w)
        for a, b in zip(g, w):
            assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def _epochs(loader, n=2):
    return [batch for _ in range(n) for batch in loader]


@pytest.mark.parametrize("drop_last", [False, True])
def test_tensor_dataset_batches_equal_per_sample_collate(drop_last):
    ds = _dataset()

    def loader(collate_fn):
        g = tp.Generator().manual_seed(4)
        return DataLoader(ds, 5, shuffle=True, drop_last=drop_last, generator=g, **collate_fn)

    got = _epochs(loader({}))
    want = _epochs(loader({"collate_fn": _per_sample_collate}))
    _assert_batches_equal(got, want)


def test_tensor_dataset_gathers_without_getitem(monkeypatch):
    ds = _dataset()
    calls = []
    per_sample = TensorDataset.__getitem__
    monkeypatch.setattr(
        TensorDataset, "__getitem__", lambda self, i: calls.append(i) or per_sample(self, i)
    )
    x, y, _ = next(iter(DataLoader(ds, batch_size=4)))
    assert calls == []
    assert y.tolist() == [ds.tensors[1][i].item() for i in range(4)]
    next(iter(DataLoader(ds, batch_size=4, collate_fn=_per_sample_collate)))
    assert calls == [0, 1, 2, 3]


def test_subset_of_tensor_dataset_batches_equal_per_sample_collate():
    train, _ = random_split(_dataset(), [0.7, 0.3], generator=tp.Generator().manual_seed(1))
    nested = Subset(train, [5, 0, 3, 3, 9])

    def batches(ds, **kw):
        return list(DataLoader(ds, 3, shuffle=True, generator=tp.Generator().manual_seed(2), **kw))

    for ds in (train, nested):
        _assert_batches_equal(batches(ds), batches(ds, collate_fn=_per_sample_collate))


def test_batch_sampler_tuples_and_negative_indices_equal_per_sample_collate():
    ds = _dataset()
    index_batches = [[3, -1, 5], (2, 0), np.array([7, 7]), [22]]
    got = list(DataLoader(ds, batch_sampler=index_batches))
    want = list(DataLoader(ds, batch_sampler=index_batches, collate_fn=_per_sample_collate))
    _assert_batches_equal(got, want)
    assert got[0][1].tolist() == [ds.tensors[1][i].item() for i in (3, -1, 5)]


def test_user_collate_fn_receives_the_samples():
    ds = _dataset(6)
    seen = []
    batches = list(DataLoader(ds, batch_size=4, collate_fn=lambda b: seen.append(b) or len(b)))
    assert batches == [4, 2]
    assert type(seen[0]) is list and type(seen[0][0]) is tuple and len(seen[0][0]) == 3
    assert seen[1][1][1].item() == ds.tensors[1][5].item()


def test_tensor_dataset_subclass_getitem_is_honoured():
    class Doubled(TensorDataset):
        def __getitem__(self, i):
            return tuple(t[i] * 2 for t in self.tensors)

    (x,) = next(iter(DataLoader(Doubled(tp.arange(5.0)), batch_size=3)))
    assert x.tolist() == [0.0, 2.0, 4.0]


def test_numpy_column_still_collates_to_a_tensor():
    ds = TensorDataset(tp.arange(4), np.arange(8.0).reshape(4, 2))
    i, a = next(iter(DataLoader(ds, batch_size=2)))
    assert tp.is_tensor(a) and a.dtype == tp.float64 and a.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert i.tolist() == [0, 1]


def test_gathered_batch_carries_gradients_to_the_dataset_tensor():
    x = tp.arange(6.0).requires_grad_()
    (xb,) = next(iter(DataLoader(TensorDataset(x), batch_sampler=[[4, 1, 4]])))
    (xb * tp.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 2.0, 0.0, 0.0, 4.0, 0.0]


class Squares(Dataset):
    """A map-style dataset with ``__getitems__``, recording the index batches it gets."""

    def __init__(self, n):
        self.n, self.requests = n, []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"i": i, "sq": tp.tensor([float(i * i)])}

    def __getitems__(self, indices):
        self.requests.append(list(indices))
        return [self[i] for i in indices]


class PlainSquares(Squares):
    __getitems__ = None  # type: ignore[assignment]


def test_getitems_batches_equal_per_sample_collate():
    ds = Squares(7)
    got = list(DataLoader(ds, batch_size=3))
    assert ds.requests == [[0, 1, 2], [3, 4, 5], [6]]
    want = list(DataLoader(PlainSquares(7), batch_size=3))
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert g["i"].tolist() == w["i"].tolist()
        np.testing.assert_array_equal(g["sq"].numpy(), w["sq"].numpy())
    assert got[1]["sq"].tolist() == [[9.0], [16.0], [25.0]]


def test_dataset_without_getitems_still_loads():
    batches = list(DataLoader(PlainSquares(5), batch_size=2, drop_last=True))
    assert [b["i"].tolist() for b in batches] == [[0, 1], [2, 3]]
    assert batches[1]["sq"].tolist() == [[4.0], [9.0]]


def test_workers_gather_the_same_batches_as_one_process():
    ds = _dataset()

    def batches(num_workers):
        g = tp.Generator().manual_seed(9)
        return list(DataLoader(ds, 4, shuffle=True, num_workers=num_workers, generator=g))

    _assert_batches_equal(batches(2), batches(0))
    getitems = Squares(6)
    got = list(DataLoader(getitems, batch_size=4, num_workers=2))
    assert [b["i"].tolist() for b in got] == [[0, 1, 2, 3], [4, 5]]
