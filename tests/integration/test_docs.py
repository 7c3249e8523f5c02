"""Every ```python block in README.md and docs/*.md runs (blocks of one page share nothing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks():
    for page in PAGES:
        if not page.exists():
            continue
        for i, code in enumerate(_BLOCK.findall(page.read_text())):
            yield pytest.param(code, id=f"{page.relative_to(ROOT)}#{i}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_doc_block_runs(code):
    exec(compile(code, "<doc>", "exec"), {"__name__": "__doc_block__"})  # noqa: S102


def test_docs_have_blocks():
    assert len(list(_blocks())) >= 5
