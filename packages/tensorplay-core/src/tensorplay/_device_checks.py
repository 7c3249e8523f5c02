"""Checks that run on the GPU: a bad index found by a CUDA kernel is reported at the next
synchronisation instead of being read back to the host at the call.

Reading an index tensor back to check its bounds would stall the host on every
``gather``/``scatter``/``index_select`` (and break CUDA stream capture). torch checks on
the device (a device-side assertion, reported at the next sync); TensorPlay does the same,
without poisoning the CUDA context:

- ``checked_index`` runs one elementwise kernel over the index (or the op's own kernel
  checks as it reads, ``_cuda_index``): each entry outside
  ``[0, n)`` becomes 0 (so the op itself never reads or writes out of bounds) and the
  first one met is kept in a four-word record per device (op, index, dim, size);
- every point where the host reads device memory (``tp.cuda.synchronize()``, ``.item()``,
  ``.tolist()``, ``.numpy()``, ``.cpu()``, printing: ``to_host``) calls
  ``raise_pending``, which raises the recorded error, naming the op, once. Values
  computed from the bad call on are not meaningful, as after torch's assertion.

The record is read only when a check ran since the last read, so a program that never
indexes pays nothing at its syncs.
"""

from __future__ import annotations

import numpy as np

from tensorplay import _device

__all__ = ["checked_index", "check_record", "host_sync", "raise_pending", "to_host"]

_records: dict = {}  # CUDA device id -> uint64[4] on it: op code (0: none), index, dim, size
_pending: set = set()  # devices with a check launched since their record was last read
_ops: list = []  # op code - 1 -> op name
_kernel = None
_capturing: list = []  # streams a CUDA graph capture is running on (cuda/graphs.py)
_checks_launched = 0  # how many checks were queued (a captured graph replays its own)

# ``record`` is a raw input, so CuPy declares it const: the kernel writes through a cast
_BODY = """
if (idx < 0 || idx >= n) {
    unsigned long long *rec = (unsigned long long *)&record[0];
    if (atomicCAS(rec, 0ULL, (unsigned long long)code) == 0ULL) {
        rec[1] = (unsigned long long)(long long)idx;
        rec[2] = (unsigned long long)dim;
        rec[3] = (unsigned long long)n;
    }
    safe = 0;
} else {
    safe = idx;
}
"""


def _bounds_kernel():
    global _kernel
    if _kernel is None:
        cp = _device.cupy_or_raise()
        _kernel = cp.ElementwiseKernel(
            "T idx, int64 n, raw uint64 record, int64 code, int64 dim",
            "int64 safe",
            _BODY,
            "tensorplay_index_bounds",
        )
    return _kernel


def _code(name: str) -> int:
    if name not in _ops:
        _ops.append(name)
    return _ops.index(name) + 1


def checked_index(idx, n: int, name: str, dim: int):
    """CuPy index array ``idx`` with every entry outside ``[0, n)`` replaced by 0; the
    first such entry is recorded on the device and raised at the next synchronisation.
    (No wrapping of negative indices: gather, scatter and index_select refuse them.)"""
    record, code = check_record(idx.device.id, name)
    return _bounds_kernel()(idx, n, record, code, dim)


def check_record(dev: int, name: str):
    """``dev``'s record and ``name``'s op code, for a kernel about to check on the device
    (this one's, or an op's own, ``_cuda_index``): it is read at the next synchronisation."""
    global _checks_launched
    record = _records.get(dev)
    if record is None:
        prepare(dev)
        record = _records[dev]
    _pending.add(dev)
    _checks_launched += 1
    return record, _code(name)


def prepare(dev: int) -> None:
    """Create ``dev``'s record now (a graph capture cannot: its zero-fill would only be
    captured, never run)."""
    if dev not in _records:
        cp = _device.cupy_or_raise()
        with cp.cuda.Device(dev):
            _records[dev] = cp.zeros(4, dtype=cp.uint64)


def host_sync(what: str) -> None:
    """Refuse a host synchronisation while a CUDA graph is being captured, naming it: the
    capture would break with a CUDA error that does not say which call synchronised."""
    if _capturing:
        raise RuntimeError(
            f"{what} waits for the GPU on the host, which is not allowed while a CUDA graph "
            "is being captured (tp.cuda.graph / make_graphed_callables): a captured region "
            "must not read device values (.item(), .tolist(), .cpu(), printing, bool(), "
            "ops with data-dependent shapes such as nonzero or masked selection) or "
            "synchronise; move it out of the captured region"
        )


def raise_pending() -> None:
    """Raise the error a device-side check recorded since the last call, if any."""
    if _capturing:
        return  # nothing ran yet: the checks recorded so far are only captured
    while _pending:
        dev = _pending.pop()
        record = _records[dev]
        cp = _device.cupy_or_raise()
        with cp.cuda.Device(dev):
            # the check may have run on another stream than the one the caller synchronised
            cp.cuda.Device(dev).synchronize()
            code, index, dim, size = (int(v) for v in record.get().view(np.int64))
            if code:
                record.fill(0)
        if code:
            name = _ops[code - 1]
            raise RuntimeError(
                f"{name}(): index {index} is out of bounds for dimension {dim} with size "
                f"{size} (found on cuda:{dev} by a device-side check and reported at this "
                f"synchronisation; results computed from that {name} call on are not valid)"
            )


def to_host(arr) -> np.ndarray:
    """A CuPy array's values on the host (a synchronisation: pending device errors raise)."""
    host_sync("reading a CUDA tensor's values on the host")
    host = arr.get()
    raise_pending()
    return host
