"""Samplers: iterables of dataset indices (or of index batches), as in ``torch.utils.data``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Generic, TypeVar

import numpy as np

import tensorplay as tp

__all__ = [
    "BatchSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
]

T_co = TypeVar("T_co", covariant=True)


class Sampler(Generic[T_co]):
    """Base class of samplers: ``__iter__`` yields indices (or lists of indices).

    Subclasses that know their length implement ``__len__``; DataLoader's ``len()`` uses it.
    """

    def __init__(self, data_source: Sized | None = None) -> None:
        pass

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError


def _fresh_generator():
    """A generator seeded from the global one: each call draws a new seed."""
    seed = int(tp.randint(0, 2**62, ()).item())
    return tp.Generator().manual_seed(seed)


class SequentialSampler(Sampler[int]):
    """Yields ``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """Yields indices of ``data_source`` in random order.

    Without replacement it yields a permutation (several back to back, the last one cut, if
    ``num_samples`` exceeds the dataset's length); with ``replacement=True`` it draws
    ``num_samples`` indices independently.  Randomness comes from ``generator``; without one,
    every ``iter()`` seeds a fresh generator from the global one (``tensorplay.manual_seed``).
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator=None,
    ) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(
                f"replacement should be a boolean value, but got replacement={self.replacement}"
            )
        if (
            not isinstance(self.num_samples, int)
            or isinstance(self.num_samples, bool)
            or self.num_samples <= 0
        ):
            raise ValueError(
                "num_samples should be a positive integer value, but got "
                f"num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        if self._num_samples is None:
            return len(self.data_source)
        return self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        generator = self.generator if self.generator is not None else _fresh_generator()
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from tp.randint(0, n, (32,), generator=generator).tolist()
            rest = self.num_samples % 32
            if rest:
                yield from tp.randint(0, n, (rest,), generator=generator).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from tp.randperm(n, generator=generator).tolist()
            rest = self.num_samples % n
            if rest:
                yield from tp.randperm(n, generator=generator).tolist()[:rest]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """Yields the given ``indices`` in random order (a new permutation per ``iter()``)."""

    def __init__(self, indices: Sequence[int], generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in tp.randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """Yields ``num_samples`` indices in ``[0, len(weights))`` drawn with probabilities
    proportional to ``weights`` (with or without replacement)."""

    def __init__(
        self,
        weights: Sequence[float],
        num_samples: int,
        replacement: bool = True,
        generator=None,
    ) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got num_samples={num_samples}"
            )
        if not isinstance(replacement, bool):
            raise ValueError(
                f"replacement should be a boolean value, but got replacement={replacement}"
            )
        w = weights.numpy() if tp.is_tensor(weights) else np.asarray(weights)  # type: ignore[union-attr]
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(
                f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}"
            )
        if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not replacement and num_samples > int((w > 0).sum()):
            raise RuntimeError(
                "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
            )
        self.weights = tp.tensor(w, dtype=tp.float64)
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        w = self.weights.numpy()
        u = tp.rand(self.num_samples if self.replacement else len(w), generator=self.generator)
        u = u.numpy().astype(np.float64)
        if self.replacement:
            cdf = np.cumsum(w)
            idx = np.searchsorted(cdf, u * cdf[-1], side="right")
            idx = np.minimum(idx, len(w) - 1)
        else:
            # Efraimidis-Spirakis: the k largest u**(1/w) are a weighted sample w/o replacement
            with np.errstate(divide="ignore"):
                keys = np.where(w > 0, np.log(np.maximum(u, 1e-300)) / w, -np.inf)
            idx = np.argsort(-keys, kind="stable")[: self.num_samples]
        yield from (int(i) for i in idx)

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Wraps a sampler to yield lists of ``batch_size`` indices (the last one shorter unless
    ``drop_last``)."""

    def __init__(
        self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        if self.drop_last:
            return n // self.batch_size
        return (n + self.batch_size - 1) // self.batch_size
