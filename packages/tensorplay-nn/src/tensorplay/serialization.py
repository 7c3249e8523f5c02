"""Checkpoints: ``tp.save(obj, f)`` and ``tp.load(f)`` (distribution ``tensorplay-nn``).

A checkpoint is a `safetensors <https://github.com/huggingface/safetensors>`_ file: loading
one parses a JSON header and copies bytes, it never runs code (torch's pickle-based
``torch.load`` can). ``obj`` is any nesting of dicts (``OrderedDict`` kept as such, with a
module state dict's ``_metadata``), lists and tuples of tensors, ``None``, bools, ints,
floats, complex numbers, strings, ``tp.Size``, dtypes and devices; that covers a module's
``state_dict()``, an optimizer's (parameter groups, per-parameter state and step counts) and
a plain tensor.

- Every tensor is a safetensors entry named by its path in ``obj`` (``"fc.weight"`` for a
  state dict, ``"optim.state.0.exp_avg"`` inside nested dicts, a ``#2`` suffix where two
  paths would read the same), so PyTorch, JAX and numpy users can read the tensors with the
  ``safetensors`` package. Everything else, and each tensor's dtype, device and
  ``requires_grad``, is JSON in the file's ``__metadata__`` (key ``tensorplay.structure``).
- Values are saved, not memory layout: a non-contiguous tensor is written as its contiguous
  values, and tensors that shared memory (views of one base, tied weights) load as
  independent tensors with equal values. Re-tie shared weights after loading.
- Complex tensors are stored as real tensors with a trailing dimension of 2 (real,
  imaginary): older safetensors releases (0.4, which we support) have no complex dtype.
- ``tp.load`` also reads any plain safetensors file (e.g. one written by
  ``safetensors.torch.save_file(model.state_dict(), path)``): it returns ``{name: tensor}``,
  ready for the matching module's ``load_state_dict``.
- ``tp.load`` builds the whole object before returning it: a truncated or foreign file raises
  (naming the file) before anything could be assigned; ``Module.load_state_dict`` then checks
  every key and shape before it copies.
"""

from __future__ import annotations

import json
import math
import os
from collections import OrderedDict
from typing import IO, Any

import tensorplay as tp

# ImportError with the fix if `tensorplay` is PyPI's unrelated package, not our core
import tensorplay.utils._require_core as _require_core  # noqa: F401
from tensorplay import Tensor

__all__ = ["save", "load"]

_STRUCTURE = "tensorplay.structure"
_FORMAT = "tensorplay.format"
_FORMAT_VERSION = "1"

# safetensors' dtype codes <-> ours. Complex tensors travel as their real views.
_CODES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
}
_REAL_OF_COMPLEX = {"complex64": "float32", "complex128": "float64"}

# where loaded tensors go: a device (or its name), {saved location: new}, fn(tensor, location)
_MapLocation = Any


def _safetensors():
    try:
        import safetensors
        import safetensors.numpy
    except ImportError as e:  # a dependency of tensorplay-nn: only a broken install lacks it
        raise ImportError(
            "tp.save/tp.load need the safetensors package (a dependency of tensorplay-nn): "
            f"pip install safetensors ({e})"
        ) from e
    return safetensors


def _typename(obj: Any) -> str:
    t = type(obj)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _describe(f: Any) -> str:
    """How errors name the file: its path, or the file object's name."""
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    name = getattr(f, "name", None)
    return name if isinstance(name, str) else repr(f)


# ---- saving ---------------------------------------------------------------------------------


