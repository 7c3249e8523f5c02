"""``python -m tensorplay``: versions, components and capabilities, each "available" or
the exact reason it is not; never crashes."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorplay as tp
from tensorplay import __main__ as cli

CAPABILITIES = [
    "CUDA/CuPy",
    "triton",
    "tilelang",
    "tvm",
    "tvm-ffi",
    "torch",
    "C/C++ compiler",
    "nvcc",
    "ninja",
]
COMPONENTS = [
    "tensorplay-core",
    "tensorplay-library",
    "tensorplay-compile",
    "tensorplay-kernels",
    "tensorplay-cppjit",
    "tensorplay-nn",
]


def _env(extra_path=(), **overrides) -> dict:
    # the subprocess must import this very tensorplay (source tree or install)
    roots = [str(Path(p).parent) for p in tp.__path__]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [*map(str, extra_path), *roots, *filter(None, [env.get("PYTHONPATH")])]
    )
    env.update(overrides)
    return env


def run_cli(*args, extra_path=(), **env) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "tensorplay", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(extra_path, **env),
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout


def line_of(out: str, label: str) -> str:
    m = re.search(rf"^  {re.escape(label)} +: (.+)$", out, re.M)
    assert m, f"no line for {label!r} in:\n{out}"
    return m.group(1)


@pytest.fixture(scope="module")
def report() -> str:
    return run_cli()


def test_header_versions_and_location(report):
    import ml_dtypes
    import numpy as np

    assert report.startswith(f"TensorPlay {tp.__version__}\n")
    assert str(Path(tp.__file__).parent) in line_of(report, "location")
    assert line_of(report, "python").startswith(sys.version.split()[0])
    assert line_of(report, "numpy") == np.__version__
    assert line_of(report, "ml_dtypes") == ml_dtypes.__version__


def test_every_component_is_reported(report):
    for dist in COMPONENTS:
        line = line_of(report, dist)
        assert re.match(r"(installed \(.+\)|no distribution metadata); import tensorplay", line)
        assert line.endswith(": ok") or "fails:" in line or "not available:" in line
    assert line_of(report, "tensorplay-core").endswith("import tensorplay: ok")


def test_every_capability_is_available_or_says_why(report):
    for label in CAPABILITIES:
        line = line_of(report, label)
        if not line.startswith("available ("):
            # a reason, not just "unavailable"
            assert re.match(
                r"(not installed|not available|not found|installed \(.*\) but)"
                r".*: \S",
                line,
            ), line


@pytest.mark.parametrize(
    "label,module",
    [
        ("triton", "triton"),
        ("tilelang", "tilelang"),
        ("tvm", "tvm"),
        ("tvm-ffi", "tvm_ffi"),
        ("torch", "torch"),
    ],
)
def test_package_lines_agree_with_find_spec(report, label, module):
    line = line_of(report, label)
    if importlib.util.find_spec(module) is None:
        assert line == f"not installed: No module named '{module}'"
    else:
        assert line.startswith(("available (", "installed ("))


def test_cuda_line_matches_tp_cuda(report):
    line = line_of(report, "CUDA/CuPy")
    why = tp.cuda.unavailable_reason()
    if why is None:
        assert line.startswith("available (CuPy ")
    else:
        assert line == f"not available: {why}"


def test_main_returns_zero_in_process(capsys):
    assert cli.main(["--no-import-check"]) == 0
    out = capsys.readouterr().out
    for label in CAPABILITIES:
        line_of(out, label)


def test_a_failing_probe_does_not_crash(monkeypatch, capsys):
    def boom():
        raise OSError("simulated probe failure")

    monkeypatch.setattr(cli, "probe_compiler", boom)
    assert cli.main(["--no-import-check"]) == 0
    assert line_of(capsys.readouterr().out, "C/C++ compiler") == (
        "probe failed: OSError: simulated probe failure"
    )


def _fake_packages(tmp_path) -> Path:
    """A ``triton`` that fails to import and a ``tilelang`` that, like the real one,
    rewrites ``sys.path`` when imported (and leaves a marker when it is)."""
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton/__init__.py").write_text('raise ImportError("libcuda.so.1: not found")\n')
    (tmp_path / "tilelang").mkdir()
    (tmp_path / "tilelang/__init__.py").write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, "/nonexistent/tilelang/3rdparty/tvm")
        open({str(tmp_path / "imported")!r}, "a").write("x")
    """)
    )
    return tmp_path


def test_broken_package_reports_its_import_error(tmp_path):
    out = run_cli(extra_path=[_fake_packages(tmp_path)])
    # (the version is whatever metadata says: a real triton may be installed underneath)
    assert re.fullmatch(
        r"installed \(.+\) but import fails: ImportError: libcuda.so.1: not found",
        line_of(out, "triton"),
    )
    assert re.fullmatch(r"available \(.+\)", line_of(out, "tilelang"))
    # imported only in its own subprocess: this report's process was not affected
    assert (tmp_path / "imported").read_text() == "x"


def test_probing_does_not_import_packages(tmp_path, monkeypatch):
    fake = _fake_packages(tmp_path)
    monkeypatch.syspath_prepend(str(fake))
    before = list(sys.path)
    # other tests may have imported them already (torch imports triton on CUDA machines):
    # what matters is that collecting the report imports nothing new
    loaded = {m for m in ("tilelang", "triton") if m in sys.modules}
    report = cli.collect(check_imports=False)
    caps = dict(report["Capabilities"])
    assert caps["triton"].startswith("available (")
    assert {m for m in ("tilelang", "triton") if m in sys.modules} == loaded
    assert sys.path == before and not (tmp_path / "imported").exists()


def test_missing_toolchain_is_explained():
    out = run_cli("--no-import-check", PATH="/nonexistent", CUDA_HOME="", CUDA_PATH="")
    assert line_of(out, "C/C++ compiler").startswith("not found: none of g++")
    assert line_of(out, "nvcc").startswith("not found: nvcc is not on PATH")
    assert line_of(out, "ninja").startswith("not found: ninja is not on PATH")
