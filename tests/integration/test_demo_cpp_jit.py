"""examples/demo_cpp_jit.py (called by the README quickstart demo) runs and is re-runnable.

Cross-component: the demo wraps its cpp_jit kernel (tensorplay-cppjit) as a custom_op
(tensorplay-library)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tensorplay.utils import cpp_jit

ROOT = Path(__file__).resolve().parents[2]


def test_demo_main_runs_twice_in_one_process():
    if not cpp_jit.is_available():
        pytest.skip("apache-tvm-ffi not installed")
    code = "import demo_cpp_jit as d; d.main(); d.main()"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT / "examples",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("axpby(x, y, a=2, b=0.5) = tensor([ 7., 14., 21.]") == 2
    assert "wrapped as the operator demo::axpby" in out.stdout
