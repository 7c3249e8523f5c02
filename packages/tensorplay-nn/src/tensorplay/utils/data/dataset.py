"""Datasets: the map-style and iterable bases, and the standard combinators.

Mirrors ``torch.utils.data.dataset``: :class:`Dataset`, :class:`IterableDataset`,
:class:`TensorDataset`, :class:`StackDataset`, :class:`ConcatDataset`, :class:`ChainDataset`,
:class:`Subset` and :func:`random_split`.
"""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

import tensorplay as tp

__all__ = [
    "ChainDataset",
    "ConcatDataset",
    "Dataset",
    "IterableDataset",
    "StackDataset",
    "Subset",
    "TensorDataset",
    "random_split",
]

T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")


class Dataset(Generic[T_co]):
    """An abstract map-style dataset: subclasses implement ``__getitem__`` (and usually
    ``__len__``, which samplers and :class:`~tensorplay.utils.data.DataLoader` rely on).

    A subclass may also implement ``__getitems__(indices)`` to fetch a whole batch at once;
    the DataLoader then calls it instead of ``__getitem__`` once per index.
    """

    def __getitem__(self, index) -> T_co:
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co], Iterable[T_co]):
    """An abstract iterable-style dataset: subclasses implement ``__iter__``.

    With ``num_workers > 0`` every worker process iterates its own copy of the dataset; use
    :func:`~tensorplay.utils.data.get_worker_info` inside ``__iter__`` (or in
    ``worker_init_fn``) to give each worker a different shard, else every sample is produced
    once per worker.
    """

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other: Dataset[T_co]):
        return ChainDataset([self, other])


def _first_dim(t) -> int:
    shape = getattr(t, "shape", None)
    if shape is None or len(shape) == 0:
        raise ValueError("TensorDataset: every tensor needs at least one dimension")
    return int(shape[0])


class TensorDataset(Dataset[tuple]):
    """Dataset wrapping tensors: sample ``i`` is ``tuple(t[i] for t in tensors)``.

    Every tensor must have the same size in its first dimension.
    """

    def __init__(self, *tensors) -> None:
        sizes = [_first_dim(t) for t in tensors]
        if any(s != sizes[0] for s in sizes):
            raise ValueError(
                f"Size mismatch between tensors: first dimensions are {sizes}; "
                "all tensors must have the same size in dimension 0"
            )
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(tensor[index] for tensor in self.tensors)

    def __len__(self) -> int:
        return _first_dim(self.tensors[0]) if self.tensors else 0


class StackDataset(Dataset[T_co]):
    """Dataset assembling samples from several datasets of equal length.

    ``StackDataset(a, b)`` yields tuples ``(a[i], b[i])``; ``StackDataset(x=a, y=b)`` yields
    dicts ``{"x": a[i], "y": b[i]}``.
    """

    def __init__(self, *args: Dataset, **kwargs: Dataset) -> None:
        if args:
            if kwargs:
                raise ValueError(
                    "Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) "
                    "like input/output, but both types are given."
                )
            self._length = len(args[0])
            if any(self._length != len(dataset) for dataset in args):
                raise ValueError(
                    f"Size mismatch between datasets: lengths {[len(d) for d in args]}"
                )
            self.datasets: Any = args
        elif kwargs:
            tmp = list(kwargs.values())
            self._length = len(tmp[0])
            if any(self._length != len(dataset) for dataset in tmp):
                raise ValueError(
                    "Size mismatch between datasets: lengths "
                    f"{ {k: len(v) for k, v in kwargs.items()} }"
                )
            self.datasets = kwargs
        else:
            raise ValueError("At least one dataset should be passed")

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: dataset[index] for k, dataset in self.datasets.items()}
        return tuple(dataset[index] for dataset in self.datasets)

    def __getitems__(self, indices: list) -> list:
        if isinstance(self.datasets, dict):
            dict_batch: list = [{} for _ in indices]
            for k, dataset in self.datasets.items():
                items = _fetch_many(dataset, indices)
                if len(items) != len(indices):
                    raise ValueError(
                        "Nested dataset's output size mismatch."
                        f" Expected {len(indices)}, got {len(items)}"
                    )
                for data, d_sample in zip(items, dict_batch):
                    d_sample[k] = data
            return dict_batch
        list_batch: list = [[] for _ in indices]
        for dataset in self.datasets:
            items = _fetch_many(dataset, indices)
            if len(items) != len(indices):
                raise ValueError(
                    "Nested dataset's output size mismatch."
                    f" Expected {len(indices)}, got {len(items)}"
                )
            for data, t_sample in zip(items, list_batch):
                t_sample.append(data)
        return [tuple(sample) for sample in list_batch]

    def __len__(self) -> int:
        return self._length


