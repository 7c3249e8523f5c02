"""``python -m tensorplay`` (console script ``tensorplay``): versions and capabilities.

Every probe is isolated: it returns a line of text and never raises, and
subprocess probes have short timeouts. Optional packages are found with
``importlib.util.find_spec`` + ``importlib.metadata`` rather than imported:
importing tilelang, for one, puts its bundled ``tvm`` first on ``sys.path`` and
would change what the ``tvm`` probe sees. Whether an installed package (or
component) actually imports is then checked in a fresh subprocess each, in
parallel, so a broken or conflicting install shows its error here instead of
breaking this process; ``--no-import-check`` skips that for a fast report.

PyPI's unrelated ``tensorplay`` shares our import name: when it is installed (or is what
``import tensorplay`` gives), the report says so, with the fix, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# the package this command reports on (already imported to run this module; nothing imports
# this module back). Its other modules are imported by the probes, after main() has made sure
# that this ``tensorplay`` is ours: a foreign one may lack them.
import tensorplay
from tensorplay.utils import _install

__all__ = ["main", "collect"]

_PROBE_TIMEOUT = 10  # seconds for `tool --version`
_IMPORT_TIMEOUT = 60  # seconds for importing a heavy package in a subprocess

# (distribution, module that proves it is usable)
COMPONENTS = [
    ("tensorplay-core", "tensorplay"),
    ("tensorplay-library", "tensorplay.library"),
    ("tensorplay-compile", "tensorplay.compiler"),
    ("tensorplay-kernels", "tensorplay.kernels"),
    ("tensorplay-cppjit", "tensorplay.utils.cpp_jit"),
    ("tensorplay-nn", "tensorplay.nn"),
    ("tensorplay-oplib", "tensorplay.oplib"),
]

# (label, module, distributions that may provide it)
PACKAGES = [
    ("triton", "triton", ("triton",)),
    ("tilelang", "tilelang", ("tilelang",)),
    ("tvm", "tvm", ("apache-tvm",)),
    ("tvm-ffi", "tvm_ffi", ("apache-tvm-ffi",)),
    ("torch", "torch", ("torch",)),
]


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def _safe(probe, *args) -> str:
    try:
        return probe(*args)
    except Exception as e:  # noqa: BLE001 - a diagnostic command must never crash
        return f"probe failed: {type(e).__name__}: {e}"


def _run_in_subprocess(code: str, what: str) -> tuple[str | None, str]:
    """Run ``code`` in a fresh interpreter: (None, its stdout) when it works, else (why not, "")."""
    try:
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=_IMPORT_TIMEOUT,
            env=os.environ.copy(),
        )
    except subprocess.TimeoutExpired:
        return f"{what} timed out after {_IMPORT_TIMEOUT}s", ""
    if r.returncode == 0:
        return None, r.stdout
    return _last_line(r.stderr) or f"{what} exited with status {r.returncode}", ""


def _import_in_subprocess(module: str) -> str | None:
    """None if ``import module`` works in a fresh interpreter, else why not."""
    return _run_in_subprocess(f"import {module}", f"import {module}")[0]


# ---- probes --------------------------------------------------------------------------------------


def probe_package(module: str, dists: tuple, check_import: bool) -> str:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        return f"not installed: {e}"
    if spec is None:
        return f"not installed: No module named '{module}'"
    version = _dist_version(*dists) or getattr(spec, "version", None) or "version unknown"
    if check_import:
        why = _import_in_subprocess(module)
        if why is not None:
            return f"installed ({version}) but import fails: {why}"
    return f"available ({version})"


def probe_cuda() -> str:
    from tensorplay import cuda  # noqa: PLC0415 - only once we know this tensorplay is ours

    why = cuda.unavailable_reason()
    if why is not None:
        return f"not available: {why}"
    import cupy  # noqa: PLC0415 - present whenever CUDA is available

    rt = cupy.cuda.runtime
    n = rt.getDeviceCount()
    names = []
    for i in range(n):
        name = rt.getDeviceProperties(i)["name"]
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    v = rt.runtimeGetVersion()
    return (
        f"available (CuPy {cupy.__version__}, CUDA runtime {v // 1000}.{v % 1000 // 10}, "
        f"{n} device{'s' if n != 1 else ''}: {', '.join(names)})"
    )


def _tool_version(path: str, pick=_first_line) -> str:
    try:
        r = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return f"found at {path} but `--version` timed out after {_PROBE_TIMEOUT}s"
    except OSError as e:
        return f"found at {path} but cannot run: {e}"
    out = pick(r.stdout or r.stderr)
    if r.returncode != 0:
        return f"found at {path} but `--version` failed (status {r.returncode}): {out}"
    return f"available ({out}; {path})"


def probe_compiler() -> str:
    for name in ("g++", "c++", "clang++", "cc"):
        path = shutil.which(name)
        if path:
            return _tool_version(path)
    return "not found: none of g++, c++, clang++, cc is on PATH"


def probe_nvcc() -> str:
    path = shutil.which("nvcc")
    if path is None:
        for var in ("CUDA_HOME", "CUDA_PATH"):
            root = os.environ.get(var)
            if root and os.path.isfile(os.path.join(root, "bin", "nvcc")):
                path = os.path.join(root, "bin", "nvcc")
                break
    if path is None:
        return "not found: nvcc is not on PATH and CUDA_HOME/CUDA_PATH is not set"
    # nvcc's banner ends with "Cuda compilation tools, release 13.0, V13.0.48" and a build id
    return _tool_version(
        path,
        pick=lambda out: next(
            (ln.strip() for ln in out.splitlines() if "release" in ln), _last_line(out)
        ),
    )


def probe_ninja() -> str:
    path = shutil.which("ninja")
    if path is None:
        return "not found: ninja is not on PATH (pip install ninja); needed by tvm-ffi C++ JIT"
    return _tool_version(path)


def probe_component(dist: str, module: str, check_import: bool) -> str:
    version = _dist_version(dist)
    installed = f"installed ({version})" if version else "no distribution metadata"
    if dist == "tensorplay-core":
        return f"{installed}; import {module}: ok"  # we are running from it
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        spec, err = None, str(e)
    else:
        err = f"No module named '{module}'"
    if spec is None:
        return (
            f"{installed}; import {module}: not available: {err}; "
            f"pip install ./packages/{dist} (or --no-index --find-links dist/ {dist})"
        )
    # importing a component may import triton/tilelang/tvm: keep it out of this process
    why = _import_in_subprocess(module) if check_import else None
    return f"{installed}; import {module}: " + ("ok" if why is None else f"fails: {why}")


def probe_compile_backend(check_import: bool) -> str:
    """The backend ``tp.compile`` uses by default here, and why (tensorplay-compile decides
    whether its TVM backend can run: version range, a broken install, tilelang's tvm)."""
    if importlib.util.find_spec("tensorplay.compiler") is None:
        return "tensorplay-compile is not installed"
    if not check_import:
        return "not checked (--no-import)"
    code = "from tensorplay.compiler import tvm_status as s; t = s(); print(bool(t)); print(t)"
    why, out = _run_in_subprocess(code, "it")
    if why is not None:
        return f"checking TVM failed: {why}"
    usable, _, status = out.strip().partition("\n")
    return f"tvm: {status}" if usable == "True" else f"eager (TVM {status})"


def _oplib_metadata(module: str) -> dict:
    """The ``oplib.json`` of an installed op library's package, found without importing it
    (its entry point's module is a top-level package: tensorplay-oplib's wheels)."""
    spec = importlib.util.find_spec(module) if "." not in module else None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"its package {module!r} is not installed")
    folder = next(iter(spec.submodule_search_locations))
    with open(os.path.join(folder, "oplib.json"), encoding="utf-8") as f:
        return json.load(f)


