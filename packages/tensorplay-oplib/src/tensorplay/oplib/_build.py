"""Building an op library: YAML + kernel sources -> a folder a wheel carries.

``build(schema, output)`` checks the definition (``LibrarySpec``) and that the sources
export every kernel it names, compiles the kernels through ``cpp_jit.build`` (tvm-ffi's
ABI, TensorPlay's build cache, CUDA toolkit discovery), checks each compiled kernel's
signature against its schema, and writes ``output/_tensorplay_oplib_<namespace>/``:

* ``oplib.json``: the checked definition, the TensorPlay / tvm-ffi versions and platform
  it was built for, the shared library of each device and why a declared device was not
  built;
* ``<namespace>_cpu.so`` (the C++ sources) and ``<namespace>_cuda.so`` (the CUDA sources,
  when a CUDA toolchain is there);
* ``__init__.py``: the same few lines for every library, ``register()`` (the entry point)
  loading the folder it sits in.

With ``check=True`` each operator then runs ``opcheck(test_utils="all")`` on sample
arguments (its ``check:`` entry, else defaults) in a fresh process; a failure raises
``OplibError`` naming the operator and the line. Whatever fails, nothing is written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tensorplay as tp
from tensorplay.oplib import _sources
from tensorplay.oplib._errors import OplibError, Where
from tensorplay.oplib._loader import GUARD, METADATA, tvm_ffi_version
from tensorplay.oplib._spec import FORMAT, LibrarySpec
from tensorplay.utils import cpp_jit

__all__ = ["build", "package_name", "STUB"]

# Compile flags every kernel source gets: tvm-ffi then exports each kernel's signature,
# which the build checks against the schema.
_METADATA_FLAG = "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"
_GUARD_SOURCE = Path(__file__).with_name("_guard.cc")
CUDA_MODES = ("auto", "on", "off")

STUB = '''"""An operator library built by tensorplay.oplib (see oplib.json next to this file).

Installed, it registers its operators on first access to tp.ops.<namespace>, through its
entry point in the group tensorplay.oplibs.
"""

from pathlib import Path

from tensorplay.oplib import load


def register():
    """Register this library's operators (the entry point)."""
    return load(Path(__file__).parent)
