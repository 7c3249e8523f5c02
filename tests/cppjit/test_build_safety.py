"""What user strings and other users cannot do to a build: run shell commands or inject
ninja statements through flags and paths, plant a library in a cache folder they can
write, or break every later build with a damaged precompiled header."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tensorplay.utils import cpp_jit
from tensorplay.utils.cpp_jit import _cache, _pch

pytestmark = pytest.mark.usefixtures("engine")

ANSWER = "int64_t answer() { return %d; }"

# ---- 22: flags and paths reach ninja's /bin/sh as data, never as commands -------------------

STRINGIFY = r"""
#include <string>
#define TP_STR2(...) #__VA_ARGS__
#define TP_STR(x) TP_STR2(x)
std::string x_value() { return TP_STR(TP_FLAG_X); }
std::string y_value() { return TP_STR(TP_FLAG_Y); }
"""


def test_shell_metacharacters_in_flags_reach_the_compiler_verbatim(tmp_path):
    marker = tmp_path / "pwned"
    x = f"1;touch {marker};true"
    y = f"$(touch {marker})"
    mod = cpp_jit.load_inline(
        "flags_verbatim",
        cpp_sources=STRINGIFY,
        functions=["x_value", "y_value"],
        extra_cflags=[f"-DTP_FLAG_X={x}", f"-DTP_FLAG_Y={y}"],
        extra_ldflags=[f"-Wl,-rpath,/nonexistent;touch {marker}"],
    )
    assert not marker.exists()  # the shell ran no command
    assert mod.x_value() == x and mod.y_value() == y  # and the compiler got every character


@pytest.mark.parametrize(
    "arg", ["extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths"]
)
def test_newline_in_a_flag_is_refused_naming_the_argument(arg, tmp_path):
    marker = tmp_path / "pwned"
    value = f"-O2\nrule x\n  command = touch {marker}"
    with pytest.raises(ValueError, match=rf"cpp_jit: {arg}: .* contains the control character"):
        cpp_jit.build_inline("flags_newline", cpp_sources=ANSWER % 1, **{arg: [value]})
    assert not marker.exists()


def test_include_folder_with_spaces_and_semicolons_works(tmp_path):
    folder = tmp_path / "my headers;echo oops"
    folder.mkdir()
    (folder / "k.h").write_text("#define K 5\n")
    mod = cpp_jit.load_inline(
        "include_quoted",
        cpp_sources="#include <k.h>\nint64_t k() { return K; }",
        functions=["k"],
        extra_include_paths=[str(folder)],
    )
    assert mod.k() == 5


@pytest.mark.parametrize("bad", ["with space", "with$dollar", "with\nnewline"])
def test_source_path_ninja_cannot_take_is_refused(bad, tmp_path):
    src = tmp_path / f"{bad}.cc"
    src.write_text("int x;\n")
    with pytest.raises(ValueError, match=r"cpp_jit: cpp_files: the path .* contains"):
        cpp_jit.build("bad_path", cpp_files=[src])


def test_build_directory_ninja_cannot_take_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"cpp_jit: build_directory: the path .* contains '\\n'"):
        cpp_jit.build_inline(
            "bad_dir", cpp_sources=ANSWER % 1, build_directory=tmp_path / "a\nbuild b: phony"
        )
    assert not (tmp_path / "a\nbuild b: phony").exists()


# ---- 24: cache folders other users can write are refused ------------------------------------

# a library whose mere loading leaves a trace: it must never be loaded
PLANTED = r"""
#include <cstdio>
static int planted = [] {
  if (FILE* f = std::fopen(PLANTED_MARKER, "w")) std::fclose(f);
  return 0;
}();
int64_t answer() { return 666; }
"""


def test_planted_library_in_a_world_writable_build_directory_is_never_loaded(tmp_path):
    shared = tmp_path / "shared"
    good = Path(
        cpp_jit.build_inline(
            "planted_target", cpp_sources=ANSWER % 1, functions=["answer"], build_directory=shared
        )
    )
    # another user swaps in their library and recomputes the manifest to match it
    marker = tmp_path / "loaded"
    evil = cpp_jit.build_inline(
        "planted_target",
        cpp_sources=PLANTED,
        functions=["answer"],
        extra_cflags=[f'-DPLANTED_MARKER="{marker}"'],
    )
    shutil.copy(evil, good)
    manifest = json.loads((shared / _cache.MANIFEST).read_text())
    manifest.update(sha256=_cache.file_sha256(good), size=good.stat().st_size)
    (shared / _cache.MANIFEST).write_text(json.dumps(manifest))
    os.chmod(shared, 0o777)  # which they could, because the folder is world-writable
    with pytest.raises(PermissionError, match=r"refusing build_directory .*writable by its group"):
        cpp_jit.load_inline(
            "planted_target", cpp_sources=ANSWER % 1, functions=["answer"], build_directory=shared
        )
    assert not marker.exists()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_group_or_world_writable_cache_folder_is_refused(mode, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    (root / "cpp_jit").mkdir(parents=True)
    os.chmod(root / "cpp_jit", mode)
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(root))
    with pytest.raises(PermissionError, match="refusing the build cache folder") as info:
        cpp_jit.build_inline("unsafe_cache", cpp_sources=ANSWER % 1, functions=["answer"])
    assert "writable by its group or by everyone" in str(info.value)
    assert "TENSORPLAY_CACHE_DIR" in str(info.value)
    assert os.listdir(root / "cpp_jit") == []  # nothing was built there


def test_folder_above_the_cache_writable_by_others_is_refused(tmp_path, monkeypatch):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # others could rename our cache away and put theirs in place
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(open_dir / "cache"))
    with pytest.raises(PermissionError, match=rf"{re.escape(str(open_dir))} is writable by"):
        cpp_jit.build_inline("unsafe_parent", cpp_sources=ANSWER % 1)


def test_sticky_world_writable_folder_above_the_cache_is_accepted(tmp_path, monkeypatch):
    sticky = tmp_path / "tmp_like"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # as /tmp: others cannot rename or delete what we own
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(sticky / "cache"))
    root = _cache.cache_root()
    assert root == sticky / "cache" / "cpp_jit" and (root.stat().st_mode & 0o777) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder owned by another user needs root")
def test_cache_folder_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    (root / "cpp_jit").mkdir(parents=True, mode=0o700)
    os.chown(root / "cpp_jit", 12345, 12345)
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(root))
    with pytest.raises(PermissionError, match="is owned by uid 12345, not you"):
        cpp_jit.build_inline("foreign_cache", cpp_sources=ANSWER % 1)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder owned by another user needs root")
def test_cache_entry_owned_by_another_user_is_refused(cache_dir):
    path = Path(cpp_jit.build_inline("foreign_entry", cpp_sources=ANSWER % 2))
    os.chown(path.parent, 12345, 12345)
    try:
        with pytest.raises(PermissionError, match="refusing the build cache entry"):
            cpp_jit.load_inline("foreign_entry", cpp_sources=ANSWER % 2)
    finally:
        os.chown(path.parent, 0, 0)


# ---- 24: the precompiled header is trusted by content, and heals ----------------------------


def _gch(root: Path) -> Path:
    (found,) = (root / "cpp_jit").glob(f"pch_*/{_pch.HEADER}.gch")
    return found


def _damage(path: Path) -> str:
    """Flip 4 KB in the middle, keeping the size and the modification time; the new hash."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    start = len(data) // 3
    data[start : start + 4096] = bytes(b ^ 0xFF for b in data[start : start + 4096])
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return _cache.file_sha256(path)


