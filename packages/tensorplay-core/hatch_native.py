"""Build ``tensorplay._C`` (csrc/_C.cpp, pybind11 + the numpy C API) for tensorplay-core.

Used two ways:

* as hatchling's build hook (``[tool.hatch.build.targets.wheel.hooks.custom]`` in
  pyproject.toml): ``pip install ./packages/tensorplay-core`` (wheel or editable) compiles
  the module; a wheel gets it as a platform-specific file, an editable install gets it
  next to the sources in ``src/tensorplay/``;
* as a script, to rebuild in place while developing (or on a machine without hatchling):
  ``python packages/tensorplay-core/hatch_native.py``.

No compiler, or a compiler that fails: the install still succeeds, pure Python (the
native helpers all have Python twins), and says so loudly; ``python -m tensorplay``
reports it later. ``TENSORPLAY_REQUIRE_NATIVE=1`` turns that into an error (CI sets it);
``TENSORPLAY_PURE_PYTHON=1`` at install time skips the build.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "csrc" / "_C.cpp"
PACKAGE = HERE / "src" / "tensorplay"
COMPILERS = ("c++", "g++", "clang++")


class NativeBuildError(RuntimeError):
    """The native module could not be built (the message says why and what to do)."""


def module_filename() -> str:
    return "_C" + sysconfig.get_config_var("EXT_SUFFIX")


def find_compiler() -> str:
    cxx = os.environ.get("CXX")
    candidates = [cxx] if cxx else list(COMPILERS)
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    looked = f"$CXX={cxx!r}" if cxx else ", ".join(COMPILERS)
    raise NativeBuildError(
        f"no C++ compiler found (looked for {looked}). Install one (Debian/Ubuntu: "
        "`apt install g++`; macOS: `xcode-select --install`) and reinstall tensorplay-core "
        "to get the native fast paths"
    )


def include_dirs() -> list[str]:
    try:
        import numpy
        import pybind11
    except ImportError as e:  # the build requirements in pyproject.toml provide both
        raise NativeBuildError(f"building tensorplay._C needs pybind11 and numpy ({e})") from e
    return [sysconfig.get_paths()["include"], pybind11.get_include(), numpy.get_include()]


def compile_module(out_dir: Path) -> Path:
    """Compile csrc/_C.cpp into ``out_dir``; return the module's path."""
    cxx = find_compiler()
    target = out_dir / module_filename()
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden"]
    cmd += [f"-I{d}" for d in include_dirs()]
    cmd += [str(SOURCE), "-o", str(tmp)]
    if sys.platform == "darwin":
        cmd.insert(1, "-undefined")
        cmd.insert(2, "dynamic_lookup")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise NativeBuildError(
            f"compiling {SOURCE.name} failed ({' '.join(cmd[:2])} ...):\n{proc.stderr[-4000:]}"
        )
    os.replace(tmp, target)  # atomic: a concurrent import never sees half a file
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