'''


def package_name(namespace: str) -> str:
    """The import name of the package a built library lives in."""
    return f"_tensorplay_oplib_{namespace}"


def _resolve_sources(
    spec: LibrarySpec, base: Path, override: Mapping[str, Sequence[str]] | None, where: Where
) -> dict[str, list[Path]]:
    """Device -> the source files compiled for it (cpu: C++ files, cuda: CUDA files)."""
    if override and spec.sources:
        raise OplibError(
            where,
            "the sources are declared twice, in the YAML file ('sources:') and by the build "
            "(the hatch hook's 'sources'); declare them in one place",
        )
    given = dict(override or spec.sources)
    out: dict[str, list[Path]] = {"cpu": [], "cuda": []}
    for kind, files in given.items():
        for f in files:
            path = (base / f).resolve()
            if not path.is_file():
                raise OplibError(where, f"source file {f!r} not found (looked for {path})")
            device = "cuda" if kind == "cuda" or path.suffix == ".cu" else "cpu"
            out[device].append(path)
    return out


def build(
    schema: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    check: bool = False,
    cuda: str = "auto",
    sources: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """Build the op library defined by the YAML file ``schema`` into ``output``.

    Args:
        schema: the YAML definition (``namespace``, ``sources``, ``ops``).
        output: the folder that receives ``_tensorplay_oplib_<namespace>/`` (replaced when the
            build succeeds; a failed build leaves it as it was).
        check: run ``opcheck(test_utils="all")`` on every operator after building.
        cuda: ``"auto"`` builds the CUDA kernels when a CUDA toolkit is found (and records
            why not otherwise), ``"on"`` requires it, ``"off"`` skips them.
        sources: ``{"cpp": [...], "cuda": [...]}``, relative to the YAML file, when the YAML
            has no ``sources:`` (the hatch hook passes its own).

    Returns the built package folder. Raises ``OplibError`` (``file:line: ns::op:``) for a
    bad definition, a kernel that is not exported or does not fit its schema, or a failed
    check; ``cpp_jit.BuildError`` with the compiler's messages when compiling fails.
    """
    if cuda not in CUDA_MODES:
        raise ValueError(f"build: cuda must be one of {CUDA_MODES}, got {cuda!r}")
    path = Path(schema).resolve()
    spec = LibrarySpec.from_yaml(path)
    where = Where(str(path))
    files = _resolve_sources(spec, path.parent, sources, where)
    for op in spec.ops:
        _sources.check_exports(op, files)

    out = Path(output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    package = out / package_name(spec.namespace)
    # built beside the target and swapped in when complete: a failed build leaves the
    # previous library (if any) as it was, and never half a library
    staging = Path(tempfile.mkdtemp(prefix=f".{package.name}.", dir=out))
    try:
        libraries, not_built = _compile(spec, files, staging, cuda)
        _check_kernels(spec, staging, libraries)
        meta = _metadata(spec, path, libraries, not_built)
        (staging / METADATA).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        (staging / "__init__.py").write_text(STUB, encoding="utf-8")
        if check:
            _run_checks(spec, staging, path)
        if package.exists():
            shutil.rmtree(package)
        staging.rename(package)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return package


def _compile(
    spec: LibrarySpec, files: dict[str, list[Path]], package: Path, cuda: str
) -> tuple[dict[str, str], dict[str, str]]:
    ns = spec.namespace
    libraries: dict[str, str] = {}
    not_built: dict[str, str] = {}
    wants_cuda = any("cuda" in op.kernels for op in spec.ops)
    if files["cpu"]:
        built = cpp_jit.build(
            f"oplib_{ns}_cpu",
            [*files["cpu"], _GUARD_SOURCE],
            extra_cflags=[_METADATA_FLAG, *spec.cflags],
        )
        libraries["cpu"] = _publish(built, package, f"{ns}_cpu.so")
    if wants_cuda:
        reason = _cuda_unavailable(cuda, files["cuda"])
        if reason is None:
            try:
                built = cpp_jit.build(
                    f"oplib_{ns}_cuda",
                    [_GUARD_SOURCE],
                    files["cuda"],
                    extra_cflags=[_METADATA_FLAG, *spec.cflags],
                    extra_cuda_cflags=[_METADATA_FLAG, *spec.cuda_cflags],
                )
            except cpp_jit.BuildError:
                raise
            except RuntimeError as exc:  # no toolkit / no GPU architecture: said by cpp_jit
                if cuda == "on":
                    raise
                reason = str(exc)
            else:
                libraries["cuda"] = _publish(built, package, f"{ns}_cuda.so")
        if reason is not None:
            not_built["cuda"] = reason
            print(f"tensorplay.oplib: {ns}: CUDA kernels not built: {reason}", file=sys.stderr)
    return libraries, not_built


def _cuda_unavailable(mode: str, cuda_files: list[Path]) -> str | None:
    """Why the CUDA kernels are not to be built (None: build them)."""
    if mode == "off":
        return "the CUDA build was switched off (cuda='off' / --cuda off)"
    if not cuda_files:
        return "the library has no CUDA sources"
    if mode == "on":
        return None
    toolkit = shutil.which("nvcc") or os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if not toolkit:
        return "no CUDA toolkit at build time (nvcc not on PATH, CUDA_HOME not set)"
    return None


def _publish(built: str, package: Path, name: str) -> str:
    shutil.copy2(built, package / name)
    return name


def _check_kernels(spec: LibrarySpec, package: Path, libraries: Mapping[str, str]) -> None:
    """Each compiled kernel exists and has the signature its schema asks for."""
    modules = {d: cpp_jit.load_module(package / f).ffi_module for d, f in libraries.items()}
    for device, mod in modules.items():
        if not mod.implements_function(GUARD):
            raise OplibError(str(package / libraries[device]), f"the build lost {GUARD}")
    for op in spec.ops:
        for device, fn in op.kernels.items():
            mod = modules.get(device)
            if mod is None:
                continue
            if not mod.implements_function(fn):
                raise OplibError(
                    op.where.at(op._lines.get("kernels")),
                    f"the compiled {device} library has no kernel {fn!r} although a source "
                    "exports it (is the export inside an #if that is off?)",
                )
            _sources.check_signature(op, device, mod.get_function_metadata(fn), libraries[device])


def _metadata(
    spec: LibrarySpec, schema: Path, libraries: dict[str, str], not_built: dict[str, str]
) -> dict[str, Any]:
    ops = []
    for op in spec.ops:
        entry = op.to_json()
        entry["devices"] = [d for d in op.kernels if d in libraries]
        ops.append(entry)
    return {
        "format": FORMAT,
        "namespace": spec.namespace,
        "tensorplay_version": tp.__version__,
        "tvm_ffi_version": tvm_ffi_version(),
        "platform": sysconfig.get_platform(),
        "schema_file": schema.name,
        "libraries": libraries,
        "not_built": not_built,
        "ops": ops,
    }


def _run_checks(spec: LibrarySpec, package: Path, schema: Path) -> None:
    """opcheck every operator in a fresh process (registering here would leave the ops
    defined in the caller's process)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tensorplay.oplib._check", str(package)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if proc.returncode != 0 and not proc.stdout.strip():
        raise OplibError(str(schema), f"the checks could not run:\n{proc.stderr[-4000:]}")
    failures = json.loads(proc.stdout or "[]")
    if failures:
        first = failures[0]
        op = spec.op(first["op"])
        line = op.line
        blamed = first.get("input")
        what = first["test"]
        if blamed in op.derivatives:
            line = op.derivatives[blamed].where.line
            what += f" of the derivative for {blamed!r}"
        details = "; ".join(f"{f['op']}: {f['test']}: {f['error']}" for f in failures[1:])
        raise OplibError(
            Where(str(schema), line, op.qualname),
            f"opcheck failed ({what}): {first['error']}"
            + (f"\nother failures: {details}" if details else ""),
        )
