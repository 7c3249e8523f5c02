"""Core test fixtures: ``device`` runs a test on the CPU and, where CuPy sees a GPU, on CUDA."""

from __future__ import annotations

import pytest

import tensorplay as tp


def _devices():
    yield "cpu"
    yield pytest.param("cuda", marks=pytest.mark.cuda)


@pytest.fixture(params=list(_devices()))
def device(request):
    """The device under test; CUDA is an explicit skip (with the reason) where absent."""
    if request.param == "cuda" and not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    return request.param
