"""Build all six wheels and install them into fresh venvs, as a user would.

Our distributions come only from the freshly built wheels (``--no-index --find-links``);
third-party dependencies are installed first from the index, in a separate step. PyPI's
unrelated ``tensorplay`` must never be picked up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VERSION_FILE = REPO / "packages" / "tensorplay-core" / "src" / "tensorplay" / "_version.py"
DISTS = [
    "tensorplay-core",
    "tensorplay-library",
    "tensorplay-compile",
    "tensorplay-kernels",
    "tensorplay-cppjit",
    "tensorplay",
]
MODULES = {
    "tensorplay-core": "tensorplay",
    "tensorplay-library": "tensorplay.library",
    "tensorplay-compile": "tensorplay.graph",
    "tensorplay-kernels": "tensorplay.kernels",
    "tensorplay-cppjit": "tensorplay.utils.cpp_jit",
}
THIRD_PARTY_CORE = ["numpy>=2", "ml_dtypes>=0.4"]
THIRD_PARTY_CPPJIT = ["apache-tvm-ffi>=0.1.12", "ninja"]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(cmd: list[str], cwd: Path) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def repo_version() -> str:
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)', VERSION_FILE.read_text(), re.M)
    assert match, VERSION_FILE
    return match.group(1)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out)]
        + [str(REPO / "packages" / d) for d in DISTS],
        cwd=out,
    )
    version = repo_version()
    built = sorted(p.name for p in out.glob("*.whl"))
    # core carries tensorplay._C: a wheel for this interpreter and platform (pure Python,
    # py3-none-any, only if the build could not compile it, which CI does not allow)
    pure = [
        f"{d.replace('-', '_')}-{version}-py3-none-any.whl" for d in DISTS if d != "tensorplay-core"
    ]
    assert sorted(n for n in built if not n.startswith("tensorplay_core-")) == sorted(pure)
    (core,) = [n for n in built if n.startswith(f"tensorplay_core-{version}-")]
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert core.endswith("py3-none-any.whl") or f"-{tag}-{tag}-" in core, core
    if os.environ.get("CI") == "true":
        assert f"-{tag}-{tag}-" in core, f"CI must build tensorplay._C into the core wheel: {core}"
    return out


class Venv:
    def __init__(self, root: Path) -> None:
        self.root = root
        venv.EnvBuilder(with_pip=True, system_site_packages=False).create(root)
        self.python = root / "bin" / "python"
        cfg = (root / "pyvenv.cfg").read_text()
        assert "include-system-site-packages = false" in cfg

    def pip(self, *args: str) -> str:
        return _run([str(self.python), "-m", "pip", *args], cwd=self.root)

    def install_third_party(self, *reqs: str) -> None:
        self.pip("install", "-q", *reqs)

    def install_ours(self, wheels: Path, *names: str) -> None:
        self.pip("install", "-q", "--no-index", "--find-links", str(wheels), *names)

    def ours(self) -> set[str]:
        listed = json.loads(self.pip("list", "--format=json"))
        return {p["name"].lower().replace("_", "-") for p in listed} & set(DISTS)

    def probe(self, modules: list[str]) -> dict[str, object]:
        code = (
            "import importlib, json, sys\n"
            f"mods = {modules!r}\n"
            "res = {m: importlib.import_module(m).__file__ for m in mods}\n"
            "import tensorplay\n"
            "res['__version__'] = tensorplay.__version__\n"
            "print(json.dumps(res))\n"
        )
        return json.loads(_run([str(self.python), "-c", code], cwd=self.root))

    def owns(self, path: object) -> bool:
        return Path(str(path)).resolve().is_relative_to(self.root.resolve())


def test_library_wheel_pulls_in_core_only(wheelhouse: Path, tmp_path: Path) -> None:
    env = Venv(tmp_path / "venv")
    env.install_third_party(*THIRD_PARTY_CORE)
    env.install_ours(wheelhouse, "tensorplay-library")
    assert env.ours() == {"tensorplay-core", "tensorplay-library"}
    found = env.probe(["tensorplay", "tensorplay.library"])
    assert found["__version__"] == repo_version()
    assert env.owns(found["tensorplay"]) and env.owns(found["tensorplay.library"])


def test_core_wheel_alone(wheelhouse: Path, tmp_path: Path) -> None:
    env = Venv(tmp_path / "venv")
    env.install_third_party(*THIRD_PARTY_CORE)
    env.install_ours(wheelhouse, "tensorplay-core")
    assert env.ours() == {"tensorplay-core"}
    found = env.probe(["tensorplay", "tensorplay.utils"])
    assert found["__version__"] == repo_version()
    assert env.owns(found["tensorplay"]), f"{found['tensorplay']} is not in {env.root}"
    assert (env.root / "bin" / "tensorplay").is_file(), "console script `tensorplay` missing"
    # the other components are separate distributions: not installed, not importable
    proc = subprocess.run(
        [str(env.python), "-c", "import tensorplay.library"],
        cwd=env.root,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "tensorplay.library" in proc.stderr
    # the native module came with the wheel (when the build compiled it) and loads
    code = "import tensorplay._native as n; print(n.REASON); assert (n.NATIVE is None) == {pure}"
    core = next(wheelhouse.glob("tensorplay_core-*.whl")).name
    proc = subprocess.run(
        [str(env.python), "-c", code.format(pure=core.endswith("none-any.whl"))],
        cwd=env.root,
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_meta_package_installs_all_five(wheelhouse: Path, tmp_path: Path) -> None:
    env = Venv(tmp_path / "venv")
    env.install_third_party(*THIRD_PARTY_CORE, *THIRD_PARTY_CPPJIT)
    env.install_ours(wheelhouse, "tensorplay")
    assert env.ours() == set(DISTS)
    modules = [*MODULES.values(), "tensorplay.compiler", "tensorplay.utils"]
    found = env.probe(modules)
    assert found["__version__"] == repo_version()
    for module in modules:
        assert env.owns(found[module]), f"{module} imported from {found[module]}"
