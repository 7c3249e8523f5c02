"""tensorplay.utils.data: datasets, samplers, collate and DataLoader (torch.utils.data as the
oracle where behaviour is deterministic)."""

from __future__ import annotations

import collections
import os
import random

import numpy as np
import pytest

import tensorplay as tp
from tensorplay.utils.data.dataloader import (
    DataLoader,
    default_collate,
    default_convert,
    get_worker_info,
)
from tensorplay.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from tensorplay.utils.data.sampler import (
    BatchSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

try:  # the oracle: tests that compare with torch.utils.data skip without it
    import torch
except ImportError:
    torch = None
tud = torch.utils.data if torch is not None else None
needs_torch = pytest.mark.skipif(
    torch is None,
    reason="torch (the test oracle) is not installed: pip install /opt/wheels/torch-2.13.0*.whl",
)


def _np(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def _assert_same(ours, theirs):
    """Recursively compare a tensorplay structure with a torch one (values, shapes, dtypes)."""
    if isinstance(theirs, torch.Tensor):
        assert tp.is_tensor(ours), type(ours)
        assert tuple(ours.shape) == tuple(theirs.shape)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and ours.keys() == theirs.keys()
        for k in theirs:
            _assert_same(ours[k], theirs[k])
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _assert_same(a, b)
    else:
        assert ours == theirs


# ----------------------------------------------------------------------------- datasets


def test_tensor_dataset_items_and_len():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6)
    ds = TensorDataset(tp.tensor(x), tp.tensor(y))
    assert len(ds) == 6
    a, b = ds[4]
    np.testing.assert_array_equal(a.numpy(), x[4])
    assert b.item() == 4


def test_tensor_dataset_size_mismatch_names_sizes():
    with pytest.raises(ValueError, match=r"\[3, 4\]"):
        TensorDataset(tp.ones(3), tp.ones(4))


def test_concat_subset_stack():
    a = TensorDataset(tp.arange(3))
    b = TensorDataset(tp.arange(10, 14))
    c = a + b
    assert isinstance(c, ConcatDataset) and len(c) == 7
    assert [c[i][0].item() for i in range(7)] == [0, 1, 2, 10, 11, 12, 13]
    assert c[-1][0].item() == 13
    with pytest.raises(IndexError):
        c[7]
    with pytest.raises(ValueError, match="should not be an empty"):
        ConcatDataset([])
    s = Subset(c, [6, 0, 3])
    assert len(s) == 3 and [s[i][0].item() for i in range(3)] == [13, 0, 10]
    st = StackDataset(a, [7, 8, 9])
    assert st[1][0][0].item() == 1 and st[1][1] == 8
    sd = StackDataset(x=a, y=[7, 8, 9])
    assert sd[2]["y"] == 9
    with pytest.raises(ValueError, match="Size mismatch"):
        StackDataset(a, [1])


def test_random_split_lengths_and_disjoint():
    ds = list(range(10))
    g = tp.Generator().manual_seed(0)
    parts = random_split(ds, [3, 7], generator=g)
    assert [len(p) for p in parts] == [3, 7]
    idx = [i for p in parts for i in p.indices]
    assert sorted(idx) == list(range(10))
    # same seed -> same split
    parts2 = random_split(ds, [3, 7], generator=tp.Generator().manual_seed(0))
    assert [p.indices for p in parts] == [p.indices for p in parts2]
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [3, 6])


@needs_torch
@pytest.mark.parametrize(
    "n,fracs", [(10, [0.3, 0.7]), (11, [0.5, 0.5]), (7, [0.2, 0.3, 0.5]), (5, [1 / 3] * 3)]
)
def test_random_split_fractions_match_torch(n, fracs):
    ours = random_split(list(range(n)), fracs, generator=tp.Generator().manual_seed(1))
    theirs = tud.random_split(list(range(n)), fracs, generator=torch.Generator().manual_seed(1))
    assert [len(p) for p in ours] == [len(p) for p in theirs]
    assert sorted(i for p in ours for i in p.indices) == list(range(n))


# ----------------------------------------------------------------------------- samplers


