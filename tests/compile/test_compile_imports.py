"""tensorplay-compile's own modules import each other without cycles (issue 15).

Read from the source with ``ast`` (nothing is imported): the module-level imports between
``tensorplay.compiler.*`` and ``tensorplay.graph.*`` must form a DAG, so no function-local
import is needed to break a cycle. A function-local import is allowed only for an optional
third-party package (apache-tvm, the ``[tvm]`` extra), with a comment saying why.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tensorplay.compiler
import tensorplay.graph

PACKAGES = {
    "tensorplay.compiler": Path(tensorplay.compiler.__file__).parent,
    "tensorplay.graph": Path(tensorplay.graph.__file__).parent,
}
OPTIONAL = {"tvm"}  # top-level modules of the optional dependencies (pyproject's extras)


def _modules() -> dict[str, Path]:
    """Every module of the distribution: dotted name -> file."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


MODULES = _modules()


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """Dotted names an import statement loads (``from p import m`` loads ``p.m`` when it is
    a module, else ``p``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


def _function_local(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports inside a function body (run at call time, not at import)."""
    local = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in ast.walk(fn):
                if isinstance(stmt, (ast.Import, ast.ImportFrom)) and stmt not in local:
                    local.append(stmt)
    return local


def _is_type_checking(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test)


def _module_level(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported (top level, also inside if/try blocks)."""
    found = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.append(stmt)
            elif isinstance(stmt, (ast.If, ast.Try)) and not _is_type_checking(stmt):
                for block in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, block, []))
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return found


def _graph() -> dict[str, set[str]]:
    """module -> the distribution's modules it imports at module level."""
    edges = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        edges[name] = {
            target
            for stmt in _module_level(tree)
            for target in _imported(stmt)
            if target in MODULES and target != name
        }
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(edges):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_module_level_imports_form_a_dag():
    edges = _graph()
    # the registry's module imports the TVM backend: the cycle issue 15 named is gone for good
    assert "tensorplay.compiler._tvm_backend" in edges["tensorplay.compiler._backends"]
    cycle = _cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(edges) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_function_local_imports_are_optional_packages_and_say_why():
    offenders = []
    for name, path in MODULES.items():
        source = path.read_text()
        lines = source.splitlines()
        for stmt in _function_local(ast.parse(source, str(path))):
            roots = {target.split(".")[0] for target in _imported(stmt)}
            where = f"{name}:{stmt.lineno}: {ast.unparse(stmt)}"
            if not roots <= OPTIONAL:
                offenders.append(
                    f"{where} (only optional packages {sorted(OPTIONAL)} may be "
                    "imported in a function; move it to the top of the module)"
                )
                continue
            # the reason: a comment on the import's line after the noqa code, or just above it
            own = lines[stmt.lineno - 1].partition("#")[2].replace("noqa: PLC0415", "")
            above = lines[stmt.lineno - 2].strip() if stmt.lineno > 1 else ""
            if not own.strip(" -") and not above.startswith("#"):
                offenders.append(f"{where} (say why it is imported here, in a comment)")
    assert not offenders, "\n".join(offenders)


def test_importing_the_compiler_does_not_import_tvm():
    code = "import sys, tensorplay.compiler; print('tvm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
