"""Loading a built op library: check it was built for this TensorPlay, register its ops.

A built library is a folder (inside an installed wheel: the package
``_tensorplay_oplib_<namespace>``) holding ``oplib.json`` (the checked definition and what
it was built with) and one shared library per device. ``load`` reads the JSON, refuses a
library built for another metadata format, TensorPlay version, tvm-ffi ABI or platform,
reads the definition the build checked (``LibrarySpec.from_json``, which trusts it) and
registers every operator with ``tensorplay.library.custom_op``: the generated operators are
custom ops, so opcheck, graph capture, the profiler, overrides and modes treat them as any
other.

The shared libraries are opened on the first call of a kernel of their device, not at
registration: registering stays cheap (importing tvm-ffi is not), and a CPU-only machine
never opens the CUDA library.
"""

from __future__ import annotations

import json
import sysconfig
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tensorplay as tp
from tensorplay import library
from tensorplay._extension import distribution_version
from tensorplay.oplib._errors import OplibError
from tensorplay.oplib._kernels import make_fake, make_kernel, missing_kernel
from tensorplay.oplib._spec import DEVICES, FORMAT, LibrarySpec, OpSpec

__all__ = ["OpLibrary", "load", "METADATA", "check_built_for_this", "loaded"]

METADATA = "oplib.json"
GUARD = "tensorplay_oplib_guard"  # the catch-all compiled into every library (_guard.cc)
_lock = threading.Lock()
_loaded: dict[str, OpLibrary] = {}


def tvm_ffi_version() -> str | None:
    """The installed apache-tvm-ffi's version, read from its metadata: importing tvm-ffi
    takes far longer than loading a library."""
    return distribution_version("apache-tvm-ffi")


def _abi(version: str | None) -> str | None:
    """tvm-ffi's C ABI is kept within a minor series: ``0.1.15.post2`` -> ``0.1``."""
    return None if version is None else ".".join(version.split(".")[:2])


def check_built_for_this(meta: Mapping[str, Any], where: str) -> None:
    """Refuse a library built for another TensorPlay, tvm-ffi ABI, platform or format."""
    ns = meta.get("namespace", "?")
    rebuild = (
        "Rebuild it here: `pip wheel <its project>` (hatch) or `python -m tensorplay.oplib "
        "build <its yaml> -o dist/`, and reinstall"
    )
    if meta.get("format") != FORMAT:
        raise ImportError(
            f"op library {ns!r} ({where}) has metadata format {meta.get('format')!r}; this "
            f"tensorplay-oplib reads format {FORMAT}. {rebuild}"
        )
    built = meta.get("tensorplay_version")
    if built != tp.__version__:
        raise ImportError(
            f"op library {ns!r} ({where}) was built for TensorPlay {built}, but this is "
            f"TensorPlay {tp.__version__}; a library runs only with the TensorPlay it was "
            f"built for. {rebuild}"
        )
    here = tvm_ffi_version()
    built_ffi = meta.get("tvm_ffi_version")
    if _abi(here) != _abi(built_ffi):
        raise ImportError(
            f"op library {ns!r} ({where}) was built with apache-tvm-ffi {built_ffi} (ABI "
            f"{_abi(built_ffi)}), but apache-tvm-ffi {here or 'is not installed'} is here "
            f"(ABI {_abi(here)}). {rebuild}"
        )
    if meta.get("platform") != sysconfig.get_platform():
        raise ImportError(
            f"op library {ns!r} ({where}) was built for platform {meta.get('platform')}, and "
            f"this is {sysconfig.get_platform()}. {rebuild}"
        )


