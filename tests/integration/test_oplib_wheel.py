"""An op library as a user ships it: examples/oplib built into a wheel with hatch
(``pip wheel``), installed into a fresh venv that has only our distributions and their
third-party dependencies, and used from a new process through ``tp.ops.oplib_example``
without importing the user's package and without a compiler.

The fresh venv gets our distributions as wheels built here (core pure Python: its native
module is not what this is about) and the third-party ones linked in from this environment
through a .pth file (no index: CI may be offline), each with its metadata, so pip resolves the
install fully, offline, with ``--no-index``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tensorplay as tp

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "oplib"
OURS = ("tensorplay-core", "tensorplay-library", "tensorplay-cppjit", "tensorplay-oplib")
THIRD_PARTY = ("numpy", "ml_dtypes", "apache-tvm-ffi", "typing-extensions", "pyyaml", "ninja")

USE = r"""
import json, math, sys
import numpy as np
import tensorplay as tp
from tensorplay import library

ops = tp.ops.oplib_example  # the entry point registers the library here
assert "oplib_example" not in sys.modules, "the user's package was imported"
x = tp.tensor([[-1.5, 0.0, 0.5, 2.0], [1.0, -0.25, 3.0, -2.0]])
b = tp.tensor([0.1, -0.2, 0.3, 0.0])
z = x.numpy() + b.numpy()
gelu = 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
y = ops.fused_bias_gelu(x, b, alpha=2.0)
assert np.allclose(y.numpy(), 2.0 * gelu, atol=1e-6), y

xs = x.clone().requires_grad_(True)
ops.sum_of_squares(xs, 1).sum().backward()
assert np.allclose(xs.grad.numpy(), 2 * x.numpy())

w = x.clone()
ops.scale_(w, 3.0)
assert np.allclose(w.numpy(), 3 * x.numpy())

failures = library.opcheck(ops.fused_bias_gelu, (x, b), {"alpha": 0.5}, test_utils="all")
print(json.dumps({"opcheck": failures, "modules": sorted(m for m in sys.modules if "oplib" in m)}))
"""


def _wheel(args: list[str], out: Path, env: dict | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    proc = subprocess.run(
        cmd + ["-w", str(out), *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _link_third_party(deps: Path) -> None:
    """Each third-party distribution's top-level files (package, .libs, dist-info), linked."""
    deps.mkdir()
    for name in THIRD_PARTY:
        dist = importlib.metadata.distribution(name)
        root = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or ()}
        for top in tops - {"..", "__pycache__"}:
            if (root / top).exists() and not (deps / top).exists():
                (deps / top).symlink_to(root / top)


@pytest.mark.slow
def test_the_wheel_registers_its_operators_in_a_fresh_venv(tmp_path):
    pytest.importorskip("hatchling", reason="pip wheel --no-build-isolation needs hatchling")
    wheels = tmp_path / "wheels"
    _wheel([str(EXAMPLE)], wheels)
    (user_wheel,) = wheels.glob("oplib_example-*.whl")
    assert user_wheel.name.endswith("-py3-none-linux_x86_64.whl") or "-py3-none-" in user_wheel.name
    with zipfile.ZipFile(user_wheel) as zf:
        names = zf.namelist()
        entry = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        meta = json.loads(zf.read("_tensorplay_oplib_oplib_example/oplib.json"))
    assert "_tensorplay_oplib_oplib_example/oplib_example_cpu.so" in names
    assert "[tensorplay.oplibs]\noplib_example = _tensorplay_oplib_oplib_example:register" in entry
    assert {op["schema"].split("(")[0]: op["devices"] for op in meta["ops"]}["scale_"] == ["cpu"]

    env = {**os.environ, "TENSORPLAY_PURE_PYTHON": "1"}  # core's wheel without a compile
    _wheel([str(REPO / "packages" / d) for d in OURS], wheels, env)

    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    _link_third_party(tmp_path / "deps")
    (site / "third_party.pth").write_text(str(tmp_path / "deps") + "\n")
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels)]
    proc = subprocess.run(install + ["oplib-example"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # no compiler at the install site: nothing on PATH but the venv, CXX/CC refuse to run,
    # and a fresh build cache must stay empty
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    run_env = {
        "PATH": str(venv / "bin"),
        "CXX": "false",
        "CC": "false",
        "HOME": str(tmp_path),
        "TENSORPLAY_CACHE_DIR": str(cache),
    }
    proc = subprocess.run(
        [python, "-c", USE], capture_output=True, text=True, cwd=tmp_path, env=run_env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["opcheck"] == {}
    assert "oplib_example" not in report["modules"]
    assert "_tensorplay_oplib_oplib_example" in report["modules"]
    assert list(cache.iterdir()) == []  # nothing was compiled

    listed = subprocess.run(
        [python, "-m", "tensorplay", "--no-import-check"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=run_env,
        timeout=300,
    )
    assert re.search(
        r"^  oplib_example +: oplib-example 0.1.0: 4 ops: fused_bias_gelu \[cpu\]",
        listed.stdout,
        re.M,
    ), listed.stdout


def test_a_generated_operator_is_one_node_under_tp_compile(tmp_path):
    graph = pytest.importorskip("tensorplay.graph")
    from tensorplay import oplib

    lib = oplib.loaded().get("oplib_example")
    if lib is None:
        lib = oplib.load(oplib.build(EXAMPLE / "ops.yaml", tmp_path, cuda="off"))
    op = lib.ops["fused_bias_gelu"]

    def f(x, b):
        return op(x * 2.0, b, alpha=0.5).sum(dim=1)

    x, b = tp.randn(3, 4), tp.randn(4)
    gm = graph.Tracer().trace(f, sample_inputs={"x": x, "b": b})
    calls = [n for n in gm.graph.nodes if getattr(n, "target", None) is op]
    assert len(calls) == 1
    compiled = tp.compile(f)
    np.testing.assert_allclose(compiled(x, b).numpy(), f(x, b).numpy(), rtol=1e-6)
