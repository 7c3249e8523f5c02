"""Without apache-tvm-ffi: is_available() is False and every loader says how to install it.

Checked twice: in a real virtual environment that lacks tvm-ffi (numpy, ml_dtypes and
our sources only, linked in through a .pth file), and in a subprocess of this venv where
the import of ``tvm_ffi`` is made to fail (what a broken install looks like).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECK = textwrap.dedent(
    """
    import importlib.util
    from tensorplay.utils import cpp_jit

    assert cpp_jit.is_available() is False
    calls = {
        "load_inline": lambda: cpp_jit.load_inline("x", cpp_sources="int f() { return 1; }"),
        "build_inline": lambda: cpp_jit.build_inline("x", cpp_sources="int f() { return 1; }"),
        "load_module": lambda: cpp_jit.load_module("x.so"),
        "build": lambda: cpp_jit.build("x", cpp_files=["x.cc"]),
        "load": lambda: cpp_jit.load("x", cpp_files=["x.cc"]),
        "system_lib": lambda: cpp_jit.system_lib(),
    }
    for name, call in calls.items():
        try:
            call()
        except RuntimeError as exc:
            msg = str(exc)
            assert "tvm-ffi" in msg and "pip install apache-tvm-ffi" in msg, (name, msg)
        else:
            raise AssertionError(name + " did not raise")
    print("ok", len(calls))
    """
)


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


@pytest.mark.slow
def test_in_a_venv_without_tvm_ffi(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run(
        [sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    deps = tmp_path / "deps"
    deps.mkdir()
    for dist in ("numpy", "numpy.libs", "ml_dtypes"):
        spec = importlib.util.find_spec(dist.split(".")[0])
        assert spec is not None and spec.origin is not None
        src = Path(spec.origin).parent.parent / dist
        if src.exists():
            (deps / dist).symlink_to(src)
    paths = [deps, ROOT / "packages/tensorplay-core/src", ROOT / "packages/tensorplay-cppjit/src"]
    (_site_packages(venv) / "tensorplay_src.pth").write_text("\n".join(map(str, paths)) + "\n")
    python = venv / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import tvm_ffi"], capture_output=True, text=True, timeout=120
    )
    assert probe.returncode != 0 and "No module named 'tvm_ffi'" in probe.stderr
    out = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok 6"


def test_with_the_import_of_tvm_ffi_failing():
    blocked = "import sys; sys.modules['tvm_ffi'] = None\n"  # import raises ImportError
    out = subprocess.run(
        [sys.executable, "-c", blocked + CHECK], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok 6"
