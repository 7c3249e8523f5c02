"""Building shared libraries with tvm-ffi's engine, through TensorPlay's build cache.

tvm-ffi (``tvm_ffi.cpp.build_inline`` / ``build``) writes the sources and a ninja file
and runs the compiler. We add, around it: argument checks with clear errors, a cache
keyed by content whose entries are verified before loading (``_cache``), a lock so two
processes building the same extension both succeed, compiler errors surfaced in the
exception, CUDA toolkit/architecture discovery, and a progress line for slow builds.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shlex
import shutil
import sysconfig
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tensorplay.utils.cpp_jit import _cache, _cuda, _engine, _pch

logger = logging.getLogger("tensorplay.utils.cpp_jit")

# A build still running after this many seconds logs a warning-level progress line, so
# a long nvcc run is never silent even when logging is not configured.
SLOW_BUILD_S = 5.0

Sources = str | Sequence[str]
Functions = Sequence[str] | Mapping[str, str] | str

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Characters that cannot appear in a line of build.ninja at all (a newline would start a
# new ninja statement), and, for paths tvm-ffi writes into build lines unescaped, the
# ones ninja gives a meaning there ('$' variables, ' ' separates paths).
_NOT_IN_NINJA = re.compile(r"[\x00-\x1f\x7f]")
_NOT_IN_BUILD_LINE = re.compile(r"[\x00-\x1f\x7f$ ]")
# g++/clang (file:line:col: error:) and nvcc (file(line): error:) diagnostics
_DIAGNOSTIC = re.compile(r"^\S+?(?::\d+(?::\d+)?:|\(\d+\):) (?:fatal )?error\b.*$", re.M)

# os.environ is process-wide and tvm-ffi reads CUDA settings from it: builds in this
# process take turns (other processes are kept apart by the cache entry's file lock).
_build_lock = threading.Lock()


class BuildError(RuntimeError):
    """A cpp_jit build failed; the message starts with the compiler's own errors."""


# ---- argument checks ----------------------------------------------------------------------------


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"cpp_jit: name must be a C identifier (letters, digits, '_'; it names the "
            f"library file and its cache entry), got {name!r}"
        )
    return name


def _join_sources(arg: str, value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and all(isinstance(s, str) for s in value):
        return "\n".join(value)
    raise TypeError(
        f"cpp_jit: {arg} must be a string of C++ source or a list of strings, "
        f"got {type(value).__name__}"
    )


def _function_map(functions: object) -> dict[str, str]:
    if functions is None:
        return {}
    if isinstance(functions, str):
        items: list[tuple[object, object]] = [(functions, "")]
    elif isinstance(functions, Mapping):
        items = list(functions.items())
    elif isinstance(functions, Sequence):
        items = [(f, "") for f in functions]
    else:
        raise TypeError(
            "cpp_jit: functions must be a list of function names or a mapping "
            f"name -> docstring, got {type(functions).__name__}"
        )
    out: dict[str, str] = {}
    for fname, doc in items:
        if not isinstance(fname, str) or not _NAME.match(fname):
            raise ValueError(f"cpp_jit: functions: {fname!r} is not a C++ function name")
        if not isinstance(doc, str):
            raise TypeError(f"cpp_jit: functions: the docstring of {fname!r} must be a str")
        out[fname] = doc
    return out


def _str_list(arg: str, value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(s, str) for s in value):
        raise TypeError(f"cpp_jit: {arg} must be a list of strings, got {value!r}")
    return list(value)


def _files(arg: str, value: object) -> list[Path]:
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if value is None:
        value = []
    if not isinstance(value, Sequence) or not all(isinstance(v, (str, os.PathLike)) for v in value):
        raise TypeError(f"cpp_jit: {arg} must be a list of source file paths, got {value!r}")
    paths = [Path(v).resolve() for v in value]
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"cpp_jit: {arg}: no such source file: {p}")
        check_build_path(arg, p)
    return paths