def _recorded(gch: Path) -> str | None:
    manifest = gch.parent / _cache.MANIFEST
    return json.loads(manifest.read_text())["sha256"] if manifest.exists() else None


@pytest.mark.slow
def test_damaged_precompiled_header_is_rebuilt(tmp_path, monkeypatch):
    if not _pch.include_flags():
        pytest.skip("the compiler is not GCC: no precompiled header")
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path))
    cpp_jit.build_inline("pch_a", cpp_sources=ANSWER % 1, functions=["answer"])
    gch = _gch(tmp_path)

    # damaged behind our back (same size and mtime): the hash no longer matches, so the
    # next build makes it again instead of letting GCC crash on it
    damaged = _damage(gch)
    path = cpp_jit.build_inline("pch_b", cpp_sources=ANSWER % 2, functions=["answer"])
    assert _cache.file_sha256(gch) == _recorded(gch) != damaged
    assert cpp_jit.load_module(path).answer() == 2


def test_a_build_the_header_breaks_is_retried_without_it_and_the_header_remade(
    tmp_path, monkeypatch, caplog
):
    # Whether GCC crashes on a given damaged .gch depends on where the damage lands, so
    # the crash is stood in for by a compile step that fails the way GCC does
    if not _pch.include_flags():
        pytest.skip("the compiler is not GCC: no precompiled header")
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path))
    cpp_jit.build_inline("pch_a", cpp_sources=ANSWER % 1, functions=["answer"])
    gch = _gch(tmp_path)
    assert _recorded(gch) is not None
    calls = []

    def compile_(flags):
        calls.append(flags)
        if flags:
            raise RuntimeError("g++: internal compiler error: Segmentation fault")
        return "built"

    assert _pch.build_with(compile_) == "built"
    assert calls[0] and calls[1] == []
    assert "the precompiled header failed the build; retrying without it" in caplog.text
    assert _recorded(gch) is None  # dropped: the next build makes it again
    path = cpp_jit.build_inline("pch_d", cpp_sources=ANSWER % 4, functions=["answer"])
    assert _cache.file_sha256(gch) == _recorded(gch)
    assert cpp_jit.load_module(path).answer() == 4

    def broken(flags):
        raise RuntimeError("error: 'x' was not declared in this scope")

    with pytest.raises(RuntimeError, match="not declared"):  # not the header's fault
        _pch.build_with(broken)
