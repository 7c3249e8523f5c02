"""Check the import structure of the TensorPlay distributions with import-linter.

The contracts (issue 15, "explicit seams"):

1. **Core imports no sibling distribution** (tensorplay-library, -compile, -kernels,
   -cppjit): core works alone, siblings plug in.
2. **Siblings use core only through its public API and ``tensorplay._extension``**, the
   documented internal API: never a private module of core (``tensorplay._dispatch``,
   ``tensorplay.autograd._record``, ...). ``tensorplay.utils._require_core`` is the one
   exception (see ``_extension``'s docstring). Only direct imports count: ``_extension``
   itself of course imports core's private modules.
3. **No import cycles** between the modules of one package, core's included, at every level
   (``tensorplay``'s modules and subpackages, then inside each subpackage; function-local
   imports count, imports under ``TYPE_CHECKING`` do not). ``ACYCLIC_PENDING`` lists the
   packages not there yet, each with the reason.
4. **Core never imports the package face** ``tensorplay`` (its ``__init__``, which imports
   core): core modules import the module that defines a name (``tensorplay._factories``,
   ``tensorplay.overrides``), never ``import tensorplay``. ``FACE_USERS`` lists the exceptions.

All eight distributions share the package ``tensorplay``, spread over several source folders,
which import-linter's graph builder cannot follow; so this tool copies the sources into one
tree in a temporary folder, derives the module lists of the contracts from that tree (a new
module is covered without editing a list), writes the contracts as an import-linter
configuration and runs ``lint-imports`` on it. Exit status: lint-imports'.

    python tools/lint_imports.py            # check
    python tools/lint_imports.py --show     # print the generated configuration too
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
REPO = TOOLS.parent
CORE = REPO / "packages" / "tensorplay-core" / "src" / "tensorplay"
SIBLINGS = {  # distribution folder -> the package(s) it adds under tensorplay
    "tensorplay-library": ["tensorplay.library"],
    "tensorplay-compile": ["tensorplay.graph", "tensorplay.compiler"],
    "tensorplay-kernels": ["tensorplay.kernels"],
    "tensorplay-cppjit": ["tensorplay.utils.cpp_jit"],
    "tensorplay-nn": [
        "tensorplay.nn",
        "tensorplay.optim",
        "tensorplay.utils.data",
        "tensorplay.serialization",
    ],
    "tensorplay-oplib": ["tensorplay.oplib"],
}
# Core modules that may import the package face (contract 4), and why.
FACE_USERS = {
    "tensorplay.__main__": "the command-line report on the package: a program using it, which "
    "nothing imports",
}
# What siblings may import although it is underscored (see tensorplay/_extension.py).
SIBLING_API = ["tensorplay._extension", "tensorplay.utils._require_core"]
# Packages still exempt from contract 3, and why (remove the entry with the fix).
ACYCLIC_PENDING: dict[str, str] = {}


def merged_tree(dest: Path) -> Path:
    """One ``tensorplay`` folder with core and every sibling's subpackages, sources only."""
    root = dest / "tensorplay"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd")
    shutil.copytree(CORE, root, ignore=ignore)
    for dist in SIBLINGS:
        shutil.copytree(
            REPO / "packages" / dist / "src" / "tensorplay", root, ignore=ignore, dirs_exist_ok=True
        )
    return root


def core_modules(root: Path) -> list[str]:
    """Core's modules and subpackages directly under ``tensorplay`` and its core
    subpackages, as import-linter names (a package stands for its descendants)."""
    sibling_roots = {p for pkgs in SIBLINGS.values() for p in pkgs}
    names = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        name = ".".join(parts)
        if name == "tensorplay" or any(name.startswith(s) for s in sibling_roots):
            continue
        names.append(name)
    return names


def is_private(name: str) -> bool:
    return any(part.startswith("_") and part != "__main__" for part in name.split(".")[1:])


def outermost(names: list[str]) -> list[str]:
    """A package stands for its descendants: drop the names inside another one."""
    return [n for n in names if not any(n.startswith(p + ".") for p in names)]