@needs_torch
def test_sequential_and_batch_sampler_match_torch():
    assert list(SequentialSampler(range(5))) == list(tud.SequentialSampler(range(5)))
    for bs, dl in [(2, False), (2, True), (3, False), (5, True), (7, True)]:
        ours = BatchSampler(SequentialSampler(range(10)), bs, dl)
        theirs = tud.BatchSampler(tud.SequentialSampler(range(10)), bs, dl)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        BatchSampler(range(3), 0, False)
    with pytest.raises(ValueError, match="drop_last should be a boolean"):
        BatchSampler(range(3), 2, 1)


def test_random_sampler_permutation_and_reproducible():
    ds = range(20)
    a = list(RandomSampler(ds, generator=tp.Generator().manual_seed(42)))
    b = list(RandomSampler(ds, generator=tp.Generator().manual_seed(42)))
    c = list(RandomSampler(ds, generator=tp.Generator().manual_seed(43)))
    assert sorted(a) == list(range(20))
    assert a == b and a != c
    # num_samples larger than the dataset: whole permutations back to back
    s = list(RandomSampler(range(4), num_samples=10, generator=tp.Generator().manual_seed(0)))
    assert len(s) == 10 and sorted(s[:4]) == sorted(s[4:8]) == [0, 1, 2, 3]
    r = list(RandomSampler(range(3), replacement=True, num_samples=50))
    assert len(r) == 50 and set(r) <= {0, 1, 2}
    # global generator seeding makes generator=None reproducible
    tp.manual_seed(5)
    d = list(RandomSampler(ds))
    tp.manual_seed(5)
    assert list(RandomSampler(ds)) == d
    with pytest.raises(TypeError, match="replacement should be a boolean"):
        RandomSampler(ds, replacement=1)
    with pytest.raises(ValueError, match="num_samples should be a positive integer"):
        RandomSampler(ds, num_samples=0)


def test_subset_and_weighted_samplers():
    idx = [3, 5, 7, 9]
    s = list(SubsetRandomSampler(idx, generator=tp.Generator().manual_seed(0)))
    assert sorted(s) == idx
    w = WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], 200, generator=tp.Generator().manual_seed(0))
    draws = list(w)
    assert len(draws) == 200 and set(draws) == {1, 3}
    assert 100 < draws.count(3) < 190
    nr = list(WeightedRandomSampler([1.0, 2.0, 3.0, 0.0], 3, replacement=False))
    assert sorted(nr) == [0, 1, 2]
    with pytest.raises(ValueError, match="1d sequence"):
        WeightedRandomSampler([[1.0, 2.0]], 2)


# ----------------------------------------------------------------------------- collate


@needs_torch
def test_default_collate_nested_matches_torch():
    Point = collections.namedtuple("Point", ["x", "y"])

    def samples(lib):
        return [
            {
                "a": lib.tensor([float(i), 2.0 * i]),
                "b": (i, 0.5 * i, i % 2 == 0),
                "c": {"name": f"s{i}", "arr": np.full((2, 2), i, dtype=np.int32)},
                "p": Point(i, float(i)),
                "n": np.float32(i),
                "l": [i, i + 1],
            }
            for i in range(3)
        ]

    ours = default_collate(samples(tp))
    theirs = tud.default_collate(samples(torch))
    assert ours["c"]["name"] == ["s0", "s1", "s2"]
    assert isinstance(ours["p"], Point)
    assert str(ours["b"][1].dtype) == "tensorplay.float64"
    assert str(ours["b"][0].dtype) == "tensorplay.int64"
    assert str(ours["b"][2].dtype) == "tensorplay.bool"
    _assert_same(ours["a"], theirs["a"])
    _assert_same(ours["b"], theirs["b"])
    _assert_same(ours["c"], theirs["c"])
    _assert_same(tuple(ours["p"]), tuple(theirs["p"]))
    _assert_same(ours["n"], theirs["n"])
    _assert_same(ours["l"], theirs["l"])


def test_default_collate_errors():
    with pytest.raises(RuntimeError, match=r"\[2\].*\[3\]"):
        default_collate([tp.ones(2), tp.ones(3)])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [1]])
    with pytest.raises(TypeError, match="default_collate: batch must contain"):
        default_collate([object(), object()])


