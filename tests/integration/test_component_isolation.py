"""Each component's tests run with that component and what it declares, nothing more.

The component CI (.github/workflows/<component>.yml, ``hatch run <component>:test``)
installs one distribution and its declared dependencies, then runs ``tests/<component>``.
A test there that imports a subpackage of a distribution the component does not declare
fails (or, guarded, silently never runs) in that CI: cross-component tests live in
tests/integration. This checks it statically (by AST, no imports of the tests), with the
dependencies read from each distribution's pyproject.toml (the static ``dependencies`` or,
for a dynamic one, the ``[tool.hatch.metadata.hooks.custom]`` table that
tools/build/hatch_version.py fills in):

* ``import``/``from ... import``, ``importlib.import_module("...")`` and attribute chains on
  the ``tensorplay`` module (``tp.compile``, ``tp.library``, ``tp.utils.cpp_jit``) name a
  module; the distribution that ships it must be the component or one it declares;
* ``pytest.importorskip`` of a module, at module level or in the same function, guards the
  uses of that module's distribution (an explicit skip where it is not installed);
* a string naming a script in examples/ (a test that runs it) or Python source that imports
  one counts as that script's imports.

And the workflow and hatch environment of each component install exactly the component and
what it declares, and the workflow triggers on the paths of everything it installs.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
PACKAGES = REPO / "packages"
EXAMPLES = REPO / "examples"
WORKFLOWS = REPO / ".github" / "workflows"

# tests/<folder> -> the distribution it tests (a new component folder must be added here)
COMPONENTS = {
    "core": "tensorplay-core",
    "library": "tensorplay-library",
    "compile": "tensorplay-compile",
    "kernels": "tensorplay-kernels",
    "cppjit": "tensorplay-cppjit",
    "nn": "tensorplay-nn",
    "oplib": "tensorplay-oplib",
}
NOT_COMPONENTS = {"integration"}  # everything installed: no restriction
CORE = "tensorplay-core"


# --- what each distribution declares and ships -------------------------------------------


def _pyproject(dist: str) -> dict:
    return tomllib.loads((PACKAGES / dist / "pyproject.toml").read_text(encoding="utf-8"))


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read a name from the requirement {requirement!r}"
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def ours() -> list[str]:
    """The code distributions under packages/ (not the meta-package, which ships no code)."""
    return sorted(p.parents[1].name for p in PACKAGES.glob("*/src/tensorplay"))


def declared(dist: str) -> set[str]:
    """Our distributions that ``dist`` depends on directly (extras left out)."""
    project = _pyproject(dist)["project"]
    if "dependencies" in project.get("dynamic", []):
        hook = _pyproject(dist)["tool"]["hatch"]["metadata"]["hooks"]["custom"]
        requirements = hook.get("dependencies", [])
    else:
        requirements = project.get("dependencies", [])
    names = {_requirement_name(r) for r in requirements}
    return names & set(ours())


def closure(dist: str) -> set[str]:
    """``dist`` and every one of our distributions it depends on, transitively."""
    seen, todo = set(), [dist]
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(declared(d))
    return seen


def shipped_roots() -> dict[str, str]:
    """Module name -> distribution, for the packages each non-core distribution adds to
    ``tensorplay`` (a package whose parent is not a package of the same distribution:
    ``tensorplay.library``, ``tensorplay.utils.cpp_jit``). Everything else is core's."""
    roots = {}
    for dist in ours():
        if dist == CORE:
            continue
        src = PACKAGES / dist / "src"
        for init in sorted(src.glob("tensorplay/**/__init__.py")):
            package = init.parent
            if not (package.parent / "__init__.py").is_file():
                roots[".".join(package.relative_to(src).parts)] = dist
    return roots


