"""Sorting and shape-rearranging rows: ``sort``, ``argsort``, ``topk``, ``tril``/``triu``,
``repeat``, ``flip``, ``roll``, ``nonzero``..."""

from __future__ import annotations

from tensorplay._dispatch import OpDef
from tensorplay._rows import row_maker

ROWS: list[OpDef] = []
op = row_maker(ROWS)