def test_default_convert():
    out = default_convert({"x": np.arange(3), "t": (np.float64(1.5), "s"), "k": 3})
    assert tp.is_tensor(out["x"]) and out["x"].tolist() == [0, 1, 2]
    assert isinstance(out["t"], list) and out["t"][0].item() == 1.5 and out["t"][1] == "s"
    assert out["k"] == 3


# ----------------------------------------------------------------------------- DataLoader


@needs_torch
@pytest.mark.parametrize(
    "bs,drop_last", [(1, False), (3, False), (3, True), (4, True), (10, False)]
)
def test_dataloader_tensor_dataset_matches_torch(bs, drop_last):
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    ours = DataLoader(TensorDataset(tp.tensor(x), tp.tensor(y)), batch_size=bs, drop_last=drop_last)
    theirs = tud.DataLoader(
        tud.TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=bs, drop_last=drop_last
    )
    assert len(ours) == len(theirs)
    ob, tb = list(ours), list(theirs)
    assert len(ob) == len(tb)
    for a, b in zip(ob, tb):
        _assert_same(a, b)


def test_dataloader_no_batching_and_batch_sampler():
    ds = TensorDataset(tp.arange(5))
    items = list(DataLoader(ds, batch_size=None))
    assert len(items) == 5 and tuple(items[2][0].shape) == () and items[2][0].item() == 2
    bsamp = [[4, 0], [1, 2, 3]]
    out = [b[0].tolist() for b in DataLoader(ds, batch_sampler=bsamp)]
    assert out == [[4, 0], [1, 2, 3]]
    out = list(DataLoader([{"v": 1.0}, {"v": 2.0}], batch_size=2))
    assert out[0]["v"].tolist() == [1.0, 2.0] and str(out[0]["v"].dtype) == "tensorplay.float64"


@needs_torch
def test_dataloader_argument_conflicts_match_torch():
    ds = list(range(10))
    cases = [
        dict(batch_sampler=[[0]], batch_size=2),
        dict(batch_sampler=[[0]], shuffle=True),
        dict(batch_sampler=[[0]], sampler=[0]),
        dict(batch_sampler=[[0]], drop_last=True),
        dict(sampler=[0, 1], shuffle=True),
        dict(batch_size=None, drop_last=True),
        dict(num_workers=-1),
        dict(timeout=-1),
        dict(prefetch_factor=2),
        dict(persistent_workers=True),
    ]
    for kw in cases:
        with pytest.raises(ValueError) as theirs:
            tud.DataLoader(ds, **kw)
        with pytest.raises(ValueError) as ours:
            DataLoader(ds, **kw)
        assert str(ours.value) == str(theirs.value), kw

    class It(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(ValueError, match="expected unspecified shuffle"):
        DataLoader(It(), shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified sampler"):
        DataLoader(It(), sampler=[0])
    dl = DataLoader(ds)
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        dl.batch_size = 3


def test_shuffle_covers_every_index_and_is_reproducible():
    ds = TensorDataset(tp.arange(17))
    g = tp.Generator().manual_seed(3)
    dl = DataLoader(ds, batch_size=5, shuffle=True, generator=g)
    epochs = [[i for b in dl for i in b[0].tolist()] for _ in range(3)]
    for e in epochs:
        assert sorted(e) == list(range(17))
    assert epochs[0] != epochs[1]  # reshuffled each epoch
    g.manual_seed(3)
    assert [i for b in dl for i in b[0].tolist()] == epochs[0]
    # no generator: global seed reproducibility
    tp.manual_seed(11)
    a = [i for b in DataLoader(ds, batch_size=4, shuffle=True) for i in b[0].tolist()]
    tp.manual_seed(11)
    b = [i for b in DataLoader(ds, batch_size=4, shuffle=True) for i in b[0].tolist()]
    assert a == b and sorted(a) == list(range(17))


class RangeIterable(IterableDataset):
    """Yields start..end-1, sharded across workers via get_worker_info."""

    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.start, self.end))
        per = -(-(self.end - self.start) // info.num_workers)
        lo = self.start + info.id * per
        return iter(range(lo, min(lo + per, self.end)))

    def __len__(self):
        return self.end - self.start


def test_iterable_dataset_loading():
    ds = RangeIterable(0, 7)
    dl = DataLoader(ds, batch_size=3)
    assert len(dl) == 3
    assert [b.tolist() for b in dl] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(ds, batch_size=3, drop_last=True)] == [
        [0, 1, 2],
        [3, 4, 5],
    ]
    assert [x for x in DataLoader(ds, batch_size=None)] == list(range(7))
    chain = ds + RangeIterable(10, 12)
    assert isinstance(chain, ChainDataset) and list(chain) == [0, 1, 2, 3, 4, 5, 6, 10, 11]


