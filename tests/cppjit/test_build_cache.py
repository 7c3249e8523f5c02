"""The build cache (content keys, verification, concurrency), build errors and file builds."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tensorplay.utils import cpp_jit
from tensorplay.utils.cpp_jit import _allocator, _build, _engine

pytestmark = pytest.mark.usefixtures("engine")

ANSWER = "int64_t answer() { return %d; }"


def _no_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any attempt to compile fail loudly: what follows must be served from the cache."""

    def refuse(*args, **kwargs):
        raise AssertionError("the compiler ran although the cache should have answered")

    monkeypatch.setattr(_engine.engine().cpp, "build_inline", refuse)
    monkeypatch.setattr(_engine.engine().cpp, "build", refuse)


def _run(code: str, **env: str) -> str:
    full_env = {**os.environ, **env}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_same_sources_reuse_the_cached_library(monkeypatch):
    first = cpp_jit.build_inline("cache_same", cpp_sources=ANSWER % 1, functions=["answer"])
    _allocator.ensure_installed()  # built on the first load; not what this test is about
    _no_compiler(monkeypatch)
    assert cpp_jit.build_inline("cache_same", cpp_sources=ANSWER % 1, functions=["answer"]) == first
    assert (
        cpp_jit.load_inline("cache_same", cpp_sources=ANSWER % 1, functions=["answer"]).answer()
        == 1
    )


def test_different_content_gets_a_different_entry():
    a = cpp_jit.build_inline("cache_diff", cpp_sources=ANSWER % 1, functions=["answer"])
    b = cpp_jit.build_inline("cache_diff", cpp_sources=ANSWER % 2, functions=["answer"])
    c = cpp_jit.build_inline(
        "cache_diff", cpp_sources=ANSWER % 1, functions=["answer"], extra_cflags=["-O1"]
    )
    assert len({a, b, c}) == 3