def contracts(root: Path) -> str:
    core = core_modules(root)
    siblings = [p for pkgs in SIBLINGS.values() for p in pkgs]
    # core's own modules, minus packages that hold a sibling (tensorplay.utils holds cpp_jit:
    # its core modules are listed one by one instead)
    holders = {".".join(s.split(".")[:-1]) for s in siblings}
    core_sources = outermost([n for n in core if n not in holders])
    private = outermost([n for n in core if is_private(n) and n not in SIBLING_API])

    def lines(names: list[str]) -> str:
        return "".join(f"\n    {n}" for n in names)

    ignore = "".join(f"\n    {s}.** -> {api}" for s in siblings for api in SIBLING_API)
    ignore += "".join(f"\n    {s} -> {api}" for s in siblings for api in SIBLING_API)
    # A sibling inside a core package (cpp_jit in tensorplay.utils) counts as part of that
    # package when the acyclic contract looks at tensorplay's children, so its imports of core
    # (tensorplay._extension -> tensorplay.utils._python_dispatch) would read as a cycle
    # utils -> _extension -> utils. They are a sibling's imports of core, which contracts 1-2
    # check: the acyclic contract leaves them out.
    nested = [s for s in siblings if s.rsplit(".", 1)[0] in core]
    targets = ["tensorplay", *core]
    acyclic_ignore = "".join(
        f"\n    {s}{tail} -> {t}" for s in nested for tail in ("", ".**") for t in targets
    )
    # type-only imports (under TYPE_CHECKING) are not edges: they never run
    return f"""[importlinter]
root_package = tensorplay
exclude_type_checking_imports = true
contract_types =
    face: lint_imports.FaceContract

[importlinter:contract:core-alone]
name = core imports no sibling distribution
type = forbidden
source_modules ={lines(core_sources)}
forbidden_modules ={lines(siblings)}

[importlinter:contract:sibling-api]
name = siblings use core only through its public API and tensorplay._extension
type = forbidden
allow_indirect_imports = true
source_modules ={lines(siblings)}
forbidden_modules ={lines(private)}
ignore_imports ={ignore}
unmatched_ignore_imports_alerting = none

[importlinter:contract:acyclic]
name = no import cycles inside a package
type = acyclic_siblings
ancestors =
    tensorplay
skip_descendants ={lines(list(ACYCLIC_PENDING))}
ignore_imports ={acyclic_ignore}
unmatched_ignore_imports_alerting = none

[importlinter:contract:face]
name = core never imports the package face tensorplay
type = face
face = tensorplay
importers ={lines([n for n in core if n not in FACE_USERS])}
"""


def find_lint_imports() -> str:
    found = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    if found is None:
        sys.exit("error: lint-imports not found: pip install -r requirements-dev.txt")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="print the generated contracts")
    args = parser.parse_args(argv)
    lint = find_lint_imports()
    with tempfile.TemporaryDirectory(prefix="tensorplay-imports-") as tmp:
        root = merged_tree(Path(tmp))
        if args.show:
            print(contracts(root))
        return check(root, lint).returncode


def check(root: Path, lint: str, capture: bool = False) -> subprocess.CompletedProcess:
    """Run lint-imports on the merged tree ``root`` (made by ``merged_tree``)."""
    config = root.parent / ".importlinter"
    config.write_text(contracts(root))
    # the merged tree, and this folder for the contract type ``face`` (FaceContract below)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root.parent), str(TOOLS)])}
    # --no-cache: the tree is new each run; cwd: a folder without another config
    cmd = [lint, "--config", str(config), "--no-cache"]
    return subprocess.run(cmd, cwd=root.parent, env=env, capture_output=capture, text=True)


def _face_contract():
    """Contract 4 as an import-linter contract type (lint-imports loads it from here)."""
    from importlinter import Contract, ContractCheck, fields, output  # noqa: PLC0415 - optional here (see __getattr__)

    class FaceContract(Contract):
        """No module of ``importers`` imports the package ``face`` itself (its ``__init__``);
        importing its submodules is fine."""

        type_name = "face"
        face = fields.StringField()
        importers = fields.ListField(subfield=fields.StringField())

        def check(self, graph, verbose: bool) -> ContractCheck:
            face, importers = str(self.face), {str(m) for m in self.importers}
            found = []
            for module in sorted(graph.find_modules_that_directly_import(face) & importers):
                for d in graph.get_import_details(importer=module, imported=face):
                    found.append((module, d["line_number"], d["line_contents"]))
            return ContractCheck(kept=not found, warnings=[], metadata={"found": found})

        def render_broken_contract(self, check: ContractCheck) -> None:
            for module, line, text in check.metadata["found"]:
                output.print_error(f"{module} imports {self.face} (l.{line}: {text})")
                output.new_line()

    return FaceContract


def __getattr__(name: str):
    # ``lint_imports.FaceContract``, built on first use: only lint-imports asks for it, and the
    # rest of this tool must run (and say how to install import-linter) without import-linter
    if name == "FaceContract":
        return _face_contract()
    raise AttributeError(name)


if __name__ == "__main__":
    sys.exit(main())