class _Writer:
    """Turns ``obj`` into a JSON tree, collecting its tensors as numpy arrays by name."""

    def __init__(self) -> None:
        self.arrays: dict[str, Any] = {}
        self.keep: list[Tensor] = []  # the tensors the arrays read, alive until written

    def name(self, path: str) -> str:
        base = path or "tensor"
        key, n = base, 1
        while key in self.arrays or key == "__metadata__":
            n += 1
            key = f"{base}#{n}"
        return key

    def encode(self, obj: Any, path: str, where: str) -> Any:
        if obj is None or type(obj) in (bool, str):
            return obj
        if type(obj) is int:
            return obj
        if type(obj) is float:
            return obj if math.isfinite(obj) else {"type": "float", "value": repr(obj)}
        if type(obj) is complex:
            return {
                "type": "complex",
                "real": self.encode(obj.real, path, where),
                "imag": self.encode(obj.imag, path, where),
            }
        if isinstance(obj, Tensor):
            return self.tensor(obj, path, where)
        if isinstance(obj, tp.dtype):
            return {"type": "dtype", "name": obj.name}
        if isinstance(obj, tp.device):
            return {"type": "device", "name": str(obj)}
        if type(obj) in (list, tuple, tp.Size):
            kind = {list: "list", tuple: "tuple", tp.Size: "Size"}[type(obj)]
            items = [
                self.encode(v, _join(path, str(i)), f"{where}[{i}]") for i, v in enumerate(obj)
            ]
            return {"type": kind, "items": items}
        if isinstance(obj, dict):  # a dict subclass (defaultdict...) loads as a dict
            items = []
            for k, v in obj.items():
                key = self.encode_key(k, where)
                items.append([key, self.encode(v, _join(path, str(k)), f"{where}[{k!r}]")])
            node: dict[str, Any] = {
                "type": "OrderedDict" if type(obj) is OrderedDict else "dict",
                "items": items,
            }
            meta = getattr(obj, "_metadata", None)
            if type(obj) is OrderedDict and isinstance(meta, dict):
                # a module state dict's per-module versions (load_state_dict reads them)
                node["metadata"] = self.encode(meta, path, f"{where}._metadata")
            return node
        raise TypeError(
            f"tp.save: cannot save {where} of type {_typename(obj)}; a checkpoint holds "
            "tensors, numbers, strings, None, dtypes, devices and dicts/lists/tuples of them "
            "(no arbitrary objects: loading must never run code). Save its state instead, "
            "e.g. module.state_dict() or optimizer.state_dict()"
        )

    def encode_key(self, k: Any, where: str) -> Any:
        n = len(self.arrays)
        key = self.encode(k, "", f"a key of {where}")
        if len(self.arrays) != n:
            raise TypeError(
                f"tp.save: {where} has a tensor in a dict key; use a number or a string key"
            )
        return key

    def tensor(self, t: Tensor, path: str, where: str) -> dict[str, Any]:
        if t.device.type == "meta":
            raise ValueError(
                f"tp.save: {where} is on the meta device (it has no values); "
                "materialize it (e.g. .to_empty(device='cpu') and initialise) before saving"
            )
        key = self.name(path)
        host = t.detach()
        if host.device.type != "cpu":
            host = host.cpu()
        host = host.contiguous()
        arr = host.numpy()
        if t.dtype.is_complex:  # (real, imag) pairs: safetensors 0.4 has no complex dtype
            arr = arr.view(_REAL_OF_COMPLEX[t.dtype.name]).reshape((*arr.shape, 2))
        self.keep.append(host)
        self.arrays[key] = arr
        node: dict[str, Any] = {
            "type": "tensor",
            "key": key,
            "dtype": t.dtype.name,
            "device": str(t.device),
        }
        if t.requires_grad:
            node["requires_grad"] = True
        if _is_parameter(t):
            node["parameter"] = True
        return node


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _is_parameter(t: Tensor) -> bool:
    return bool(t.__dict__.get("_is_param", False))


def save(obj: Any, f: str | os.PathLike | IO[bytes]) -> None:
    """Write ``obj`` to ``f`` (a path, or a file object opened for binary writing) as a
    safetensors checkpoint; ``tp.load(f)`` reads it back. See the module docstring for what
    ``obj`` may hold.

    >>> import io, tensorplay as tp
    >>> buf = io.BytesIO()
    >>> tp.save({"w": tp.ones(2), "step": 3}, buf)
    >>> _ = buf.seek(0)
    >>> tp.load(buf)["step"]
    3
    """
    st = _safetensors()
    writer = _Writer()
    tree = writer.encode(obj, "", "obj")
    metadata = {
        _FORMAT: _FORMAT_VERSION,
        _STRUCTURE: json.dumps(tree, allow_nan=False, separators=(",", ":")),
    }
    if isinstance(f, (str, os.PathLike)):
        st.numpy.save_file(writer.arrays, os.fspath(f), metadata=metadata)
    elif callable(getattr(f, "write", None)):
        f.write(st.numpy.save(writer.arrays, metadata=metadata))
    else:
        raise TypeError(f"tp.save(f=): expected a path or a binary file object, got {_typename(f)}")


# ---- loading --------------------------------------------------------------------------------


class _CheckpointError(RuntimeError):
    pass


