"""Helpers for the library tests: operator names are process-wide, so each test makes
fresh ones (``qualname("op")`` -> ``"t17::op"``)."""

from __future__ import annotations

import itertools

import pytest

_counter = itertools.count()


@pytest.fixture
def qualname():
    namespace = f"t{next(_counter)}"

    def make(name: str = "op") -> str:
        return f"{namespace}::{name}"

    return make


@pytest.fixture
def torch():
    """torch, the behavioural reference, where installed (an explicit skip otherwise)."""
    return pytest.importorskip("torch", reason="torch is the oracle for this comparison")
