"""Build tooling: ninja on PATH without a manual step, the precompiled preamble."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tensorplay.utils import cpp_jit
from tensorplay.utils.cpp_jit import _engine, _pch

pytestmark = pytest.mark.usefixtures("engine")


def test_ninja_from_the_pypi_package_is_put_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH, ninja included
    assert shutil.which("ninja") is None
    _engine.ensure_ninja()
    found = shutil.which("ninja")
    assert found is not None and os.access(found, os.X_OK)


def test_builds_work_with_ninja_missing_from_path(monkeypatch, tmp_path):
    # PATH holds the compiler tools and no ninja: a venv's python run by path, unactivated
    for tool in ("c++", "cc", "g++", "gcc", "ld", "as", "cp"):
        if shutil.which(tool):
            (tmp_path / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(tmp_path))
    mod = cpp_jit.load_inline(
        "toolchain_noninja", cpp_sources="int64_t f() { return 5; }", functions=["f"]
    )
    assert mod.f() == 5


def test_inline_builds_include_the_precompiled_preamble():
    flags = _pch.include_flags()
    if not flags:
        pytest.skip("the C++ compiler is not GCC: builds parse the headers")
    assert flags[0] == "-include"
    header = Path(flags[1])
    assert header.read_text() == _pch.PREAMBLE
    assert Path(f"{header}.gch").stat().st_size > 1_000_000


def test_damaged_precompiled_header_is_remade(monkeypatch):
    flags = _pch.include_flags()
    if not flags:
        pytest.skip("the C++ compiler is not GCC")
    gch = Path(f"{flags[1]}.gch")
    gch.write_bytes(b"truncated")
    assert _pch.include_flags() == flags
    record = json.loads((gch.parent / "manifest.json").read_text())
    assert gch.stat().st_size == record["size"] > 1_000_000
    mod = cpp_jit.load_inline(
        "toolchain_pch", cpp_sources="int64_t f() { return 6; }", functions=["f"]
    )
    assert mod.f() == 6


def test_non_gcc_compilers_build_without_it(monkeypatch):
    monkeypatch.setattr(_pch, "_gcc_version", lambda cxx: None)
    assert _pch.include_flags() == []