def probe_oplibs() -> list[tuple[str, str]]:
    """Installed op libraries (entry-point group ``tensorplay.oplibs``): per namespace, the
    distribution, its operators with the devices they have kernels for, and whether it was
    built for this TensorPlay. Read from each library's metadata, nothing is loaded."""
    from tensorplay import _ops  # noqa: PLC0415 - only once we know this tensorplay is ours

    rows = []
    for namespace, eps in sorted(_ops.installed_libraries().items()):
        for ep in eps:
            dist = getattr(ep, "dist", None)
            who = f"{dist.name} {dist.version}" if dist is not None else ep.value
            try:
                meta = _oplib_metadata(ep.module)
            except (OSError, ValueError) as e:
                rows.append((namespace, f"{who}: metadata unreadable ({type(e).__name__}: {e})"))
                continue
            ops = [
                f"{op['schema'].split('(')[0]} [{', '.join(op.get('devices', [])) or 'no kernel'}]"
                for op in meta.get("ops", [])
            ]
            text = f"{who}: {len(ops)} ops: {', '.join(ops)}"
            for device, why in sorted(meta.get("not_built", {}).items()):
                text += f"; no {device} kernels: {why}"
            built = meta.get("tensorplay_version")
            if built != tensorplay.__version__:
                text += f"; UNUSABLE: built for TensorPlay {built}, rebuild it for this one"
            rows.append((namespace, text))
    return rows or [
        ("(none)", f"no op library installed (entry-point group {_ops.ENTRY_POINT_GROUP})")
    ]