def lazy_attributes() -> dict[str, str]:
    """``tp.<name>`` -> distribution, from core's ``_LAZY`` table (``tp.compile`` & co)."""
    tree = ast.parse((PACKAGES / CORE / "src/tensorplay/__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError("tensorplay/__init__.py has no _LAZY table")


def owner(module: str, roots: dict[str, str]) -> str | None:
    """The distribution shipping ``module`` (None: not ours)."""
    if module != "tensorplay" and not module.startswith("tensorplay."):
        return None
    for root in sorted(roots, key=len, reverse=True):
        if module == root or module.startswith(root + "."):
            return roots[root]
    return CORE


# --- what a test file uses -----------------------------------------------------------------


@dataclass(frozen=True)
class Use:
    module: str  # what is imported or reached
    line: int
    scope: ast.AST | None  # the enclosing function (None: module level)
    guard: bool = False  # pytest.importorskip(module)
    via: str = ""  # "examples/quickstart.py" when the use is in an example the test runs


_ABSENCE = {"ImportError", "ModuleNotFoundError"}


def _dotted(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _expects_absence(item: ast.withitem) -> bool:
    """``with pytest.raises(ImportError)`` / ``(ModuleNotFoundError, match=...)``: what the
    block imports is meant to be missing (a test of the message), not needed."""
    call = item.context_expr
    if not (isinstance(call, ast.Call) and (_dotted(call.func) or [])[-1:] == ["raises"]):
        return False
    if not call.args:
        return False
    kinds = call.args[0].elts if isinstance(call.args[0], ast.Tuple) else [call.args[0]]
    return all((_dotted(k) or [""])[-1] in _ABSENCE for k in kinds)


def uses(source: str, examples: dict[str, str], _seen: frozenset = frozenset()) -> list[Use]:
    """Every module ``source`` imports or reaches, with importorskip calls as guards."""
    tree = ast.parse(source)
    result: list[Use] = []
    # names bound to the tensorplay module: `import tensorplay as tp`, `import tensorplay`
    aliases = {
        a.asname or "tensorplay"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for a in node.names
        if a.name == "tensorplay" or (a.name.startswith("tensorplay.") and not a.asname)
    }
    # only the whole chain `tp.utils.cpp_jit.load`, not its parts `tp.utils.cpp_jit`, `tp.utils`
    inner_links = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}

    def add(module, node, scope, **kw):
        result.append(Use(module, node.lineno, scope, **kw))
        stem = module + ".py"
        if stem in examples and stem not in _seen:  # `import demo_cpp_jit` in an example
            result.extend(_example(stem, node.lineno, scope, examples, _seen))

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else scope
            if isinstance(child, ast.With | ast.AsyncWith) and any(
                _expects_absence(i) for i in child.items
            ):
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    add(a.name, child, scope)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                add(child.module, child, scope)
                # `from tensorplay import library` imports the submodule tensorplay.library
                for a in child.names:
                    add(f"{child.module}.{a.name}", child, scope)
            elif isinstance(child, ast.Call) and child.args:
                name = (_dotted(child.func) or [""])[-1]
                arg = child.args[0]
                if name in ("importorskip", "import_module") and (
                    isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                ):
                    add(arg.value, child, scope, guard=name == "importorskip")
            elif isinstance(child, ast.Attribute) and id(child) not in inner_links:
                chain = _dotted(child)
                if chain and chain[0] in aliases:
                    add("tensorplay." + ".".join(chain[1:]), child, scope)
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                for name in _examples_named(child.value, examples) - _seen:
                    result.extend(_example(name, child.lineno, scope, examples, _seen))
            visit(child, inner)

    visit(tree, None)
    return result


def _examples_named(text: str, examples: dict[str, str]) -> set[str]:
    """The examples/ scripts a string names: a path ending in the script's file name, or
    Python source (``python -c``) that imports the script by its module name."""
    if text in examples or any(text.endswith("/" + f) for f in examples):
        return {text.rsplit("/", 1)[-1]}
    if "import" not in text:
        return set()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    modules = {
        a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    return {f for f in examples if f.removesuffix(".py") in modules}


def _example(name, line, scope, examples, seen) -> list[Use]:
    """What the script examples/<name> uses, at the line of the test that runs it."""
    return [
        Use(u.module, line, scope, via=u.via or f"examples/{name}")
        for u in uses(examples[name], examples, seen | {name})
    ]


def example_sources() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(EXAMPLES.glob("*.py"))}


def violations(source: str, allowed: set[str], examples: dict[str, str]) -> list[str]:
    """The uses in ``source`` of a distribution outside ``allowed`` that no importorskip of
    that distribution (at module level or in the same function) guards."""
    roots, lazy = shipped_roots(), lazy_attributes()
    found = uses(source, examples)

    def dist_of(use: Use) -> str | None:
        parts = use.module.split(".")
        if len(parts) > 1 and parts[0] == "tensorplay" and parts[1] in lazy:
            return lazy[parts[1]]
        return owner(use.module, roots)

    guards = {(dist_of(u), u.scope) for u in found if u.guard}
    out = []
    for use in found:
        dist = dist_of(use)
        if dist is None or dist in allowed or use.guard:
            continue
        if (dist, None) in guards or (dist, use.scope) in guards:
            continue
        where = f" (through {use.via})" if use.via else ""
        out.append(f"line {use.line}: {use.module}{where} needs {dist}")
    return out


# --- the checks ------------------------------------------------------------------------------


def test_every_test_folder_is_a_known_component():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders - NOT_COMPONENTS == set(COMPONENTS), "map each new folder in COMPONENTS"
    assert set(COMPONENTS.values()) == set(ours())


def test_dependencies_are_read_from_the_pyprojects():
    assert declared(CORE) == set()  # core depends on none of ours
    for dist in ours():
        if dist != CORE:
            assert CORE in declared(dist), dist
    assert closure("tensorplay-kernels") == {CORE, "tensorplay-library", "tensorplay-kernels"}


def test_each_component_ships_its_own_subpackages():
    roots = shipped_roots()
    assert set(roots.values()) == set(ours()) - {CORE}
    assert roots["tensorplay.utils.cpp_jit"] == "tensorplay-cppjit"  # inside core's utils
    assert owner("tensorplay.utils._python_dispatch", roots) == CORE
    assert owner("tensorplay.graph._tracer", roots) == "tensorplay-compile"
    assert owner("numpy", roots) is None
    assert set(lazy_attributes().values()) <= set(ours())


@pytest.mark.parametrize("folder", sorted(COMPONENTS))
def test_component_tests_use_only_what_the_component_declares(folder):
    allowed = closure(COMPONENTS[folder])
    examples = example_sources()
    files = sorted((TESTS / folder).glob("*.py"))
    assert files
    problems = {
        str(path.relative_to(REPO)): v
        for path in files
        if (v := violations(path.read_text(encoding="utf-8"), allowed, examples))
    }
    assert not problems, (
        f"tests/{folder} runs with {sorted(allowed)} only; move these to tests/integration "
        f"(or guard an optional one with pytest.importorskip): {problems}"
    )


# The checker finds what it must (so the test above cannot pass by finding nothing).
LIBRARY_ONLY = {CORE, "tensorplay-library"}


@pytest.mark.parametrize(
    "source",
    [
        "from tensorplay.graph import symbolic_trace",
        "from tensorplay import compiler",
        "import tensorplay.kernels as tpk",
        "from tensorplay.utils import cpp_jit",
        "import tensorplay as tp\ndef test():\n    tp.compile(f)",
        "import tensorplay as tp\nx = tp.utils.cpp_jit.load_inline",
        "import importlib\nimportlib.import_module('tensorplay.graph')",
        # a guard in another function guards nothing here
        "import pytest\ndef a():\n    pytest.importorskip('tensorplay.graph')\n"
        "def b():\n    from tensorplay.graph import Tracer",
        # tests that run examples/quickstart.py, which runs the cpp_jit and compile demos
        "import subprocess\nsubprocess.run(['python', 'examples/quickstart.py'])",
        "code = 'import demo_cpp_jit as d; d.main()'",
        # pytest.raises(ValueError) does not expect the import to fail
        "import pytest\nwith pytest.raises(ValueError):\n    import tensorplay.graph",
    ],
)
def test_the_check_flags_an_undeclared_component(source):
    assert violations(source, LIBRARY_ONLY, example_sources())


@pytest.mark.parametrize(
    "source",
    [
        "import tensorplay as tp\nfrom tensorplay import library\ntp.library.custom_op",
        "from tensorplay.utils import _python_dispatch\nimport numpy, triton",
        "import pytest\ngraph = pytest.importorskip('tensorplay.graph')\n"
        "from tensorplay.graph import Tracer",
        "import pytest\ndef a():\n    g = pytest.importorskip('tensorplay.graph')\n"
        "    from tensorplay.graph import Tracer",
        "import tensorplay as tp\nx = tp.ops.demo.scaled",
        # a test that the import fails, with the message that names the distribution
        "import pytest\ndef test():\n    with pytest.raises(ModuleNotFoundError, match='x'):\n"
        "        from tensorplay.utils import cpp_jit",
    ],
)
def test_the_check_accepts_declared_and_guarded_uses(source):
    assert violations(source, LIBRARY_ONLY, example_sources()) == []


# --- the CI that runs each component's tests ------------------------------------------------


def _workflow(folder: str) -> str:
    return (WORKFLOWS / f"{folder}.yml").read_text(encoding="utf-8")


def _installed(text: str) -> set[str]:
    """Our distributions a workflow's or an environment's text installs from packages/."""
    return set(re.findall(r"packages/(tensorplay-[a-z]+)", text))


@pytest.mark.parametrize("folder", sorted(COMPONENTS))
def test_component_workflow_installs_exactly_what_the_component_declares(folder):
    text = _workflow(folder)
    installs = "\n".join(line for line in text.splitlines() if re.search(r"pip install|-e ", line))
    assert _installed(installs) == closure(COMPONENTS[folder])
    assert re.search(rf"pytest tests/{folder}\b", text)


@pytest.mark.parametrize("folder", sorted(COMPONENTS))
def test_component_workflow_triggers_on_what_it_installs(folder):
    text = _workflow(folder)
    for event in ("push", "pull_request"):
        block = re.search(rf"^  {event}:\n((?:    .*\n)+)", text, re.MULTILINE)
        assert block, f"{folder}.yml has no {event} trigger"
        paths = set(re.findall(r'^      - "([^"]+)"$', block.group(1), re.MULTILINE))
        expected = {f"packages/{d}/**" for d in closure(COMPONENTS[folder])} | {
            "pyproject.toml",  # pytest's configuration
            "tools/build/**",
            f"tests/{folder}/**",
            "tests/conftest.py",
            f".github/workflows/{folder}.yml",
        }
        assert expected <= paths, f"{folder}.yml {event}: missing {sorted(expected - paths)}"
        packages = {p for p in paths if p.startswith("packages/")}
        assert packages == {f"packages/{d}/**" for d in closure(COMPONENTS[folder])}


@pytest.mark.parametrize("folder", sorted(COMPONENTS))
def test_hatch_environment_matches_the_component(folder):
    envs = tomllib.loads((REPO / "hatch.toml").read_text(encoding="utf-8"))["envs"]
    env = envs[folder]
    members = env["workspace"]["members"]
    names = {(m["path"] if isinstance(m, dict) else m).removeprefix("packages/") for m in members}
    assert names == closure(COMPONENTS[folder])
    assert env["scripts"]["test"].startswith(f"python -m pytest tests/{folder} ")
