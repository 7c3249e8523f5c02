"""Install mistakes get a message that names the problem and the fix (issue 14).

* PyPI's unrelated ``tensorplay`` (1.x) shares our import name. ``python -m tensorplay``
  names it, and ``require_core`` (which each component calls) raises ImportError.
* A component that is not installed gets the command that installs it.
* The CUDA hint is one sentence, said once, with the local-path install command.

Foreign installs are faked with a ``.dist-info`` folder in a temporary directory on the path.
Only core is used here: tests/integration/test_install_messages_components.py imports the
components over a foreign core and takes tensorplay-cppjit away.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import tensorplay as tp
import tensorplay.utils
from tensorplay import __main__ as cli, _device
from tensorplay.utils import _install

ROOT = Path(__file__).resolve().parents[2]
CORE_UTILS = ROOT / "packages" / "tensorplay-core" / "src" / "tensorplay" / "utils"
FOREIGN_SUMMARY = "A learner-first, DIY-ready framework for tensors"
META_SUMMARY = "TensorPlay: all components (core, library, compile, kernels, cppjit, nn)."


def fake_dist(site: Path, name: str, version: str, summary: str, files=()) -> Path:
    """A minimal installed distribution: METADATA, and a RECORD listing ``files``. The files
    themselves are not written: they would shadow our ``tensorplay`` in a subprocess."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
    )
    record = [f"{f},," for f in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return site


def pypi_tensorplay(site: Path) -> Path:
    """Like PyPI's tensorplay 1.1.0, whose files sit in a ``tensorplay/`` folder next to ours."""
    files = ["tensorplay/__init__.py", "tensorplay/_tensor.py", "tensorplay/utils/__init__.py"]
    return fake_dist(site, "tensorplay", "1.1.0", FOREIGN_SUMMARY, files)


def _env(extra_path=()) -> dict:
    roots = [str(Path(p).parent) for p in tp.__path__]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, extra_path), *roots])
    return env


def run_py(*args, extra_path=()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, env=_env(extra_path)
    )


# ---- a foreign `tensorplay` distribution ---------------------------------------------------------


def test_nothing_foreign_here():
    assert _install.core_is_ours()
    assert _install.foreign_installs() == []


def test_pypi_tensorplay_is_named(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(pypi_tensorplay(tmp_path)))
    (line,) = _install.foreign_installs()
    assert line == (
        f"distribution 'tensorplay' 1.1.0 in {tmp_path} is PyPI's unrelated `tensorplay`, "
        "not TensorPlay's meta-package: it uses the same import name"
    )


def test_a_foreign_tensorplay_without_files_is_named_by_its_summary(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_dist(tmp_path, "tensorplay", "1.0.0", FOREIGN_SUMMARY)))
    (line,) = _install.foreign_installs()
    assert "'tensorplay' 1.0.0" in line and "PyPI's unrelated `tensorplay`" in line


def test_our_meta_package_is_not_foreign(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(
        str(fake_dist(tmp_path, "tensorplay", tp.__version__, META_SUMMARY))
    )
    assert _install.foreign_installs() == []


def test_our_meta_package_of_another_release_is_named(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_dist(tmp_path, "tensorplay", "0.0.1", META_SUMMARY)))
    (line,) = _install.foreign_installs()
    assert line.endswith(
        f"'tensorplay' 0.0.1 in {tmp_path} is TensorPlay's meta-package, "
        f"but core is {tp.__version__}"
    )


