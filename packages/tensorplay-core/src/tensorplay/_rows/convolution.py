"""Convolution and pooling rows: ``conv1d``/``conv2d`` and their transposes, ``max_pool2d``,
``avg_pool2d``, ``adaptive_avg_pool2d``."""

from __future__ import annotations

from tensorplay._dispatch import OpDef
from tensorplay._rows import row_maker

ROWS: list[OpDef] = []
op = row_maker(ROWS)