def check_build_path(arg: str, path: Path) -> Path:
    """``path`` if tvm-ffi can write it into a ninja build line as it is, else ValueError."""
    bad = _NOT_IN_BUILD_LINE.search(str(path))
    if bad:
        raise ValueError(
            f"cpp_jit: {arg}: the path {str(path)!r} contains {bad.group()!r}, which the build "
            "file (ninja) cannot take in a path; use a path without spaces, '$' or control "
            "characters"
        )
    return path


def _shell_flag(arg: str, flag: str) -> str:
    """One compiler/linker argument as a ninja variable holds it for ``/bin/sh``: quoted
    for the shell (``;``, backquotes and spaces stay literal), ``$`` escaped for ninja."""
    bad = _NOT_IN_NINJA.search(flag)
    if bad:
        raise ValueError(
            f"cpp_jit: {arg}: {flag!r} contains the control character {bad.group()!r}, which "
            "cannot go into the build file; pass one flag per list item, without newlines"
        )
    return shlex.quote(flag).replace("$", "$$")


# ---- the build ----------------------------------------------------------------------------------


class _Options:
    """Flags shared by the inline and the file-based builds, validated and normalised.

    Each list item is one argument (as in ``subprocess.run``), never split by a shell.
    tvm-ffi joins flags with spaces into build.ninja, whose commands run through
    ``/bin/sh``: ``engine_kwargs`` hands it every flag already quoted, and include
    folders as ``-I`` flags (tvm-ffi would write those unquoted).
    """

    def __init__(self, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths):
        self.cflags = [f.strip() for f in _str_list("extra_cflags", extra_cflags)]
        self.cuda_cflags = [f.strip() for f in _str_list("extra_cuda_cflags", extra_cuda_cflags)]
        self.ldflags = [f.strip() for f in _str_list("extra_ldflags", extra_ldflags)]
        self.include_paths = [
            str(Path(p).resolve()) for p in _str_list("extra_include_paths", extra_include_paths)
        ]
        # refuse an unusable flag now, not after a cache lookup
        for arg, flags in (
            ("extra_cflags", self.cflags),
            ("extra_cuda_cflags", self.cuda_cflags),
            ("extra_ldflags", self.ldflags),
            ("extra_include_paths", self.include_paths),
        ):
            for flag in flags:
                _shell_flag(arg, flag)

    def link_cuda_runtime(self) -> None:
        # tvm-ffi links -lcudart without an rpath; record where it is so the library
        # loads without LD_LIBRARY_PATH (the toolkit path also enters the cache key).
        home = check_build_path("CUDA_HOME (the CUDA toolkit)", _cuda.cuda_home())
        for lib in ("lib64", "lib"):
            if (home / lib).is_dir():
                self.ldflags.append(f"-Wl,-rpath,{(home / lib).resolve()}")

    def key_parts(self, with_cuda: bool) -> dict:
        tvm_ffi = _engine.engine()
        return {
            "cflags": self.cflags,
            "cuda_cflags": self.cuda_cflags,
            "ldflags": self.ldflags,
            "include_paths": self.include_paths,
            # the headers and the library we link against come with the engine
            "engine": getattr(tvm_ffi, "__version__", "?"),
            "cxx": os.environ.get("CXX", "c++"),
            "platform": sysconfig.get_platform(),
            "cuda_arch": _cuda.cuda_arch_list() if with_cuda else None,
        }

    def engine_kwargs(self, pch_flags: Sequence[str] = ()) -> dict:
        # the precompiled preamble changes compile time, not the library: not in the key
        includes = [f"-I{p}" for p in self.include_paths]
        cflags = [*pch_flags, *self.cflags, *includes]
        cuda_cflags = [*self.cuda_cflags, *includes]
        return {
            "extra_cflags": [_shell_flag("extra_cflags", f) for f in cflags],
            "extra_cuda_cflags": [_shell_flag("extra_cuda_cflags", f) for f in cuda_cflags],
            "extra_ldflags": [_shell_flag("extra_ldflags", f) for f in self.ldflags],
            "extra_include_paths": [],
        }


