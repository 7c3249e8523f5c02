"""CUDA memory: the caching allocator TensorPlay's CUDA tensors come from, and its statistics.

Tensors on CUDA are CuPy arrays, so their memory comes from CuPy's memory pool: a caching
allocator with one arena per stream (a freed block is reused at once by the next
allocation on the stream it was freed on, and by other streams only after it is released
with ``empty_cache``). TensorPlay keeps that pool and routes it through a thin wrapper that
keeps what torch reports and CuPy does not: the peak of allocated and reserved bytes, and
allocation counts.

CUDA graphs capture into a pool of their own (``graphs.py``): the addresses a graph was
captured with must stay its own for as long as it can be replayed. Those pools count in
``memory_allocated``/``memory_reserved`` like the default one.

Without CUDA (or before the first CUDA tensor), every count is 0, as in torch.
"""

from __future__ import annotations

import sys
import threading
import weakref

from tensorplay import _device

__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "record_stream",
    "reset_peak_memory_stats",
]

_lock = threading.Lock()
_default = None  # the _Pool every CUDA allocation outside a graph capture comes from
_graph_pools: list = []  # weak references to the private pools alive (graph captures)
_peak: dict = {}  # device id -> [peak allocated, peak reserved]
_counts: dict = {}  # device id -> number of allocations
# record_stream: [memory, streams that use it, their events once the tensors died (or None)]
_held: list = []


class _Pool:
    """A CuPy memory pool and the allocation function CuPy calls for it."""

    __slots__ = ("cupy_pool", "malloc", "__weakref__")

    def __init__(self, cupy_pool):
        self.cupy_pool = cupy_pool
        self.malloc = _tracking_malloc(cupy_pool)

    def used(self) -> int:
        return self.cupy_pool.used_bytes()

    def total(self) -> int:
        return self.cupy_pool.total_bytes()


def _tracking_malloc(cupy_pool):
    malloc, used, total = cupy_pool.malloc, cupy_pool.used_bytes, cupy_pool.total_bytes

    def alloc(size):
        if _held:
            _release_held()
        mem = malloc(size)
        dev = mem.device_id
        others = 0
        for ref in _graph_pools:  # empty unless a graph pool is alive
            pool = ref()
            if pool is not None and pool.cupy_pool is not cupy_pool:
                others += pool.used()
        a, r = used() + others, total()
        peak = _peak.get(dev)
        if peak is None:
            _peak[dev] = [a, r]
        else:
            if a > peak[0]:
                peak[0] = a
            if r > peak[1]:
                peak[1] = r
        _counts[dev] = _counts.get(dev, 0) + 1
        return mem

    return alloc


def record_stream(memptr, stream) -> None:
    """Keep the memory of CuPy pointer ``memptr`` from being reused until the work queued on
    ``stream`` (a ``tp.cuda.Stream``) up to the moment its last tensor dies has finished.

    CuPy's pool hands a freed block to the next allocation on the stream it was allocated
    on; a tensor used on another stream could then be overwritten while that stream still
    reads it. As torch's allocator does, the block is held past its tensors' death: once
    only this hold is left, an event is recorded on each stream that used it, and the block
    goes back to the pool when they have all passed (checked at each allocation)."""
    cupy_stream = getattr(stream, "_cupy_stream", None)
    if cupy_stream is None:
        raise TypeError(f"record_stream: expected a tp.cuda.Stream, got {type(stream).__name__}")
    stream, mem = cupy_stream, memptr.mem
    for held in _held:
        if held[0] is mem:
            if stream not in held[1]:
                held[1].append(stream)
            return
    _held.append([mem, [stream], None])


def _release_held() -> None:
    for held in list(_held):
        if held[2] is None:
            # referenced only by ``held`` (and getrefcount's argument): its tensors are gone
            if sys.getrefcount(held[0]) <= 2:
                held[2] = [s.record() for s in held[1]]
        elif all(e.done for e in held[2]):
            _held.remove(held)


def _install(cupy) -> None:
    """Route CuPy's allocations through the tracking wrapper of its default pool."""
    global _default
    _default = _Pool(cupy.get_default_memory_pool())
    cupy.cuda.set_allocator(_default.malloc)


_device.on_cupy_loaded(_install)


def new_pool() -> _Pool:
    """A private pool (for CUDA graph captures); it counts in the statistics while alive."""
    pool = _Pool(_device.cupy_or_raise().cuda.MemoryPool())
    _graph_pools.append(weakref.ref(pool, _graph_pools.remove))
    return pool


def _pools() -> list:
    if _default is None:
        return []
    return [_default, *(p for p in (r() for r in _graph_pools) if p is not None)]


def _index(device) -> int:
    if device is None:
        return _device.cupy_or_raise().cuda.runtime.getDevice()
    d = _device.device(device) if not isinstance(device, int) else None
    if d is not None and d.type != "cuda":
        raise ValueError(f"device: expected a CUDA device, got '{d}'")
    return device if d is None else (d.index or 0)


def _on(device, fn) -> int:
    """``fn(pool)`` summed over every pool, on ``device``; 0 before CUDA is in use."""
    if _default is None:
        return 0
    cp = _device.cupy_or_raise()
    with cp.cuda.Device(_index(device)):
        return sum(fn(p) for p in _pools())


def memory_allocated(device=None) -> int:
    """Bytes held by live CUDA tensors on ``device`` (rounded up to the allocator's blocks)."""
    return _on(device, _Pool.used)


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds from the device: in use plus cached free blocks."""
    return _on(device, _Pool.total)


def max_memory_allocated(device=None) -> int:
    """The peak of ``memory_allocated`` since the start or ``reset_peak_memory_stats``."""
    if _default is None:
        return 0
    return max(_peak.get(_index(device), (0, 0))[0], memory_allocated(device))


def max_memory_reserved(device=None) -> int:
    """The peak of ``memory_reserved`` since the start or ``reset_peak_memory_stats``."""
    if _default is None:
        return 0
    return max(_peak.get(_index(device), (0, 0))[1], memory_reserved(device))


def reset_peak_memory_stats(device=None) -> None:
    """Start the peaks again from the current values."""
    if _default is None:
        return
    dev = _index(device)
    with _lock:
        _peak[dev] = [memory_allocated(dev), memory_reserved(dev)]


def empty_cache() -> None:
    """Give the default pool's cached free blocks back to the device (graph pools keep
    theirs: their graphs replay into them). Live tensors are untouched."""
    if _default is None:
        return
    cp = _device.cupy_or_raise()
    if _held:
        _release_held()
    _default.cupy_pool.free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()


def memory_stats(device=None) -> dict:
    """A dict of the allocator's statistics for ``device``, with torch's key names for the
    ones it keeps: ``allocated_bytes.all.{current,peak}``,
    ``reserved_bytes.all.{current,peak}``, ``allocation.all.allocated`` (a count) and
    ``graph_pools`` (pools held by live CUDA graphs)."""
    if _default is None:
        return {}
    dev = _index(device)
    return {
        "allocated_bytes.all.current": memory_allocated(dev),
        "allocated_bytes.all.peak": max_memory_allocated(dev),
        "reserved_bytes.all.current": memory_reserved(dev),
        "reserved_bytes.all.peak": max_memory_reserved(dev),
        "allocation.all.allocated": _counts.get(dev, 0),
        "graph_pools": len(_graph_pools),
    }
