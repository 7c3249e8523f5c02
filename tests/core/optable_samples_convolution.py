"""Samples and numpy references of the ``convolution`` family's rows (merged into
``optable_samples``'s ``_NAMED`` and ``REF`` at the end of that module)."""

from __future__ import annotations

NAMED: dict = {}  # row name -> sample function (row, dt, rng) -> iterable of samples
REF: dict = {}  # row name -> numpy reference