class _SharedLibraries:
    """The library's compiled kernels per device, opened on first use."""

    def __init__(self, folder: Path, files: Mapping[str, str], namespace: str):
        self.folder, self.files, self.namespace = folder, dict(files), namespace
        self._modules: dict[str, Any] = {}
        self._guard: dict[str, Any] = {}
        self._lock = threading.Lock()

    def function(self, device: str, name: str, op: OpSpec) -> Callable[..., Any]:
        with self._lock:
            mod = self._modules.get(device)
            if mod is None:
                mod = self._open(device)
        if not mod.implements_function(name):
            raise OplibError(
                op.where.at(op._lines.get("kernels")),
                f"the {device} library {self.files[device]} has no function {name!r}; the "
                "library is damaged or was not built from this definition: rebuild it",
            )
        return self._guard[device](
            mod.get_function(name), f"{op.qualname} ({device} kernel {name})"
        )

    def _open(self, device: str) -> Any:
        # tvm-ffi is the engine tensorplay-cppjit builds with (a dependency of
        # tensorplay-oplib); it is imported here, at the first kernel call, because importing
        # it takes far longer than registering a whole library
        import tvm_ffi  # noqa: PLC0415

        path = self.folder / self.files[device]
        if not path.is_file():
            raise FileNotFoundError(
                f"op library {self.namespace!r}: its {device} library {path} is missing; "
                "reinstall or rebuild the library"
            )
        mod = tvm_ffi.load_module(str(path))
        self._guard[device] = mod.get_function(GUARD)
        self._modules[device] = mod
        return mod


def _call_on_stream(fn: Callable[..., Any], args: tuple) -> Any:
    # the kernel reads the stream with TVMFFIEnvGetStream: TensorPlay's current one
    import tvm_ffi  # noqa: PLC0415 - loaded already: the kernel came from it

    device = next(a.device for a in args if isinstance(a, tp.Tensor))
    index = device.index if device.index is not None else tp.cuda.current_device()
    stream = tp.cuda.current_stream(device).cuda_stream
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", index), stream):
        return fn(*args)


class OpLibrary:
    """A loaded op library: ``namespace``, ``path``, ``ops`` (name -> the registered
    operator, also ``tp.ops.<namespace>.<name>``), ``devices`` (name -> device types with a
    compiled kernel) and the build ``metadata``."""

    def __init__(self, path: Path, meta: dict[str, Any], spec: LibrarySpec):
        self.path, self.metadata, self.spec = path, meta, spec
        self.namespace = spec.namespace
        self.ops: dict[str, Any] = {}
        self.devices: dict[str, list[str]] = {}

    def __repr__(self) -> str:
        return f"<op library {self.namespace!r} ({len(self.ops)} ops) from {self.path}>"


def load(path: str | Path) -> OpLibrary:
    """Register the operators of the library built into folder ``path`` (idempotent).

    Raises ``ImportError`` for a library built for another TensorPlay / tvm-ffi ABI /
    platform, ``OplibError`` for a definition that fails its checks, ``RuntimeError`` when
    another library already defines the namespace.
    """
    folder = Path(path).resolve()
    file = folder / METADATA
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{folder} is not a built op library (no {METADATA}); build one with "
            "`python -m tensorplay.oplib build ops.yaml -o dist/`"
        ) from None
    check_built_for_this(meta, str(folder))
    with _lock:
        known = _loaded.get(meta["namespace"])
        if known is not None:
            if known.path == folder:
                return known
            raise RuntimeError(
                f"op library {meta['namespace']!r} is already loaded from {known.path}; cannot "
                f"load another library with the same namespace from {folder}"
            )
        spec = LibrarySpec.from_json(meta, meta.get("schema_file", str(file)))
        lib = OpLibrary(folder, meta, spec)
        shared = _SharedLibraries(folder, meta.get("libraries", {}), spec.namespace)
        not_built = dict(meta.get("not_built", {}))
        for op in spec.ops:
            _register(lib, op, shared, not_built)
        _bind_formulas(lib)
        _loaded[spec.namespace] = lib
        return lib


def loaded() -> dict[str, OpLibrary]:
    """The op libraries loaded in this process, by namespace."""
    return dict(_loaded)


