"""Helpers shared by the core tests (a uniquely named module: every test folder has its own
conftest.py, so ``from conftest import ...`` would pick whichever was imported first)."""

from __future__ import annotations

import tensorplay as tp


def to_numpy(t: tp.Tensor):
    """Host copy of a tensor's values as numpy (any device)."""
    return t.detach().cpu().numpy()
