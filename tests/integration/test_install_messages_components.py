"""Install messages that need the components (tests/core/test_install_messages.py has the rest).

* A component imported over a foreign ``tensorplay`` (PyPI's unrelated package of the same
  import name) raises ImportError that names the problem and the fix.
* ``from tensorplay.utils import cpp_jit`` without tensorplay-cppjit says which
  distribution to install. Absence is simulated: ``tensorplay.utils`` gets core's folder only.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorplay as tp
import tensorplay.utils

ROOT = Path(__file__).resolve().parents[2]
CORE_UTILS = ROOT / "packages" / "tensorplay-core" / "src" / "tensorplay" / "utils"


def run_py(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(Path(p).parent) for p in tp.__path__)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, env=env
    )


# ---- `import tensorplay` gives someone else's package --------------------------------------------


@pytest.mark.parametrize(
    "module,dist",
    [
        ("tensorplay.library", "tensorplay-library"),
        ("tensorplay.graph", "tensorplay-compile"),
        ("tensorplay.compiler", "tensorplay-compile"),
        ("tensorplay.kernels", "tensorplay-kernels"),
        ("tensorplay.utils.cpp_jit", "tensorplay-cppjit"),
    ],
)
def test_component_over_a_foreign_core_raises_import_error(module, dist):
    # a fresh interpreter whose `tensorplay` is another package laid over our folders
    code = textwrap.dedent(f"""
        import sys, types
        fake = types.ModuleType("tensorplay")
        fake.__version__ = "1.1.0"
        fake.__file__ = "/site-packages/tensorplay/__init__.py"
        fake.__path__ = {list(tp.__path__)!r}
        sys.modules["tensorplay"] = fake
        try:
            import {module}
        except ImportError as e:
            print(e)
        else:
            print("imported")
    """)
    r = run_py("-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(
        f"{module} ({dist}) needs TensorPlay's core (tensorplay-core), but `import tensorplay` "
        "gave another package (/site-packages/tensorplay/__init__.py, version 1.1.0).\n"
    ), r.stdout
    assert "\nFix: pip uninstall tensorplay" in r.stdout


# ---- tensorplay-cppjit is not installed ----------------------------------------------------------


@pytest.fixture
def without_cppjit(monkeypatch):
    """As if tensorplay-cppjit were not installed: ``tensorplay.utils`` is core's folder only."""
    importlib.import_module("tensorplay.utils.cpp_jit")  # installed here: take it away
    monkeypatch.delattr(tensorplay.utils, "cpp_jit")
    monkeypatch.delitem(sys.modules, "tensorplay.utils.cpp_jit")
    monkeypatch.setattr(tensorplay.utils, "__path__", [str(CORE_UTILS)])
    importlib.invalidate_caches()


CPPJIT_HINT = (
    "tensorplay.utils.cpp_jit needs the tensorplay-cppjit distribution: "
    "pip install ./packages/tensorplay-cppjit (from a TensorPlay checkout) or "
    "pip install --no-index --find-links dist/ tensorplay-cppjit (from our wheels) "
    "(No module named 'tensorplay.utils.cpp_jit')"
)


def test_from_utils_import_cpp_jit_names_the_distribution(without_cppjit):
    with pytest.raises(ModuleNotFoundError) as e:
        from tensorplay.utils import cpp_jit  # noqa: F401
    assert str(e.value) == CPPJIT_HINT
    assert e.value.name == "tensorplay.utils.cpp_jit"


def test_tp_utils_cpp_jit_names_the_distribution(without_cppjit):
    with pytest.raises(ModuleNotFoundError, match=re.escape(CPPJIT_HINT)):
        tp.utils.cpp_jit  # noqa: B018


def test_cpp_jit_imports_when_installed():
    from tensorplay.utils import cpp_jit

    assert cpp_jit.__name__ == "tensorplay.utils.cpp_jit"


# ---- `python -m tensorplay` names the backend tp.compile uses by default ----------------------


def test_report_names_the_default_compile_backend_and_why():
    from tensorplay.__main__ import probe_compile_backend
    from tensorplay.compiler import tvm_status

    status = tvm_status()
    line = probe_compile_backend(check_import=True)
    if status:
        assert line == f"tvm: {status}", line
    else:
        assert line == f"eager (TVM {status})", line
        assert "not usable" in line and "pip install" in line
    assert probe_compile_backend(check_import=False) == "not checked (--no-import)"