class MapDS(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"i": i, "x": tp.tensor([float(i)] * 2)}


# ----------------------------------------------------------------------------- workers


def test_workers_same_batches_as_single_process():
    ds = MapDS(11)
    ref = list(DataLoader(ds, batch_size=3))
    got = list(DataLoader(ds, batch_size=3, num_workers=2))
    assert len(got) == len(ref) == 4
    for a, b in zip(got, ref):
        assert a["i"].tolist() == b["i"].tolist()
        np.testing.assert_array_equal(a["x"].numpy(), b["x"].numpy())
    # shuffling with the same generator seed gives the same order with or without workers
    o1 = [b["i"].tolist() for b in DataLoader(ds, 4, True, generator=tp.Generator().manual_seed(7))]
    o2 = [
        b["i"].tolist()
        for b in DataLoader(ds, 4, True, num_workers=2, generator=tp.Generator().manual_seed(7))
    ]
    assert o1 == o2


class SeedDS(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        info = get_worker_info()
        return (
            info.id,
            info.seed,
            info.num_workers,
            float(tp.rand(1).item()),
            random.random(),
            os.getpid(),
        )


def test_worker_info_and_seeds_differ():
    assert get_worker_info() is None
    rows = list(DataLoader(SeedDS(), batch_size=None, num_workers=2))
    ids = [r[0] for r in rows]
    assert ids == [0, 1, 0, 1]  # round-robin dispatch, results in order
    seeds = {r[0]: r[1] for r in rows}
    assert seeds[1] == seeds[0] + 1
    assert all(r[2] == 2 for r in rows)
    assert rows[0][3] != rows[1][3] and rows[0][4] != rows[1][4]
    assert len({r[5] for r in rows}) == 2 and os.getpid() not in {r[5] for r in rows}


def _init_fn(worker_id):
    random.seed(1000 + worker_id)


class InitCheckDS(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return random.random()


def test_worker_init_fn():
    out = list(DataLoader(InitCheckDS(), batch_size=None, num_workers=2, worker_init_fn=_init_fn))
    assert out == [random.Random(1000).random(), random.Random(1001).random()]


class FailingDS(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 3:
            raise ValueError("bad sample 3")
        return i


def test_worker_exception_surfaces_with_id():
    dl = DataLoader(FailingDS(), batch_size=None, num_workers=2)
    with pytest.raises(ValueError, match=r"worker process 1(.|\n)*bad sample 3"):
        list(dl)


def test_iterable_dataset_split_across_workers():
    ds = RangeIterable(0, 9)
    got = sorted(i for b in DataLoader(ds, batch_size=2, num_workers=2) for i in b.tolist())
    assert got == list(range(9))


def test_persistent_workers_across_epochs():
    dl = DataLoader(MapDS(5), batch_size=2, num_workers=2, persistent_workers=True)
    e1 = [b["i"].tolist() for b in dl]
    it = iter(dl)
    next(it)  # abandon the second epoch half-way
    e3 = [b["i"].tolist() for b in dl]
    assert e1 == e3 == [[0, 1], [2, 3], [4]]
    dl._iterator._shutdown_workers()


class DyingDS(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            os._exit(3)
        return i


def test_worker_death_raises():
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(DataLoader(DyingDS(), batch_size=None, num_workers=2))