def _read(f: Any, name: str) -> bytes:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return fh.read()
    if not callable(getattr(f, "read", None)):
        raise TypeError(f"tp.load(f=): expected a path or a binary file object, got {_typename(f)}")
    data = f.read()
    if isinstance(data, str):
        raise TypeError(f"tp.load: {name} is open in text mode; open it with mode 'rb'")
    return bytes(data)


def _not_a_checkpoint(name: str, data: bytes, err: Exception) -> _CheckpointError:
    if data[:4] == b"PK\x03\x04" or data[:1] == b"\x80":
        hint = (
            "it looks like a torch.save (pickle) file, which tp.load does not read because "
            "loading a pickle can run code; convert it in PyTorch with "
            "safetensors.torch.save_file(torch.load(path), 'model.safetensors')"
        )
    elif len(data) < 8:
        hint = f"it is {len(data)} bytes long, too short for a safetensors header"
    else:
        hint = "it is not a safetensors file, or it is truncated or corrupt"
    return _CheckpointError(f"tp.load: cannot read checkpoint {name!r}: {hint} ({err})")


def _header(data: bytes) -> dict:
    """The JSON header (already validated by safetensors' deserialize)."""
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n])


def _array(entry: dict, key: str, name: str):
    code = entry["dtype"]
    dt_name = _CODES.get(code)
    if dt_name is None:
        raise _CheckpointError(
            f"tp.load: tensor {key!r} of {name!r} has dtype {code}, which TensorPlay does not "
            f"support (supported: {', '.join(_CODES)}); convert it where it was written"
        )
    import numpy as np

    arr = np.frombuffer(entry["data"], dtype=getattr(tp, dt_name).np)
    return arr.reshape(entry["shape"]), dt_name


class _Reader:
    def __init__(self, name: str, arrays: dict, map_location: _MapLocation) -> None:
        self.name, self.arrays, self.map_location = name, arrays, map_location
        self.used: set[str] = set()

    def fail(self, what: str) -> _CheckpointError:
        return _CheckpointError(f"tp.load: checkpoint {self.name!r} is corrupt: {what}")

    def decode(self, node: Any) -> Any:
        if node is None or type(node) in (bool, int, float, str):
            return node
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise self.fail(f"unexpected structure entry {node!r}")
        kind = node["type"]
        if kind == "tensor":
            return self.tensor(node)
        if kind in ("list", "tuple", "Size"):
            items = [self.decode(v) for v in self.field(node, "items", list)]
            return {"list": list, "tuple": tuple, "Size": tp.Size}[kind](items)
        if kind in ("dict", "OrderedDict"):
            out: dict = {} if kind == "dict" else OrderedDict()
            for pair in self.field(node, "items", list):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise self.fail(f"a dict item is {pair!r}, not a [key, value] pair")
                key, value = self.decode(pair[0]), self.decode(pair[1])
                try:
                    out[key] = value
                except TypeError as e:  # only a hand-made file has an unhashable key
                    raise self.fail(f"dict key {key!r} cannot be a key ({e})") from e
            if "metadata" in node:
                out._metadata = self.decode(node["metadata"])  # type: ignore[attr-defined]
            return out
        if kind == "float":
            value = self.field(node, "value", str)
            if value not in ("nan", "inf", "-inf"):
                raise self.fail(f"float entry {value!r} is not nan, inf or -inf")
            return float(value)
        if kind == "complex":
            real, imag = self.decode(node.get("real")), self.decode(node.get("imag"))
            if not all(type(v) in (int, float) for v in (real, imag)):
                raise self.fail(f"complex entry {node!r} has no real and imag numbers")
            return complex(real, imag)
        if kind == "dtype":
            dt = getattr(tp, self.field(node, "name", str), None)
            if not isinstance(dt, tp.dtype):
                raise self.fail(f"unknown dtype {node['name']!r}")
            return dt
        if kind == "device":
            return tp.device(self.field(node, "name", str))
        raise self.fail(f"unknown entry type {kind!r} (written by a newer TensorPlay?)")

    def field(self, node: dict, key: str, typ: type) -> Any:
        value = node.get(key)
        if not isinstance(value, typ):
            raise self.fail(f"entry {node.get('type')!r} has no valid {key!r}")
        return value

    def tensor(self, node: dict) -> Tensor:
        key = self.field(node, "key", str)
        if key not in self.arrays:
            raise self.fail(f"tensor {key!r} is listed but not stored")
        arr, stored = self.arrays[key]
        dt_name = self.field(node, "dtype", str)
        real = _REAL_OF_COMPLEX.get(dt_name)
        if real is not None:
            if stored != real or arr.ndim == 0 or arr.shape[-1] != 2:
                raise self.fail(f"complex tensor {key!r} is stored as {stored} {arr.shape}")
            arr = arr.view(getattr(tp, dt_name).np).reshape(arr.shape[:-1])
        elif stored != dt_name:
            raise self.fail(f"tensor {key!r} is stored as {stored}, listed as {dt_name}")
        t = _place(tp.tensor(arr), key, self.field(node, "device", str), self)
        if node.get("parameter"):
            from tensorplay.nn.parameter import Parameter

            return Parameter(t, requires_grad=bool(node.get("requires_grad")))
        if node.get("requires_grad"):
            t.requires_grad_(True)
        return t


