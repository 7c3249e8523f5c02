"""The README demo (examples/quickstart.py) runs and shows the extension path.

Cross-component: the demo uses tensorplay.library, then runs examples/demo_cpp_jit.py
(tensorplay-cppjit) and examples/demo_compile.py (tensorplay-compile)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_shows_custom_op_autograd_and_opcheck():
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "custom op <custom_op demo::scaled>" in out
    assert "grad_fn: demo::scaledBackward" in out
    assert "d/dv sum(scaled(v)) = tensor([2., 2., 2.])" in out
    assert "registered as tp.ops.demo.scaled: True" in out
    assert "failures: {}" in out
    assert "d/dw sum(w^2) = tensor([2., 4., 6.])" in out  # the earlier demo still runs
