"""How an op library is found once installed: the entry point ``tp.ops.<namespace>`` loads
on its first miss (core's seam), the report of ``python -m tensorplay``, the CLI's wheel.

"Installed" here is a folder on PYTHONPATH holding the built package and a dist-info with
the entry point, as a wheel lays them out; each check runs in a new process."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tensorplay as tp
from tensorplay import oplib

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "oplib" / "ops.yaml"


def install(site: Path, dist: str, namespace: str, value: str) -> None:
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tensorplay.oplibs]\n{namespace} = {value}\n")


def run(site: Path, code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    return subprocess.run(
        [sys.executable, *args] if args else [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture
def site(example, tmp_path):
    """The example library installed in a folder (the package and its entry point)."""
    site = tmp_path / "site"
    shutil.copytree(example.path, site / example.path.name)
    install(site, "oplib-example", "oplib_example", f"{example.path.name}:register")
    return site


def test_first_access_loads_the_library_through_its_entry_point(site):
    proc = run(
        site,
        "import sys, tensorplay as tp\n"
        "assert 'tensorplay.oplib' not in sys.modules\n"
        "y = tp.ops.oplib_example.sum_of_squares(tp.tensor([[1.0, 2.0], [3.0, 4.0]]), 1)\n"
        "print(y.tolist(), sorted(dir(tp.ops.oplib_example)))",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("] [")[0] == "[5.0, 25.0"
    assert (
        "'fused_bias_gelu', 'fused_bias_gelu_backward', 'scale_', 'sum_of_squares'" in proc.stdout
    )


def test_an_unknown_namespace_is_still_an_attribute_error(site):
    proc = run(site, "import tensorplay as tp\nprint(hasattr(tp.ops, 'not_installed'))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_a_failing_entry_point_names_the_distribution(site):
    (site / "broken_lib.py").write_text("def register():\n    raise ValueError('no kernels')\n")
    install(site, "broken-dist", "broken_ns", "broken_lib:register")
    proc = run(site, "import tensorplay as tp\ntp.ops.broken_ns")
    assert proc.returncode != 0
    assert (
        "ImportError: tp.ops.broken_ns: the operator library installed by broken-dist 1.0 failed "
        "to load (entry point broken_ns = broken_lib:register in group 'tensorplay.oplibs'): "
        "ValueError: no kernels"
    ) in proc.stderr


def test_a_library_built_for_another_tensorplay_is_refused_through_tp_ops(site, example):
    meta_file = site / example.path.name / "oplib.json"
    meta = json.loads(meta_file.read_text())
    meta["tensorplay_version"] = "0.0.1"
    meta_file.write_text(json.dumps(meta))
    proc = run(site, "import tensorplay as tp\ntp.ops.oplib_example")
    assert proc.returncode != 0
    assert "installed by oplib-example 1.0 failed to load" in proc.stderr
    assert f"built for TensorPlay 0.0.1, but this is TensorPlay {tp.__version__}" in proc.stderr
    assert "Rebuild it here" in proc.stderr


def test_the_report_lists_installed_libraries_without_loading_them(site):
    proc = run(site, "", "-m", "tensorplay", "--no-import-check")
    line = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("oplib_example "))
    # cuda is listed where the build found nvcc
    assert re.search(
        r"oplib-example 1\.0: 4 ops: fused_bias_gelu \[cpu(, cuda)?\], "
        r"fused_bias_gelu_backward \[cpu(, cuda)?\]",
        line,
    ), line
    assert "scale_ [cpu]" in line
    listed = run(site, "", "-m", "tensorplay.oplib", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(
        f"oplib_example: oplib-example 1.0 (TensorPlay {tp.__version__})"
    )


def test_the_cli_builds_an_installable_wheel(tmp_path):
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "tensorplay.oplib", "build", str(EXAMPLE), "-o", str(out)]
        + ["--cuda", "off", "--name", "example-ops", "--version", "1.2.3"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    wheel = Path(proc.stdout.strip())
    assert wheel.parent == out and wheel.name.startswith("example_ops-1.2.3-py3-none-")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read("example_ops-1.2.3.dist-info/METADATA").decode()
        lib = json.loads(zf.read("_tensorplay_oplib_oplib_example/oplib.json"))
    assert "_tensorplay_oplib_oplib_example/oplib_example_cpu.so" in names
    assert f"Requires-Dist: tensorplay-oplib=={tp.__version__}" in meta
    assert lib["not_built"] == {"cuda": "the CUDA build was switched off (cuda='off' / --cuda off)"}
    target = tmp_path / "target"  # pip accepts the wheel (RECORD, tags, metadata)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    done = subprocess.run(
        pip + ["--target", str(target), str(wheel)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (target / "_tensorplay_oplib_oplib_example" / "oplib_example_cpu.so").is_file()


def test_the_cli_reports_a_bad_definition_with_its_line(tmp_path):
    (tmp_path / "ops.yaml").write_text(
        "namespace: cli_bad\nops:\n  - schema: f(Tensor x) -> Tensor\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tensorplay.oplib", "build", str(tmp_path / "ops.yaml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: {tmp_path / 'ops.yaml'}:3: cli_bad::f: 'kernels' must")
    assert not (tmp_path / "dist").exists()


def test_installed_reads_the_metadata_of_installed_libraries():
    assert all("namespace" in lib for lib in oplib.installed())


def test_installed_oplibs_and_versions_come_from_the_metadata(site):
    proc = run(
        site,
        "import importlib.metadata as md\n"
        "from tensorplay._extension import distribution_version, installed_oplibs\n"
        "ours = sorted((e.name, e.value, e.dist.name, e.dist.version)\n"
        "              for eps in installed_oplibs().values() for e in eps)\n"
        "theirs = sorted((e.name, e.value, e.dist.name, e.dist.version)\n"
        "                for e in md.entry_points(group='tensorplay.oplibs'))\n"
        "assert ours == theirs and ('oplib_example' in dict((n, v) for n, v, *_ in ours)), ours\n"
        "assert distribution_version('apache-tvm-ffi') == md.version('apache-tvm-ffi')\n"
        "assert distribution_version('no-such-distribution') is None\n",
    )
    assert proc.returncode == 0, proc.stderr
