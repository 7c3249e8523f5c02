"""What runs inside DataLoader worker processes, plus the fetchers shared with the main process.

Results travel back pickled (``pickle.dumps`` in the worker, ``pickle.loads`` in the main
process): tensors pickle by value, there is no shared memory.
"""

from __future__ import annotations

import os
import pickle
import queue
import random
import sys
import traceback
from dataclasses import dataclass

import numpy as np

import tensorplay as tp

from .dataset import IterableDataset, _collated_gather

__all__ = ["WorkerInfo", "get_worker_info"]

# How often (seconds) blocking waits wake up to check that the other side is still alive.
STATUS_CHECK_INTERVAL = 1.0


class WorkerInfo:
    """Read-only description of the current DataLoader worker.

    Attributes: ``id`` (0 .. num_workers-1), ``num_workers``, ``seed`` (``base_seed + id``:
    the seed of this worker's global ``tensorplay`` and ``random`` generators) and
    ``dataset`` (this process's copy of the dataset).
    """

    id: int
    num_workers: int
    seed: int
    dataset: object
    __initialized = False

    def __init__(self, **kwargs) -> None:
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs.keys())
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {self.__class__.__name__} objects")
        return super().__setattr__(key, val)

    def __repr__(self) -> str:
        items = [f"{k}={getattr(self, k)}" for k in self.__keys]
        return f"{self.__class__.__name__}({', '.join(items)})"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a DataLoader worker process: its :class:`WorkerInfo`; in the main process: None.

    Typical use is in an :class:`IterableDataset`'s ``__iter__`` (or in ``worker_init_fn``)
    to give each worker its own shard of the data.
    """
    return _worker_info


class KeyErrorMessage(str):
    """str subclass whose repr is the string itself (KeyError otherwise shows repr(msg))."""

    def __repr__(self) -> str:
        return self


class ExceptionWrapper:
    """An exception caught in a worker, with its traceback, for re-raising in the main
    process."""

    def __init__(self, exc_info=None, where: str = "in background") -> None:
        if exc_info is None:
            exc_info = sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


@dataclass(frozen=True)
class _IterableDatasetStopIteration:
    worker_id: int


@dataclass(frozen=True)
class _ResumeIteration:
    """Sent to persistent workers at the start of a new epoch; echoed back as an ack."""


class _MapDatasetFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last, default_collation) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        # a user's collate_fn is owed the list of samples; default_collate's result can be
        # gathered directly from some datasets
        self.gather = _collated_gather(dataset) if auto_collation and default_collation else None

    def fetch(self, possibly_batched_index):
        if self.gather is not None:
            batch = self.gather(possibly_batched_index)
            if batch is not None:
                return batch
        if self.auto_collation:
            getitems = getattr(self.dataset, "__getitems__", None)
            if getitems:
                data = getitems(possibly_batched_index)
            else:
                data = [self.dataset[idx] for idx in possibly_batched_index]
        else:
            data = self.dataset[possibly_batched_index]
        return self.collate_fn(data)


class _IterableDatasetFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last, default_collation) -> None:
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.dataset_iter = iter(dataset)
        self.ended = False

    def fetch(self, possibly_batched_index):
        if self.ended:
            raise StopIteration
        if self.auto_collation:
            data = []
            for _ in possibly_batched_index:
                try:
                    data.append(next(self.dataset_iter))
                except StopIteration:
                    self.ended = True
                    break
            if len(data) == 0 or (self.drop_last and len(data) < len(possibly_batched_index)):
                raise StopIteration
        else:
            data = next(self.dataset_iter)
        return self.collate_fn(data)


def create_fetcher(dataset, auto_collation, collate_fn, drop_last, default_collation):
    """The fetcher turning index batches into batches; ``default_collation`` says that
    ``collate_fn`` is ``default_collate`` (which lets a map-style fetcher gather batches
    directly, see ``_collated_gather``)."""
    cls = _IterableDatasetFetcher if isinstance(dataset, IterableDataset) else _MapDatasetFetcher
    return cls(dataset, auto_collation, collate_fn, drop_last, default_collation)


def _seed_worker(seed: int, base_seed: int, worker_id: int) -> None:
    random.seed(seed)
    tp.manual_seed(seed)
    # numpy's global generator too, else forked workers would all share its state
    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))


def _dumps(idx, data, worker_id: int) -> bytes:
    try:
        return pickle.dumps((idx, data), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        try:  # the exception type itself may be what fails to pickle
            return pickle.dumps(
                (idx, ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
        except Exception:
            wrapper = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            wrapper.exc_type = RuntimeError
            return pickle.dumps((idx, wrapper), protocol=pickle.HIGHEST_PROTOCOL)


def _worker_loop(
    dataset,
    index_queue,
    data_queue,
    done_event,
    auto_collation,
    collate_fn,
    drop_last,
    default_collation,
    base_seed,
    init_fn,
    worker_id,
    num_workers,
    parent_pid,
):
    global _worker_info
    try:
        seed = base_seed + worker_id
        _seed_worker(seed, base_seed, worker_id)
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
        init_exception = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = create_fetcher(
                dataset, auto_collation, collate_fn, drop_last, default_collation
            )
        except Exception:
            init_exception = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
        iteration_end = False

        while True:
            if os.getppid() != parent_pid:  # the main process died: nobody to serve
                break
            try:
                r = index_queue.get(timeout=STATUS_CHECK_INTERVAL)
            except queue.Empty:
                continue
            if isinstance(r, _ResumeIteration):
                data_queue.put(pickle.dumps((r, None)))
                iteration_end = False
                try:
                    fetcher = create_fetcher(
                        dataset, auto_collation, collate_fn, drop_last, default_collation
                    )
                except Exception:
                    init_exception = ExceptionWrapper(
                        where=f"in DataLoader worker process {worker_id}"
                    )
                continue
            if r is None:
                break
            if done_event.is_set() or iteration_end:
                continue
            idx, index = r
            if init_exception is not None:
                data = init_exception
                init_exception = None
            else:
                try:
                    data = fetcher.fetch(index)
                except Exception as e:
                    if isinstance(e, StopIteration) and isinstance(dataset, IterableDataset):
                        data = _IterableDatasetStopIteration(worker_id)
                        iteration_end = True
                    else:
                        data = ExceptionWrapper(where=f"in DataLoader worker process {worker_id}")
            data_queue.put(_dumps(idx, data, worker_id))
            del data, idx, index, r
    except KeyboardInterrupt:
        pass
    if done_event.is_set():
        data_queue.cancel_join_thread()
        data_queue.close()