# ---- report --------------------------------------------------------------------------------------


def probe_native() -> str:
    """Whether the native hot paths (tensorplay._C) run, or why the Python twins do."""
    from tensorplay import _native  # noqa: PLC0415 - only once we know this tensorplay is ours

    if _native.NATIVE is not None:
        return f"loaded ({_native.NATIVE.__file__})"
    return f"Python twins: {_native.REASON}"


def collect(check_imports: bool = True) -> dict:
    """All probe results as ``{section: [(label, text), ...]}`` (never raises)."""

    def version_of(module: str) -> str:
        return _dist_version(module.replace("_", "-"), module) or "version unknown"

    info = [
        ("version", tensorplay.__version__),
        (
            "location",
            ", ".join(getattr(tensorplay, "__path__", [os.path.dirname(tensorplay.__file__)])),
        ),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        ("platform", platform.platform()),
        ("numpy", _safe(version_of, "numpy")),
        ("ml_dtypes", _safe(version_of, "ml_dtypes")),
        ("native (_C)", _safe(probe_native)),
    ]
    with ThreadPoolExecutor(max_workers=8) as pool:
        comps = [
            (d, pool.submit(_safe, probe_component, d, m, check_imports)) for d, m in COMPONENTS
        ]
        caps = [("CUDA/CuPy", pool.submit(_safe, probe_cuda))]
        caps += [
            (label, pool.submit(_safe, probe_package, mod, dists, check_imports))
            for label, mod, dists in PACKAGES
        ]
        caps += [
            ("tp.compile default", pool.submit(_safe, probe_compile_backend, check_imports)),
            ("C/C++ compiler", pool.submit(_safe, probe_compiler)),
            ("nvcc", pool.submit(_safe, probe_nvcc)),
            ("ninja", pool.submit(_safe, probe_ninja)),
        ]
        foreign = pool.submit(_install.foreign_installs)
        oplibs = pool.submit(probe_oplibs)
        report = {
            "TensorPlay": info,
            "Components": [(k, f.result()) for k, f in comps],
            "Capabilities": [(k, f.result()) for k, f in caps],
        }
        try:
            report["Operator libraries"] = oplibs.result()
        except Exception as e:  # noqa: BLE001 - a diagnostic command must never crash
            report["Operator libraries"] = [("(error)", f"{type(e).__name__}: {e}")]
        try:
            found = foreign.result()
        except Exception as e:  # noqa: BLE001 - a diagnostic command must never crash
            found = [f"looking for a foreign `tensorplay` failed: {type(e).__name__}: {e}"]
        if found:
            report["Problems"] = [*found, f"Fix: {_safe(_install.fix)}"]
        return report


def format_report(report: dict) -> str:
    lines = []
    info = dict(report["TensorPlay"])
    lines.append(f"TensorPlay {info.pop('version')}")
    for section, rows in [("", list(info.items()))] + [
        (s, report[s]) for s in ("Components", "Capabilities", "Operator libraries") if s in report
    ]:
        if section:
            lines.append("")
            lines.append(f"{section}:")
        width = max(len(k) for k, _ in rows)
        lines.extend(f"  {k.ljust(width)} : {v}" for k, v in rows)
    if report.get("Problems"):
        lines += ["", "Problems (a `tensorplay` that is not ours):"]
        lines += [f"  {p}" for p in report["Problems"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tensorplay", description="Print TensorPlay's versions and capabilities."
    )
    parser.add_argument(
        "--no-import-check",
        action="store_true",
        help="only look packages up; do not import them (faster)",
    )
    args = parser.parse_args(argv)
    if not _install.core_is_ours():
        # the probes below would report on someone else's package
        print(_install.foreign_core_message("python -m tensorplay"), file=sys.stderr)
        return 1
    report = collect(check_imports=not args.no_import_check)
    print(format_report(report))
    return 1 if report.get("Problems") else 0


if __name__ == "__main__":
    sys.exit(main())