@contextlib.contextmanager
def _build_environment(with_cuda: bool) -> Iterator[None]:
    """PATH gets ninja; CUDA builds get the toolkit and the architecture tvm-ffi reads."""
    _engine.ensure_ninja()
    saved = {k: os.environ.get(k) for k in ("CUDA_HOME", "TVM_FFI_CUDA_ARCH_LIST")}
    if with_cuda:
        os.environ["CUDA_HOME"] = str(_cuda.cuda_home())
        os.environ["TVM_FFI_CUDA_ARCH_LIST"] = _cuda.cuda_arch_list()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _progress(name: str, what: str) -> Iterator[None]:
    """Log the build; if it runs long, say so while it runs (never silence)."""
    start = time.perf_counter()
    logger.info("cpp_jit: building %r (%s)", name, what)
    done = threading.Event()

    def remind() -> None:
        while not done.wait(SLOW_BUILD_S):
            logger.warning(
                "cpp_jit: still building %r (%s), %.0f s so far",
                name,
                what,
                time.perf_counter() - start,
            )

    watcher = threading.Thread(target=remind, daemon=True, name=f"cpp_jit-build-{name}")
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
    logger.info("cpp_jit: built %r in %.2f s", name, time.perf_counter() - start)


def _build_error(name: str, build_dir: Path, exc: BaseException) -> BuildError:
    log = str(exc)
    with contextlib.suppress(OSError):
        (build_dir / "build.log").write_text(log)
    diagnostics = "\n".join(m.group(0) for m in _DIAGNOSTIC.finditer(log))
    head = f"cpp_jit: building {name!r} failed"
    if diagnostics:
        head += f"; the compiler reported:\n{diagnostics}"
    return BuildError(
        f"{head}\n(sources, build.ninja and the full log are kept in {build_dir})\n"
        f"--- full build output ---\n{log}"
    )


def _cached_or_built(
    entry: Path, name: str, key: str, what: str, run_engine, *, always_run: bool
) -> str:
    """The verified library of ``entry``, building it (under the entry's lock) if needed.

    ``run_engine(build_dir) -> path`` does the actual build. ``always_run`` lets ninja
    re-check a source tree (headers it includes may have changed) even on a cache hit.
    """
    library = f"{name}.so"
    if not always_run:
        hit = _cache.verified(entry, library, key)
        if hit is not None:
            return str(hit)
    with _build_lock, _cache.locked(entry):
        if not always_run:
            # another process (or thread) may have finished the same build meanwhile
            hit = _cache.verified(entry, library, key)
            if hit is not None:
                return str(hit)
        build_dir = entry / "build"
        build_dir.mkdir(exist_ok=True)
        try:
            with _progress(name, what):
                built = Path(run_engine(build_dir))
        except RuntimeError as exc:  # tvm-ffi reports ninja/compiler failures this way
            raise _build_error(name, build_dir, exc) from None
        current = _cache.verified(entry, library, key)
        if current is not None and _cache.file_sha256(built) == _cache.file_sha256(current):
            return str(current)  # ninja found nothing to do
        # Inline builds need nothing from the build folder once the library is
        # published; source-tree builds keep it so ninja can tell what changed.
        publish_from = entry / f".{library}.new"
        if always_run:
            shutil.copy2(built, publish_from)
        else:
            shutil.move(str(built), publish_from)
            shutil.rmtree(build_dir, ignore_errors=True)
        return str(_cache.publish(entry, publish_from, library, key))


def _entry(name: str, key: str, build_directory: object) -> Path:
    """The folder the build runs in (its path goes into build.ninja) and is cached in."""
    if build_directory is None:
        return check_build_path(
            "the build cache folder (TENSORPLAY_CACHE_DIR)", _cache.entry_dir(name, key)
        )
    if not isinstance(build_directory, (str, os.PathLike)):
        raise TypeError(f"cpp_jit: build_directory must be a path, got {build_directory!r}")
    path = check_build_path("build_directory", Path(build_directory).expanduser().resolve())
    _cache.make_private_dir(path)
    _cache.check_private(path, "build_directory")
    return path