def test_cache_folder_honours_the_env_var_and_is_private(tmp_path, monkeypatch):
    root = tmp_path / "deep" / "cache"
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(root))
    path = Path(cpp_jit.build_inline("cache_env", cpp_sources=ANSWER % 3, functions=["answer"]))
    assert path.is_relative_to(root / "cpp_jit")
    for folder in (root, root / "cpp_jit", path.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


@pytest.mark.parametrize("damage", ["planted", "truncated", "stale"])
def test_untrusted_library_is_rebuilt_never_loaded(damage, caplog):
    name = f"cache_{damage}"
    path = Path(cpp_jit.build_inline(name, cpp_sources=ANSWER % 7, functions=["answer"]))
    good = path.read_bytes()
    manifest = path.parent / "manifest.json"
    if damage == "planted":  # someone else's file, and no manifest vouching for it
        manifest.unlink()
        path.write_bytes(b"\x7fELF not a library")
    elif damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    else:  # an entry recorded for different content
        record = json.loads(manifest.read_text())
        record["key"] = "0" * 64
        manifest.write_text(json.dumps(record))
    with caplog.at_level(logging.INFO, logger="tensorplay.utils.cpp_jit"):
        again = cpp_jit.build_inline(name, cpp_sources=ANSWER % 7, functions=["answer"])
    assert again == str(path)
    assert f"building {name!r}" in caplog.text
    assert path.read_bytes() == good  # the same compiler output as before
    assert (
        _run(
            f"from tensorplay.utils import cpp_jit; print(cpp_jit.load_module({again!r}).answer())"
        )
        == "7"
    )


def test_two_processes_building_the_same_extension_both_succeed(tmp_path):
    token = uuid.uuid4().int % 10**6  # content nobody has built before
    code = f"""
        from tensorplay.utils import cpp_jit
        mod = cpp_jit.load_inline("race", cpp_sources={ANSWER % token!r}, functions=["answer"])
        print(mod.answer())
    """
    env = {**os.environ, "TENSORPLAY_CACHE_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip() == str(token)
    entries = [e for e in (tmp_path / "cpp_jit").iterdir() if e.name.startswith("race_")]
    assert len(entries) == 1
    record = json.loads((entries[0] / "manifest.json").read_text())
    assert record["size"] == (entries[0] / "race.so").stat().st_size
    # and a third process loads the result without compiling
    assert _run(code, TENSORPLAY_CACHE_DIR=str(tmp_path)) == str(token)


def test_failed_build_reports_the_compilers_file_line_error():
    bad = "int64_t broken() {\n  return undeclared_thing;\n}\n"
    with pytest.raises(cpp_jit.BuildError) as info:
        cpp_jit.build_inline("cache_broken", cpp_sources=bad, functions=["broken"])
    msg = str(info.value)
    assert msg.startswith("cpp_jit: building 'cache_broken' failed; the compiler reported:")
    first = msg.splitlines()[1]
    assert "main.cpp:" in first and ": error:" in first and "undeclared_thing" in first
    assert isinstance(info.value, RuntimeError)


def test_slow_builds_say_what_they_are_doing(monkeypatch, caplog):
    monkeypatch.setattr(_build, "SLOW_BUILD_S", 0.2)
    with caplog.at_level(logging.INFO, logger="tensorplay.utils.cpp_jit"):
        cpp_jit.build_inline("cache_slow", cpp_sources=ANSWER % (uuid.uuid4().int % 10**6))
    assert "building 'cache_slow' (C++)" in caplog.text
    assert "still building 'cache_slow'" in caplog.text
    assert "built 'cache_slow' in" in caplog.text


def test_build_directory_holds_the_library(tmp_path):
    path = cpp_jit.build_inline(
        "cache_dir", cpp_sources=ANSWER % 4, functions=["answer"], build_directory=tmp_path / "b"
    )
    assert Path(path) == tmp_path / "b" / "cache_dir.so"


@pytest.mark.parametrize(
    ("kwargs", "exc", "msg"),
    [
        ({"name": "my-ext", "cpp_sources": "int x;"}, ValueError, "name must be a C identifier"),
        ({"name": "e"}, ValueError, "pass cpp_sources and/or cuda_sources"),
        ({"name": "e", "cpp_sources": 42}, TypeError, "cpp_sources must be a string"),
        ({"name": "e", "cpp_sources": "", "functions": 3}, TypeError, "functions must be a list"),
        ({"name": "e", "cpp_sources": "", "functions": ["a b"]}, ValueError, "'a b' is not"),
        ({"name": "e", "cpp_sources": "", "extra_cflags": "-O3"}, None, None),
    ],
)
def test_bad_arguments_are_named(kwargs, exc, msg):
    if exc is None:  # a single flag string is accepted as a one-element list
        assert cpp_jit.build_inline(**kwargs).endswith("e.so")
        return
    with pytest.raises(exc, match=msg):
        cpp_jit.build_inline(**kwargs)


def test_load_module_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no library at .*nothing.so"):
        cpp_jit.load_module(tmp_path / "nothing.so")


def test_source_files_build_and_headers_are_rechecked(tmp_path):
    (tmp_path / "consts.h").write_text("#define K 10\n")
    src = tmp_path / "kern.cc"
    src.write_text(
        textwrap.dedent(
            """
            #include <tvm/ffi/function.h>
            #include "consts.h"
            int64_t plus_k(int64_t x) { return x + K; }
            TVM_FFI_DLL_EXPORT_TYPED_FUNC(plus_k, plus_k);
            """
        )
    )
    mod = cpp_jit.load("filekern", cpp_files=[str(src)])
    assert mod.plus_k(1) == 11
    (tmp_path / "consts.h").write_text("#define K 20\n")
    path = cpp_jit.build("filekern", cpp_files=[src])
    # a fresh process sees the rebuilt library (this one keeps the mapped old one)
    assert (
        _run(
            f"from tensorplay.utils import cpp_jit; print(cpp_jit.load_module({path!r}).plus_k(1))"
        )
        == "21"
    )
    with pytest.raises(FileNotFoundError, match="no such source file"):
        cpp_jit.build("filekern", cpp_files=[tmp_path / "missing.cc"])


def test_unwritable_cache_folder_is_a_clear_error(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(PermissionError, match="point TENSORPLAY_CACHE_DIR at a writable folder"):
        cpp_jit.build_inline("cache_unwritable", cpp_sources=ANSWER % 1)
