"""DataLoader, ``default_collate`` and ``default_convert`` (after ``torch.utils.data``)."""

from __future__ import annotations

import collections.abc
import copy
import itertools
import multiprocessing as mp
import os
import pickle
import queue
import re
import time
import warnings
from typing import Any

import numpy as np

import tensorplay as tp

from . import _worker
from ._worker import ExceptionWrapper, _IterableDatasetStopIteration, _ResumeIteration
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "default_collate", "default_convert", "get_worker_info"]

get_worker_info = _worker.get_worker_info

# numpy dtype strings of bytes (S), unicode (U) and object (O) arrays: not convertible
np_str_obj_array_pattern = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


# ----------------------------------------------------------------------------- collate


def default_convert(data):
    """Convert numpy arrays and numpy scalars in ``data`` to tensors, recursing into
    mappings, namedtuples and sequences (tuples become lists, as in torch); anything else is
    returned unchanged.  The DataLoader's ``collate_fn`` when batching is off
    (``batch_size=None``)."""
    elem_type = type(data)
    if tp.is_tensor(data):
        return data
    if elem_type.__module__ == "numpy" and elem_type.__name__ not in ("str_", "string_", "bytes_"):
        if elem_type.__name__ == "ndarray" and np_str_obj_array_pattern.search(data.dtype.str):
            return data
        return tp.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        try:
            if isinstance(data, collections.abc.MutableMapping):
                clone = copy.copy(data)
                clone.update({key: default_convert(data[key]) for key in data})
                return clone
            return elem_type({key: default_convert(data[key]) for key in data})
        except TypeError:
            return {key: default_convert(data[key]) for key in data}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return elem_type(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            if isinstance(data, collections.abc.MutableSequence):
                clone = copy.copy(data)
                for i, d in enumerate(data):
                    clone[i] = default_convert(d)
                return clone
            return elem_type([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def collate_tensor_fn(batch, *, collate_fn_map=None):
    return tp.stack(list(batch), 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    elem = batch[0]
    if np_str_obj_array_pattern.search(elem.dtype.str) is not None:
        raise TypeError(default_collate_err_msg_format.format(elem.dtype))
    return collate([tp.as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    return tp.as_tensor(np.asarray(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    return tp.tensor(list(batch), dtype=tp.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return tp.tensor(list(batch))  # int64, or bool for bools


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map: dict[type | tuple[type, ...], Any] = {
    tp.Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def collate(batch, *, collate_fn_map: dict | None = None):
    """The general collate: dispatch on the first element's type through ``collate_fn_map``
    (exact type first, then ``isinstance``), else recurse into mappings, namedtuples and
    sequences."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type in collate_fn_map:
            if isinstance(elem, collate_type):
                return collate_fn_map[collate_type](batch, collate_fn_map=collate_fn_map)

    if isinstance(elem, collections.abc.Mapping):
        try:
            if isinstance(elem, collections.abc.MutableMapping):
                clone = copy.copy(elem)
                clone.update(
                    {
                        key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                        for key in elem
                    }
                )
                return clone
            return elem_type(
                {
                    key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                    for key in elem
                }
            )
        except TypeError:
            return {
                key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem
            }
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(
            *(collate(samples, collate_fn_map=collate_fn_map) for samples in zip(*batch))
        )
    if isinstance(elem, collections.abc.Sequence):
        it = iter(batch)
        elem_size = len(next(it))
        if not all(len(e) == elem_size for e in it):
            sizes = [len(e) for e in batch]
            raise RuntimeError(
                f"each element in list of batch should be of equal size, got sizes {sizes}"
            )
        transposed = list(zip(*batch))
        if isinstance(elem, tuple):
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, samples in enumerate(transposed):
                    clone[i] = collate(samples, collate_fn_map=collate_fn_map)
                return clone
            return elem_type(
                [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
            )
        except TypeError:
            return [collate(samples, collate_fn_map=collate_fn_map) for samples in transposed]
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def default_collate(batch):
    """Stack a list of samples into a batch, as ``torch.utils.data.default_collate``.

    * tensors -> ``tensorplay.stack`` (a new leading batch dimension; differing shapes raise
      ``RuntimeError`` naming them)
    * numpy arrays -> tensors, then stacked; numpy scalars -> one tensor
    * ``float`` -> ``float64`` tensor, ``int`` -> ``int64`` tensor, ``bool`` -> ``bool`` tensor
    * ``str`` / ``bytes`` -> kept as a list
    * mappings -> same mapping type with each key collated; namedtuples -> same namedtuple;
      tuples -> list of collated fields; other sequences -> same type (all elements must
      have equal length)
    """
    return collate(batch, collate_fn_map=default_collate_fn_map)


def _pin_memory(data):
    """Page-lock tensors when a CUDA device is available and tensors support it; else a
    no-op."""
    if tp.is_tensor(data):
        pin = getattr(data, "pin_memory", None)
        return pin() if callable(pin) else data
    if isinstance(data, collections.abc.Mapping):
        return {k: _pin_memory(v) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_pin_memory(d) for d in data))
    if isinstance(data, tuple):
        return tuple(_pin_memory(d) for d in data)
    if isinstance(data, list):
        return [_pin_memory(d) for d in data]
    return data


# ----------------------------------------------------------------------------- samplers


class _InfiniteConstantSampler(Sampler):
    """Yields None forever: the index 'sampler' of iterable datasets."""

    def __iter__(self):
        while True:
            yield None


# ----------------------------------------------------------------------------- DataLoader


class DataLoader:
    """Iterate a dataset in (optionally shuffled) batches, as ``torch.utils.data.DataLoader``.

    Args:
        dataset: a map-style :class:`Dataset` (``__getitem__`` + ``__len__``) or an
            :class:`IterableDataset`.
        batch_size: samples per batch (default 1); ``None`` turns batching off: every sample
            goes through ``collate_fn`` (default :func:`default_convert`) on its own.
        shuffle: reshuffle every epoch (map-style datasets only).  The permutation comes
            from ``generator``; without one, each epoch seeds a fresh generator from the
            global one, so ``tensorplay.manual_seed`` makes runs reproducible.
        sampler / batch_sampler: custom index order / custom index batches.
            ``batch_sampler`` excludes ``batch_size``, ``shuffle``, ``sampler`` and
            ``drop_last``; ``sampler`` excludes ``shuffle``.
        num_workers: 0 loads in the main process; ``n > 0`` starts ``n`` worker processes
            (``multiprocessing``: 'fork' where available, else 'spawn'; or
            ``multiprocessing_context``).  Worker ``i`` gets seed ``base_seed + i`` (base seed
            drawn from ``generator`` or the global generator each ``iter()``) for its global
            ``tensorplay``, ``random`` and numpy generators, runs ``worker_init_fn(i)``, and
            sees itself in :func:`get_worker_info`.  Batches come back in order; an exception
            in a worker is re-raised in the main process (same type, message naming the
            worker and carrying its traceback).  Results cross processes by pickling.
            Once CUDA is in use in the main process, pass
            ``multiprocessing_context="spawn"`` (a forked child cannot use CUDA).
        collate_fn: merges a list of samples into a batch (default :func:`default_collate`).
            With ``default_collate``, a :class:`TensorDataset` (or a :class:`Subset` of one)
            is gathered with one index op per tensor, giving the same batch as collating its
            samples; any other ``collate_fn`` gets the list of samples.
        pin_memory: accepted for compatibility; tensors are page-locked only when a CUDA
            device is available and tensors support ``pin_memory()`` - otherwise (e.g. on a
            machine without CUDA) it is a no-op.
        drop_last: drop the last incomplete batch.
        timeout: seconds to wait for a batch from the workers (0 = forever); exceeding it
            raises ``RuntimeError``.
        worker_init_fn: called as ``worker_init_fn(worker_id)`` in each worker after seeding.
        generator: ``tensorplay.Generator`` for the shuffle permutation and the worker base
            seed.
        prefetch_factor: batches loaded ahead per worker (default 2 when ``num_workers > 0``;
            must be None when ``num_workers == 0``).
        persistent_workers: keep the worker processes alive across epochs.
    """

    _initialized = False
    _IterableDataset_len_called: int | None = None

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ) -> None:
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; "
                "use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set "
                "prefetch_factor to None."
            )
        elif num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context

        if isinstance(dataset, IterableDataset):
            self._dataset_kind = "iterable"
            if isinstance(shuffle, bool) and shuffle:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified sampler option, "
                    f"but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified batch_sampler "
                    f"option, but got batch_sampler={batch_sampler}"
                )
        else:
            shuffle = bool(shuffle)
            self._dataset_kind = "map"

        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")

        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive "
                    "with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None:
            if drop_last:
                raise ValueError(
                    "batch_size=None option disables auto-batching "
                    "and is mutually exclusive with drop_last"
                )

        if sampler is None:
            if self._dataset_kind == "iterable":
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)

        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator

        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._iterator = None
        self._initialized = True

    # -- properties

    @property
    def multiprocessing_context(self):
        return self._multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, ctx) -> None:
        if ctx is not None:
            if self.num_workers <= 0:
                raise ValueError(
                    "multiprocessing_context can only be used with multi-process loading "
                    f"(num_workers > 0), but got num_workers={self.num_workers}"
                )
            if isinstance(ctx, str):
                valid = mp.get_all_start_methods()
                if ctx not in valid:
                    raise ValueError(
                        "multiprocessing_context option should specify a valid start method "
                        f"in {valid!r}, but got multiprocessing_context={ctx!r}"
                    )
                ctx = mp.get_context(ctx)
            elif not isinstance(ctx, mp.context.BaseContext):
                raise TypeError(
                    "multiprocessing_context option should be a valid context object or a "
                    f"string specifying the start method, but got multiprocessing_context={ctx}"
                )
        self._multiprocessing_context = ctx

    def __setattr__(self, attr, val) -> None:
        if self._initialized and attr in (
            "batch_size",
            "batch_sampler",
            "sampler",
            "drop_last",
            "dataset",
            "persistent_workers",
        ):
            raise ValueError(
                f"{attr} attribute should not be set after {self.__class__.__name__} is initialized"
            )
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_context(self):
        if self.multiprocessing_context is not None:
            return self.multiprocessing_context
        if "fork" in mp.get_all_start_methods():
            return mp.get_context("fork")
        return mp.get_context("spawn")

    # -- iteration

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)

    def __iter__(self):
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def __len__(self) -> int:
        if self._dataset_kind == "iterable":
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                if self.drop_last:
                    length = length // self.batch_size
                else:
                    length = -(-length // self.batch_size)
            return length
        return len(self._index_sampler)


class _BaseDataLoaderIter:
    def __init__(self, loader: DataLoader) -> None:
        self._dataset = loader.dataset
        self._dataset_kind = loader._dataset_kind
        self._IterableDataset_len_called = loader._IterableDataset_len_called
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._prefetch_factor = loader.prefetch_factor
        self._pin_memory = loader.pin_memory and tp.cuda.is_available()
        self._timeout = loader.timeout
        self._collate_fn = loader.collate_fn
        self._default_collation = loader.collate_fn is default_collate
        self._sampler_iter = iter(self._index_sampler)
        # drawn for every iterator (as torch does) so the generator's stream does not depend
        # on num_workers
        self._base_seed = int(tp.randint(0, 2**62, (), generator=loader.generator).item())
        self._persistent_workers = loader.persistent_workers
        self._num_yielded = 0

    def __iter__(self):
        return self

    def _reset(self, loader, first_iter: bool = False) -> None:
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._IterableDataset_len_called = loader._IterableDataset_len_called

    def _next_index(self):
        return next(self._sampler_iter)

    def _next_data(self):
        raise NotImplementedError

    def __next__(self):
        if self._sampler_iter is None:
            raise StopIteration
        data = self._next_data()
        self._num_yielded += 1
        if (
            self._dataset_kind == "iterable"
            and self._IterableDataset_len_called is not None
            and self._num_yielded > self._IterableDataset_len_called
        ):
            warn_msg = (
                f"Length of IterableDataset {self._dataset} was reported to be "
                f"{self._IterableDataset_len_called} (when accessing len(dataloader)), but "
                f"{self._num_yielded} samples have been fetched. "
            )
            if self._num_workers > 0:
                warn_msg += (
                    "For multiprocessing data-loading, this could be caused by not properly "
                    "configuring the IterableDataset replica at each worker."
                )
            warnings.warn(warn_msg, stacklevel=2)
        return data

    def __len__(self) -> int:
        return len(self._index_sampler)


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._fetcher = _worker.create_fetcher(
            self._dataset,
            self._auto_collation,
            self._collate_fn,
            self._drop_last,
            self._default_collation,
        )

    def _next_data(self):
        index = self._next_index()  # may raise StopIteration
        data = self._fetcher.fetch(index)  # may raise StopIteration
        if self._pin_memory:
            data = _pin_memory(data)
        return data


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """Worker processes fed through one index queue each; results come back on one shared
    queue and are reordered by task index."""

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        assert self._num_workers > 0
        assert self._prefetch_factor is not None and self._prefetch_factor > 0
        ctx = loader._get_context()
        self._worker_init_fn = loader.worker_init_fn
        self._shutdown = False
        self._worker_result_queue = ctx.Queue()
        self._workers_done_event = ctx.Event()
        self._index_queues = []
        self._workers = []
        for i in range(self._num_workers):
            index_queue = ctx.Queue()
            index_queue.cancel_join_thread()
            w = ctx.Process(
                target=_worker._worker_loop,
                args=(
                    self._dataset,
                    index_queue,
                    self._worker_result_queue,
                    self._workers_done_event,
                    self._auto_collation,
                    self._collate_fn,
                    self._drop_last,
                    self._default_collation,
                    self._base_seed,
                    self._worker_init_fn,
                    i,
                    self._num_workers,
                    os.getpid(),
                ),
                daemon=True,
            )
            w.start()
            self._index_queues.append(index_queue)
            self._workers.append(w)
        self._reset(loader, first_iter=True)

    def _reset(self, loader, first_iter: bool = False) -> None:
        super()._reset(loader, first_iter)
        self._send_idx = 0  # next task index to send to workers
        self._rcvd_idx = 0  # next task index to return
        # task index -> (worker_id,) while outstanding, (worker_id, data) once received early
        self._task_info: dict[int, tuple] = {}
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        self._worker_queue_idx_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            for q in self._index_queues:
                q.put(_ResumeIteration())
            remaining = self._num_workers
            while remaining > 0:
                idx, _ = self._get_data()
                if isinstance(idx, _ResumeIteration):
                    remaining -= 1
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_get_data(self, timeout: float):
        try:
            raw = self._worker_result_queue.get(timeout=timeout)
            return True, pickle.loads(raw)
        except queue.Empty:
            failed = [
                w
                for i, w in enumerate(self._workers)
                if self._workers_status[i] and not w.is_alive()
            ]
            if failed:
                pids = ", ".join(str(w.pid) for w in failed)
                codes = ", ".join(str(w.exitcode) for w in failed)
                self._shutdown_workers()
                raise RuntimeError(
                    f"DataLoader worker (pid(s) {pids}) exited unexpectedly (exit code(s) {codes})"
                ) from None
            return False, None

    def _get_data(self):
        if self._timeout > 0:
            deadline = time.monotonic() + self._timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._shutdown_workers()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
                ok, data = self._try_get_data(min(left, _worker.STATUS_CHECK_INTERVAL))
                if ok:
                    return data
        while True:
            ok, data = self._try_get_data(_worker.STATUS_CHECK_INTERVAL)
            if ok:
                return data

    def _next_data(self):
        while True:
            # skip tasks of workers that ran out of data (iterable datasets)
            while self._rcvd_idx < self._send_idx:
                info = self._task_info.get(self._rcvd_idx)
                if info:
                    worker_id = info[0]
                    if len(info) == 2 or self._workers_status[worker_id]:
                        break
                    del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
            else:
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration

            if len(self._task_info[self._rcvd_idx]) == 2:
                data = self._task_info.pop(self._rcvd_idx)[1]
                self._rcvd_idx += 1
                return self._process_data(data)

            assert not self._shutdown and self._tasks_outstanding > 0
            idx, data = self._get_data()
            self._tasks_outstanding -= 1
            if isinstance(data, _IterableDatasetStopIteration):
                if self._persistent_workers:
                    self._workers_status[data.worker_id] = False
                else:
                    self._mark_worker_as_unavailable(data.worker_id)
                self._try_put_index()
                continue
            if idx not in self._task_info:  # stale result (should not happen)
                continue
            if idx != self._rcvd_idx:
                self._task_info[idx] += (data,)
            else:
                del self._task_info[idx]
                self._rcvd_idx += 1
                return self._process_data(data)

    def _try_put_index(self) -> None:
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):
            worker_queue_idx = next(self._worker_queue_idx_cycle)
            if self._workers_status[worker_queue_idx]:
                break
        else:
            return  # no active worker left
        self._index_queues[worker_queue_idx].put((self._send_idx, index))
        self._task_info[self._send_idx] = (worker_queue_idx,)
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _process_data(self, data):
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            self._shutdown_workers()
            data.reraise()
        if self._pin_memory:
            data = _pin_memory(data)
        return data

    def _mark_worker_as_unavailable(self, worker_id: int) -> None:
        self._index_queues[worker_id].put(None)
        self._workers_status[worker_id] = False

    def _shutdown_workers(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        self._sampler_iter = None
        try:
            self._workers_done_event.set()
            for q in self._index_queues:
                try:
                    q.put(None)
                except Exception:
                    pass
            deadline = time.monotonic() + 5.0
            for w in self._workers:
                w.join(timeout=max(0.0, deadline - time.monotonic()))
            for w in self._workers:
                if w.is_alive():
                    w.terminate()
                    w.join(timeout=1.0)
        finally:
            for q in self._index_queues:
                q.cancel_join_thread()
                q.close()
            self._worker_result_queue.cancel_join_thread()
            self._worker_result_queue.close()

    def __del__(self):
        try:
            self._shutdown_workers()
        except Exception:
            pass