def build_inline(
    name: str,
    cpp_sources: Sources | None = None,
    cuda_sources: Sources | None = None,
    functions: Functions | None = None,
    *,
    extra_cflags: Sequence[str] | None = None,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    build_directory: str | os.PathLike[str] | None = None,
) -> str:
    """Compile C++ (and CUDA) source strings into a shared library; returns its path.

    The common tvm-ffi headers are prepended and every name in ``functions`` is exported
    (``TVM_FFI_DLL_EXPORT_TYPED_FUNC``). The result is cached by content: the same
    arguments return the cached library without compiling.

    Raises:
        RuntimeError: tvm-ffi is not installed (the message says how to install it).
        BuildError: the compiler failed; the message holds its ``file:line: error`` lines.
        ValueError/TypeError: a malformed argument (the message names it).
    """
    tvm_ffi = _engine.engine()
    check_name(name)
    cpp = _join_sources("cpp_sources", cpp_sources)
    cuda = _join_sources("cuda_sources", cuda_sources)
    if cpp is None and cuda is None:
        raise ValueError("cpp_jit: pass cpp_sources and/or cuda_sources (both are empty)")
    fmap = _function_map(functions)
    opts = _Options(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths)
    with_cuda = cuda is not None
    if with_cuda:
        opts.link_cuda_runtime()
    key = _cache.content_key(
        {"kind": "inline", "name": name, "cpp": cpp, "cuda": cuda, "functions": fmap}
        | opts.key_parts(with_cuda)
    )

    def run_engine(build_dir: Path) -> str:
        def compile_(pch_flags: list[str]) -> str:
            return tvm_ffi.cpp.build_inline(
                name=name,
                cpp_sources=cpp,
                cuda_sources=cuda,
                functions=fmap,
                build_directory=str(build_dir),
                **opts.engine_kwargs(pch_flags),
            )

        with _build_environment(with_cuda):
            return _pch.build_with(compile_) if cpp is not None else compile_([])

    what = "C++ and CUDA" if with_cuda and cpp is not None else ("CUDA" if with_cuda else "C++")
    entry = _entry(name, key, build_directory)
    return _cached_or_built(entry, name, key, what, run_engine, always_run=False)


def build(
    name: str,
    cpp_files: Sequence[str | os.PathLike[str]] | str | None = None,
    cuda_files: Sequence[str | os.PathLike[str]] | str | None = None,
    *,
    extra_cflags: Sequence[str] | None = None,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    build_directory: str | os.PathLike[str] | None = None,
) -> str:
    """Compile source files into a shared library; returns its path.

    The files carry their own headers and export macros (``TVM_FFI_DLL_EXPORT_TYPED_FUNC``);
    nothing is generated for them. The cache entry is keyed by the files' paths and
    contents; ninja re-checks the headers they include on every call.
    """
    tvm_ffi = _engine.engine()
    check_name(name)
    cpp = _files("cpp_files", cpp_files)
    cuda = _files("cuda_files", cuda_files)
    if not cpp and not cuda:
        raise ValueError("cpp_jit: pass cpp_files and/or cuda_files (both are empty)")
    opts = _Options(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths)
    with_cuda = bool(cuda)
    if with_cuda:
        opts.link_cuda_runtime()
    contents = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in cpp + cuda}
    key = _cache.content_key(
        {
            "kind": "files",
            "name": name,
            "cpp": [str(p) for p in cpp],
            "cuda": [str(p) for p in cuda],
            "contents": contents,
        }
        | opts.key_parts(with_cuda)
    )

    def run_engine(build_dir: Path) -> str:
        with _build_environment(with_cuda):
            return tvm_ffi.cpp.build(
                name=name,
                cpp_files=[str(p) for p in cpp] or None,
                cuda_files=[str(p) for p in cuda] or None,
                build_directory=str(build_dir),
                **opts.engine_kwargs(),
            )

    entry = _entry(name, key, build_directory)
    return _cached_or_built(entry, name, key, "source files", run_engine, always_run=True)