def _place(t: Tensor, key: str, location: str, reader: _Reader) -> Tensor:
    """``t`` (on the CPU) moved where ``map_location`` sends ``location``."""
    ml = reader.map_location
    target: Any = location
    if callable(ml) and not isinstance(ml, tp.device):
        moved = ml(t, location)
        if moved is not None:
            if not isinstance(moved, Tensor):
                raise TypeError(
                    f"tp.load(map_location=): the function returned {_typename(moved)} for "
                    f"tensor {key!r}; return a tensorplay Tensor (or None to keep it on "
                    f"{location!r})"
                )
            return moved
    elif isinstance(ml, dict):
        target = ml.get(location, location)
    elif ml is not None:
        target = ml
    device = tp.device(target) if isinstance(target, str) else target
    if not isinstance(device, tp.device):
        raise TypeError(
            "tp.load(map_location=): expected a device, a string, a dict of locations or a "
            f"function, got {_typename(target)}"
        )
    if device.type == "cpu":
        return t
    if device.type == "cuda" and not tp.cuda.is_available():
        raise RuntimeError(
            f"tp.load: tensor {key!r} of {reader.name!r} is to be loaded on {str(device)!r}, "
            "but CUDA is not available here; pass map_location='cpu' to load it on the CPU"
        )
    return t.to(device)


def load(
    f: str | os.PathLike | IO[bytes],
    map_location: _MapLocation = None,
    weights_only: bool = True,
) -> Any:
    """Read a checkpoint written by ``tp.save`` (or any safetensors file) from ``f``.

    ``map_location`` moves the tensors: a device or string (all of them), a dict from saved
    location to new one (``{"cuda:0": "cpu"}``), or ``fn(tensor, location)`` returning the
    tensor to use (None: keep ``location``). By default tensors go back to the device they
    were saved from; a plain safetensors file's tensors load on the CPU.

    ``weights_only`` is accepted for PyTorch compatibility and changes nothing: the format
    cannot hold code or arbitrary objects, so every load is weights-only.
    """
    if not isinstance(weights_only, bool):
        raise TypeError(f"tp.load(weights_only=): expected a bool, got {_typename(weights_only)}")
    st = _safetensors()
    name = _describe(f)
    data = _read(f, name)
    try:
        entries = st.deserialize(data)
        header = _header(data)
    except Exception as e:  # safetensors' errors say what is wrong; we say with which file
        raise _not_a_checkpoint(name, data, e) from e
    arrays = {key: _array(entry, key, name) for key, entry in entries}
    metadata = header.get("__metadata__") or {}
    structure = metadata.get(_STRUCTURE)
    reader = _Reader(name, arrays, map_location)
    if structure is None:  # a plain safetensors file: {name: tensor}, in file order
        order = sorted(arrays, key=lambda k: header[k]["data_offsets"][0])
        return {k: _place(tp.tensor(arrays[k][0]), k, "cpu", reader) for k in order}
    version = metadata.get(_FORMAT)
    if version != _FORMAT_VERSION:
        raise _CheckpointError(
            f"tp.load: checkpoint {name!r} has format version {version!r}; this TensorPlay "
            f"reads version {_FORMAT_VERSION}: upgrade tensorplay-nn"
        )
    try:
        tree = json.loads(structure)
    except ValueError as e:
        raise reader.fail(f"its {_STRUCTURE} metadata is not JSON ({e})") from e
    return reader.decode(tree)