def _fetch_many(dataset, indices: list) -> list:
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return getitems(indices)
    return [dataset[i] for i in indices]


class ConcatDataset(Dataset[T_co]):
    """Dataset concatenating several map-style datasets (``ds1 + ds2`` builds one)."""

    datasets: list
    cumulative_sizes: list

    @staticmethod
    def cumsum(sequence) -> list:
        r, s = [], 0
        for e in sequence:
            n = len(e)
            r.append(n + s)
            s += n
        return r

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if len(self.datasets) == 0:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        if idx >= len(self):
            raise IndexError(f"index {idx} is out of range for ConcatDataset of length {len(self)}")
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        sample_idx = idx if dataset_idx == 0 else idx - self.cumulative_sizes[dataset_idx - 1]
        return self.datasets[dataset_idx][sample_idx]


class ChainDataset(IterableDataset):
    """Iterable dataset chaining several iterable datasets, one after the other."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        super().__init__()
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError("ChainDataset only supports IterableDataset")
            total += len(d)  # type: ignore[arg-type]
        return total


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list) -> list:
        return _fetch_many(self.dataset, [self.indices[idx] for idx in indices])

    def __len__(self) -> int:
        return len(self.indices)


def _collated_gather(dataset):
    """A shortcut for ``default_collate([dataset[i] for i in indices])``, or None.

    For a :class:`TensorDataset` of tensors, directly or under :class:`Subset` s, that batch is
    ``[t[indices] for t in tensors]``: one index op per tensor instead of a ``__getitem__`` per
    sample and a stack per tensor.  Only the exact classes qualify, since a subclass may
    override ``__getitem__``.  The returned function gives None for indices that are not a
    flat sequence of integers; the caller then fetches sample by sample.
    """
    if type(dataset) is Subset:
        inner = _collated_gather(dataset.dataset)
        if inner is None:
            return None
        subset_indices = dataset.indices
        return lambda indices: inner([subset_indices[i] for i in indices])
    if type(dataset) is not TensorDataset or not all(tp.is_tensor(t) for t in dataset.tensors):
        return None
    tensors = dataset.tensors

    def gather(indices):
        rows = np.asarray(indices)
        if rows.ndim != 1 or rows.dtype.kind not in "iu":
            return None
        return [t[rows] for t in tensors]

    return gather


def random_split(
    dataset: Dataset[T], lengths: Sequence[int | float], generator=None
) -> list[Subset[T]]:
    """Split ``dataset`` at random into non-overlapping :class:`Subset` s.

    ``lengths`` holds either integer lengths summing to ``len(dataset)``, or fractions summing
    to 1: each split then gets ``floor(len(dataset) * frac)`` samples and the remainder is
    handed out one at a time, round-robin from the first split (as in torch).

    The permutation comes from ``generator`` (``tensorplay.Generator``), else from the global
    generator (seed it with ``tensorplay.manual_seed``).
    """
    lengths = list(lengths)
    total = sum(lengths)
    if math.isclose(total, 1) and total <= 1:
        subset_lengths: list[int] = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            subset_lengths.append(int(math.floor(len(dataset) * frac)))  # type: ignore[arg-type]
        remainder = len(dataset) - sum(subset_lengths)  # type: ignore[arg-type]
        for i in range(remainder):
            subset_lengths[i % len(subset_lengths)] += 1
        lengths = subset_lengths  # type: ignore[assignment]
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.",
                    stacklevel=2,
                )
    if sum(lengths) != len(dataset):  # type: ignore[arg-type]
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    if any(int(n) != n or n < 0 for n in lengths):
        raise ValueError(f"lengths must be non-negative integers or fractions, got {lengths}")
    lengths = [int(n) for n in lengths]
    indices = tp.randperm(sum(lengths), generator=generator).tolist()
    return [
        Subset(dataset, indices[offset - length : offset])
        for offset, length in zip(itertools.accumulate(lengths), lengths)
    ]
