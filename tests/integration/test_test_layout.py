"""The test tree itself: `pytest` from the root collects every folder in one session, in
pytest's default import mode, where test modules and helper modules are imported by their
basename. Two files with the same basename in different folders (or `from conftest import`)
break collection for everyone, so CI would fail only when both folders run together."""

from __future__ import annotations

import collections
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique_across_folders():
    names = collections.defaultdict(list)
    for path in TESTS.glob("*/*.py"):
        if path.name != "conftest.py":
            names[path.name].append(str(path.relative_to(TESTS)))
    clashes = {k: v for k, v in names.items() if len(v) > 1}
    assert not clashes, f"rename one of each: {clashes}"


def test_no_test_imports_from_conftest():
    statement = re.compile(r"^\s*(from conftest import|import conftest)", re.MULTILINE)
    offenders = [
        str(p.relative_to(TESTS)) for p in TESTS.rglob("*.py") if statement.search(p.read_text())
    ]
    assert not offenders, f"move shared helpers to a uniquely named module: {offenders}"
