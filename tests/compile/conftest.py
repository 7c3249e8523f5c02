"""Fixtures for the compile tests: skip TVM tests cleanly when apache-tvm is not usable."""

from __future__ import annotations

import pytest

from tensorplay.compiler import tvm_status


@pytest.fixture(scope="session")
def tvm():
    """The apache-tvm module (skips the test when it is not installed or not usable)."""
    status = tvm_status()
    if not status:
        pytest.skip(f"apache-tvm not usable: {status.reason}")
    import tvm as module  # noqa: PLC0415

    return module


@pytest.fixture
def cuda_device():
    """Skips unless TensorPlay has a CUDA device (these run on the lead's H200)."""
    import tensorplay as tp  # noqa: PLC0415

    if not tp.cuda.is_available():
        pytest.skip("CUDA not available")
    return tp.device("cuda")
