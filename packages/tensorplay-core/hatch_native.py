"""Build ``tensorplay._C`` (csrc/_C.cpp, pybind11 + the numpy C API) for tensorplay-core.

Used two ways:

* as hatchling's build hook (``[tool.hatch.build.targets.wheel.hooks.custom]`` in
  pyproject.toml): ``pip install ./packages/tensorplay-core`` (wheel or editable) compiles
  the module; a wheel gets it as a platform-specific file (tagged for this interpreter;
  ``auditwheel``/cibuildwheel turn that into a manylinux wheel), an editable install gets it
  next to the sources in ``src/tensorplay/``;
* as a script, to rebuild in place while developing:
  ``python packages/tensorplay-core/hatch_native.py``.

hatchling stays the build front end; the compile itself goes through setuptools'
``build_ext`` with pybind11's ``Pybind11Extension``, so the compiler, its flags and the
link step are the platform's own (``sysconfig``'s compiler and ``-DNDEBUG -O3``,
``CC``/``CXX``/``CFLAGS``/``LDFLAGS``, macOS ``ARCHFLAGS`` and deployment target as
cibuildwheel sets them, MSVC on Windows) instead of a command line written here.

No compiler, or a compiler that fails: the install still succeeds, pure Python (the
native helpers all have Python twins), and says so loudly; ``python -m tensorplay``
reports it later. ``TENSORPLAY_REQUIRE_NATIVE=1`` turns that into an error (CI and the
wheel builds set it); ``TENSORPLAY_PURE_PYTHON=1`` at build time skips the build (the
``py3-none-any`` fallback wheel).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "_C.cpp"
PACKAGE = HERE / "src" / "tensorplay"


class NativeBuildError(RuntimeError):
    """The native module could not be built (the message says why and what to do)."""


NO_COMPILER_HINT = (
    "Install a C++17 compiler (Debian/Ubuntu: `apt install g++`; macOS: "
    "`xcode-select --install`; Windows: Visual Studio Build Tools) and reinstall "
    "tensorplay-core to get the native fast paths"
)


def _extension():  # type: ignore[no-untyped-def]
    try:
        import numpy
        from pybind11.setup_helpers import Pybind11Extension
    except ImportError as e:  # the build requirements in pyproject.toml provide them
        raise NativeBuildError(
            f"building tensorplay._C needs pybind11, numpy and setuptools ({e})"
        ) from e
    return Pybind11Extension(
        "tensorplay._C",
        [str(SOURCE)],
        include_dirs=[numpy.get_include()],
        # dlopen for cuda_launch (part of libc from glibc 2.34; a separate library before)
        libraries=["dl"] if sys.platform.startswith("linux") else [],
        cxx_std=17,
    )


def compile_module(out_dir: Path) -> Path:
    """Compile csrc/_C.cpp into ``out_dir``; return the module's path."""
    ext = _extension()
    from pybind11.setup_helpers import build_ext
    from setuptools import Distribution
    from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tensorplay-native-") as tmp:
        command = build_ext(Distribution({"name": "tensorplay-core", "ext_modules": [ext]}))
        command.build_lib = os.path.join(tmp, "lib")
        command.build_temp = os.path.join(tmp, "obj")
        command.ensure_finalized()
        try:
            command.run()
        except (CCompilerError, CompileError, LinkError, ExecError, PlatformError, OSError) as e:
            raise NativeBuildError(
                f"compiling {SOURCE.name} failed ({e}). {NO_COMPILER_HINT}"
            ) from e
        [built] = command.get_outputs()
        target = out_dir / Path(built).name
        staged = target.with_name(target.name + f".{os.getpid()}.tmp")
        shutil.copyfile(built, staged)
        os.replace(staged, target)  # atomic: a concurrent import never sees half a file
    return target


def _warn(message: str) -> None:
    bar = "=" * 78
    print(f"\n{bar}\ntensorplay-core: {message}\n{bar}\n", file=sys.stderr, flush=True)


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # used as a script without hatchling installed
    BuildHookInterface = object  # type: ignore[assignment,misc]


class NativeBuildHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    PLUGIN_NAME = "tensorplay-native"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        if os.environ.get("TENSORPLAY_PURE_PYTHON") == "1":
            _warn("TENSORPLAY_PURE_PYTHON=1: installing without tensorplay._C (pure Python)")
            return
        editable = version == "editable"
        out_dir = PACKAGE if editable else Path(self.directory) / "native-build"
        try:
            built = compile_module(out_dir)
        except NativeBuildError as e:
            if os.environ.get("TENSORPLAY_REQUIRE_NATIVE") == "1":
                raise
            _warn(f"installing WITHOUT tensorplay._C (pure Python, slower dispatch): {e}")
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if not editable:
            build_data["force_include"][str(built)] = f"tensorplay/{built.name}"


if __name__ == "__main__":
    try:
        print(compile_module(PACKAGE))
    except NativeBuildError as err:
        sys.exit(f"error: {err}")