def test_another_distribution_shipping_tensorplay_files_is_named(tmp_path, monkeypatch):
    site = fake_dist(tmp_path, "tensorplay-extras", "2.0", "x", ["tensorplay/extras.py"])
    # Python >= 3.12 lists only the RECORD files that exist; this process imported our
    # tensorplay already, so the file cannot shadow it here
    (site / "tensorplay").mkdir()
    (site / "tensorplay" / "extras.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    (line,) = _install.foreign_installs()
    assert line == (
        f"distribution 'tensorplay-extras' 2.0 in {tmp_path} is not TensorPlay's "
        "but ships files of the `tensorplay` package"
    )


@pytest.mark.parametrize(
    "plain,editable,expect",
    [
        # wheel installs of both wrote into one folder: ours must be written again
        (
            ["tensorplay-core", "tensorplay-library"],
            [],
            "pip uninstall tensorplay, then reinstall ours, since the two wrote over each "
            "other's files: pip install --force-reinstall --no-deps ./packages/tensorplay-core "
            "./packages/tensorplay-library (from a TensorPlay checkout) or pip install "
            "--force-reinstall --no-deps --no-index --find-links dist/ tensorplay-core "
            "tensorplay-library (from our wheels)",
        ),
        # editable installs live in the checkout: removing the foreign one is enough
        ([], ["tensorplay-core"], "pip uninstall tensorplay"),
        # none of ours: install them, never by name from the index
        (
            [],
            [],
            "pip uninstall tensorplay, then install ours: pip install ./packages/tensorplay "
            "(all components; ./packages/tensorplay-core for core only, from a TensorPlay "
            "checkout) or pip install --no-index --find-links dist/ tensorplay (from our wheels)",
        ),
    ],
)
def test_fix_fits_what_is_installed(monkeypatch, plain, editable, expect):
    monkeypatch.setattr(_install, "_installed_ours", lambda: (plain, editable))
    assert _install.fix() == f"{expect}; never `pip install tensorplay` from the index " + (
        "(PyPI's `tensorplay` is another project)"
    )


def test_cli_reports_a_foreign_tensorplay_and_exits_1(tmp_path):
    r = run_py("-m", "tensorplay", "--no-import-check", extra_path=[pypi_tensorplay(tmp_path)])
    assert r.returncode == 1, r.stderr
    problems = r.stdout.split("\nProblems (a `tensorplay` that is not ours):\n", 1)[1]
    found, fix = problems.splitlines()
    assert found == (
        f"  distribution 'tensorplay' 1.1.0 in {tmp_path} is PyPI's unrelated `tensorplay`, "
        "not TensorPlay's meta-package: it uses the same import name"
    )
    assert fix.startswith("  Fix: pip uninstall tensorplay")
    assert fix.endswith(
        "never `pip install tensorplay` from the index (PyPI's `tensorplay` is another project)"
    )
    # the rest of the report is still there
    assert r.stdout.startswith(f"TensorPlay {tp.__version__}\n")
    assert "\nComponents:\n" in r.stdout and "\nCapabilities:\n" in r.stdout


def test_cli_without_problems_exits_0(capsys):
    assert cli.main(["--no-import-check"]) == 0
    assert "Problems" not in capsys.readouterr().out


# ---- `import tensorplay` gives someone else's package --------------------------------------------


@pytest.fixture
def foreign_core(monkeypatch):
    """``sys.modules['tensorplay']`` is another package, as after PyPI's tensorplay was
    installed over ours: its ``__init__`` never imports our ``tensorplay._version``."""
    fake = types.ModuleType("tensorplay")
    fake.__version__ = "1.1.0"
    fake.__file__ = "/site-packages/tensorplay/__init__.py"
    fake.__path__ = list(tp.__path__)
    monkeypatch.setitem(sys.modules, "tensorplay", fake)
    monkeypatch.delitem(sys.modules, "tensorplay._version")
    return fake


def test_require_core_names_the_problem_and_fix(foreign_core, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(pypi_tensorplay(tmp_path)))
    assert not _install.core_is_ours()
    with pytest.raises(ImportError) as e:
        _install.require_core("tensorplay.library (tensorplay-library)")
    first, found, fix = str(e.value).splitlines()
    assert first == (
        "tensorplay.library (tensorplay-library) needs TensorPlay's core (tensorplay-core), "
        "but `import tensorplay` gave another package "
        "(/site-packages/tensorplay/__init__.py, version 1.1.0)."
    )
    assert found.startswith("Found: distribution 'tensorplay' 1.1.0 in ")
    assert fix.startswith("Fix: pip uninstall tensorplay")


def test_cli_refuses_to_report_on_a_foreign_core(foreign_core, capsys):
    assert cli.main(["--no-import-check"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(
        "python -m tensorplay needs TensorPlay's core (tensorplay-core), but `import tensorplay` "
        "gave another package (/site-packages/tensorplay/__init__.py, version 1.1.0)."
    )
    assert "\nFix: pip uninstall tensorplay" in out.err


# ---- the Components lines of python -m tensorplay ------------------------------------------------


def test_other_utils_attributes_stay_attribute_errors():
    with pytest.raises(AttributeError, match="has no attribute 'no_such_thing'"):
        tp.utils.no_such_thing  # noqa: B018
    assert not hasattr(tp.utils, "no_such_thing")


def test_cli_component_line_gives_the_install_command():
    line = cli.probe_component("tensorplay-cppjit", "tensorplay.utils.no_such_module", False)
    assert line.endswith(
        "import tensorplay.utils.no_such_module: not available: "
        "No module named 'tensorplay.utils.no_such_module'; "
        "pip install ./packages/tensorplay-cppjit "
        "(or --no-index --find-links dist/ tensorplay-cppjit)"
    )


# ---- the CUDA hint -------------------------------------------------------------------------------


@pytest.fixture
def cupy_state(monkeypatch):
    """Recompute CuPy's availability under the test's ``sys.modules``; restore it after."""
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    _device._cupy.cache_clear()
    yield monkeypatch
    _device._cupy.cache_clear()


CUDA_HINT = (
    "CuPy is not installed; add it with the CUDA extra of tensorplay-core: "
    "pip install './packages/tensorplay-core[cuda]' from a TensorPlay checkout"
)


def test_cuda_hint_without_cupy_is_one_sentence_said_once(cupy_state):
    cupy_state.setitem(sys.modules, "cupy", None)  # `import cupy` -> ModuleNotFoundError
    assert tp.cuda.unavailable_reason() == CUDA_HINT
    with pytest.raises(RuntimeError) as e:
        tp.ones(2, device="cuda")
    msg = str(e.value)
    assert msg == f"CUDA is not available: {CUDA_HINT}"
    assert msg.count("pip install") == 1
    # never by name: tensorplay-core is on no index
    assert "pip install 'tensorplay-core" not in msg and "pip install tensorplay" not in msg


def test_cuda_hint_for_a_cupy_that_does_not_import(cupy_state, tmp_path):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(
        'raise ImportError("libcudart.so.13: cannot open shared object file")\n'
    )
    cupy_state.syspath_prepend(str(tmp_path))
    assert tp.cuda.unavailable_reason() == (
        "CuPy is installed but does not import: "
        "ImportError: libcudart.so.13: cannot open shared object file"
    )


def test_cli_cuda_line_says_it_once(cupy_state):
    cupy_state.setitem(sys.modules, "cupy", None)
    assert cli.probe_cuda() == f"not available: {CUDA_HINT}"


# ---- the README's wheel route --------------------------------------------------------------------


def test_every_find_links_install_in_the_readme_has_no_index():
    text = (ROOT / "README.md").read_text()
    installs = [ln for ln in text.splitlines() if "pip install" in ln and "--find-links" in ln]
    assert installs, "the README shows no wheel install"
    for line in installs:
        assert "--no-index" in line, line
