"""Shared setup for the tensorplay-kernels tests.

Triton kernels run on CPU tensors through Triton's interpreter (``TRITON_INTERPRET=1``,
chosen by ``tensorplay.kernels`` when there is no GPU); on a CUDA machine they run
compiled. ``cpu_triton`` / ``cuda_triton`` skip, with the reason, where that is not
possible. The cpp_jit build cache is a fresh folder per session (hermetic).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import tensorplay as tp
from tensorplay.kernels import tilelang_unavailable_reason, triton_unavailable_reason
from tensorplay.kernels._capability import import_triton


@pytest.fixture(scope="session", autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory):
    saved = os.environ.get("TENSORPLAY_CACHE_DIR")
    os.environ["TENSORPLAY_CACHE_DIR"] = str(Path(tmp_path_factory.mktemp("tpk_cache")))
    yield
    if saved is None:
        os.environ.pop("TENSORPLAY_CACHE_DIR", None)
    else:
        os.environ["TENSORPLAY_CACHE_DIR"] = saved


@pytest.fixture
def cpu_triton() -> None:
    why = triton_unavailable_reason("cpu")
    if why is not None:
        pytest.skip(f"Triton interpreter not available: {why}")


@pytest.fixture
def cuda_triton() -> None:
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    why = triton_unavailable_reason("cuda")
    if why is not None:
        pytest.skip(f"Triton cannot run CUDA kernels here: {why}")


@pytest.fixture
def cuda_tilelang() -> None:
    if not tp.cuda.is_available():
        pytest.skip(f"CUDA not available: {tp.cuda.unavailable_reason()}")
    why = tilelang_unavailable_reason()
    if why is not None:
        pytest.skip(f"TileLang not available: {why}")


# Choose Triton's mode (the CPU interpreter when there is no GPU) before any test module
# imports triton itself: the interpreter cannot be switched on after that import.
if importlib.util.find_spec("triton") is not None:
    import_triton()