def _register(lib: OpLibrary, op: OpSpec, shared: _SharedLibraries, not_built: dict) -> None:
    kernels: dict[str, Callable[..., Any]] = {}
    built = []
    for device in DEVICES:
        name = op.kernels.get(device)
        if name is not None and device in shared.files:
            built.append(device)

            def function(device: str = device, name: str = name) -> Callable[..., Any]:
                return shared.function(device, name, op)

            stream = _call_on_stream if device == "cuda" else None
            kernels[device] = make_kernel(op.qualname, op.schema, op.fake, function, stream)
        else:
            kernels[device] = missing_kernel(op.schema, _missing(op, device, not_built))
    first = kernels.pop("cpu")
    defined = library.custom_op(
        op.qualname,
        first,
        mutates_args=op.schema.mutated,
        device_types="cpu",
        schema=op.schema.text,
    )
    for device, kernel in kernels.items():
        defined.register_kernel(device, kernel)
    if op.doc:
        defined.__doc__ = op.doc
    defined.register_fake(make_fake(op.qualname, op.schema, op.fake))
    lib.ops[op.name] = defined
    lib.devices[op.name] = built


def _missing(op: OpSpec, device: str, not_built: Mapping[str, str]) -> str:
    declared = sorted(op.kernels)
    if device in op.kernels:
        why = not_built.get(device, "it was not built")
        return (
            f"{op.qualname} has no {device} kernel in this build: {why}. Rebuild the library "
            f"where the {device} toolchain is available"
        )
    return (
        f"{op.qualname} has no kernel for device {device!r}; its definition "
        f"({op.where.file}:{op.line}) declares kernels for {declared}. Add a {device} "
        "kernel under 'kernels:' and rebuild the library"
    )


def _bind_formulas(lib: OpLibrary) -> None:
    """Register each operator's autograd (its formulas are read on first use, see
    ``_autograd``)."""
    for op in lib.spec.ops:
        if op.has_derivatives:
            setup, backward = _autograd(op, lib.ops)
            lib.ops[op.name].register_autograd(backward, setup_context=setup)
        elif op.schema.returns:
            lib.ops[op.name].register_autograd(_no_derivatives(op))


def _no_derivatives(op: OpSpec) -> Callable[..., Any]:
    message = (
        f"{op.qualname} has no derivatives ({op.where.file}:{op.line}); add a formula per "
        "differentiable input under 'derivatives:' and rebuild the library, or call it on "
        "detached inputs (x.detach()) where no gradient is needed"
    )

    def backward(ctx: Any, *grads: Any) -> tuple:
        raise RuntimeError(message)

    return backward


def _autograd(op: OpSpec, ops: Mapping[str, Any]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``setup_context`` saves what the formulas use; ``backward`` evaluates them."""
    args = op.schema.args
    pos = {a.name: i for i, a in enumerate(args)}
    plan: list[tuple] = []  # (saved tensors, saved values, keep results, formulas), on first use

    def prepare() -> tuple:
        # The formulas are parsed, checked and compiled by the first call that records
        # autograd: loading a library must stay cheap, and a formula may call any operator
        # of the library, so all of them must exist by then. Preparing twice (two threads)
        # gives the same plan.
        if not plan:
            derivatives = op.derivatives
            for expr in derivatives.values():
                if expr.fn is None:
                    expr.bind(ops)
            used = {n for e in derivatives.values() for n in e.names}
            plan.append(
                (
                    [a.name for a in args if a.is_tensor and a.name in used],
                    [a.name for a in args if not a.is_tensor and a.name in used],
                    bool(used & {"result", "results"}),
                    [(i, derivatives.get(a.name)) for i, a in enumerate(args)],
                )
            )
        return plan[0]

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        saved_tensors, saved_values, keep_results, _ = prepare()
        outs = tuple(output) if isinstance(output, tuple) else (output,)
        tensors = [inputs[pos[n]] for n in saved_tensors]
        ctx.save_for_backward(*tensors, *(outs if keep_results else ()))
        ctx.oplib_values = {n: inputs[pos[n]] for n in saved_values}

    def backward(ctx: Any, *grads: Any) -> tuple:
        saved_tensors, _, _, formulas = prepare()
        saved = ctx.saved_tensors
        env = dict(zip(saved_tensors, saved))
        env.update(ctx.oplib_values)
        results = tuple(saved[len(saved_tensors) :])
        env.update(
            grad=grads[0], grads=grads, results=results, result=results[0] if results else None
        )
        needs = ctx.needs_input_grad
        return tuple(
            None if f is None or not needs[i] else f.fn(*[env[n] for n in f.names])
            for i, f in formulas
        )

    return setup_context, backward
