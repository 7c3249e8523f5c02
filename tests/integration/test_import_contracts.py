"""The import contracts of tools/lint_imports.py (import-linter) hold, and can fail."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "lint_imports.py"


@pytest.fixture(scope="module")
def tool():
    if not (Path(sys.executable).parent / "lint-imports").exists():
        pytest.skip("import-linter is not installed (pip install -r requirements-dev.txt)")
    spec = importlib.util.spec_from_file_location("lint_imports", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(tool, root: Path) -> str:
    proc = tool.check(root, tool.find_lint_imports(), capture=True)
    return f"rc={proc.returncode}\n{proc.stdout}{proc.stderr}"


def test_the_contracts_hold(tool, tmp_path):
    out = run(tool, tool.merged_tree(tmp_path))
    assert out.startswith("rc=0") and "4 kept, 0 broken" in out, out


def test_a_sibling_importing_a_private_core_module_breaks_a_contract(tool, tmp_path):
    root = tool.merged_tree(tmp_path)
    target = root / "library" / "_registry.py"
    target.write_text(target.read_text() + "\nfrom tensorplay import _dispatch  # planted\n")
    out = run(tool, root)
    assert out.startswith("rc=1"), out
    assert "siblings use core only through its public API and tensorplay._extension BROKEN" in out
    assert "tensorplay.library._registry -> tensorplay._dispatch" in out


def test_core_importing_a_sibling_breaks_a_contract(tool, tmp_path):
    root = tool.merged_tree(tmp_path)
    target = root / "_ops.py"
    target.write_text(target.read_text() + "\nimport tensorplay.library  # planted\n")
    out = run(tool, root)
    assert "core imports no sibling distribution BROKEN" in out, out


def test_a_cycle_inside_a_sibling_breaks_a_contract(tool, tmp_path):
    root = tool.merged_tree(tmp_path)
    capability = root / "kernels" / "_capability.py"
    capability.write_text(capability.read_text() + "\nfrom tensorplay.kernels import _routing\n")
    routing = (root / "kernels" / "_routing.py").read_text()
    assert "_capability" in routing, "the planted cycle needs _routing to import _capability"
    out = run(tool, root)
    assert "no import cycles inside a package BROKEN" in out, out


def test_a_cycle_inside_core_breaks_a_contract(tool, tmp_path):
    # _tensor is a leaf: the factories import it, so it must not import them back (not even
    # inside a function, where the cycle used to hide)
    root = tool.merged_tree(tmp_path)
    target = root / "_tensor.py"
    planted = "\ndef _planted():\n    from tensorplay import _factories  # noqa: PLC0415\n"
    target.write_text(target.read_text() + planted)
    out = run(tool, root)
    assert "no import cycles inside a package BROKEN" in out, out
    assert "No cycles are allowed in tensorplay." in out
    assert "._tensor -> ._factories" in out


def test_a_core_module_importing_the_package_face_breaks_a_contract(tool, tmp_path):
    root = tool.merged_tree(tmp_path)
    target = root / "autograd" / "_derivatives.py"
    target.write_text(target.read_text() + "\ndef _planted():\n    import tensorplay  # noqa\n")
    out = run(tool, root)
    assert "core never imports the package face tensorplay BROKEN" in out, out
    assert "tensorplay.autograd._derivatives imports tensorplay" in out
    # its imports of submodules (tensorplay._dispatch, ...) are not imports of the face
    assert out.count(" imports tensorplay (") == 1, out
