"""Install every TensorPlay distribution the way a user would, and run its tests there.

Each case gets a fresh virtual environment with one distribution (or the meta-package),
optionally with extras, installed from our wheels, and runs the tests of what it installed
from that environment. A second kind of case only asks pip's resolver what an install
would choose (``--dry-run --report``): extras that need hardware or packages CI cannot
install (``cuda``, ``tilelang``) are checked that way.

Our distributions never come from an index: PyPI's ``tensorplay`` is an unrelated project.
So every install is two steps: the third-party requirements (read from our wheels'
metadata, extras included) from the index, then ours with ``--no-index --find-links
<wheels>`` -- the separation the README's route gets by ``pip wheel``-ing both into dist/.

    python tools/check_installs.py                 # build the wheels, run every case
    python tools/check_installs.py --only core library
    python tools/check_installs.py --wheels dist/  # use wheels built elsewhere (cibuildwheel)
    python tools/check_installs.py --list

Prints a table (case, install seconds, test seconds, result) and exits non-zero when any
case fails. ``.ci/run`` and ``.github/workflows/wheels.yml`` run it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
OURS = (
    "tensorplay-core",
    "tensorplay-library",
    "tensorplay-compile",
    "tensorplay-kernels",
    "tensorplay-cppjit",
    "tensorplay-nn",
    "tensorplay-oplib",
    "tensorplay",
)
TEST_TOOLS = ["pytest>=8", "hypothesis>=6"]


@dataclasses.dataclass(frozen=True)
class Case:
    """One install: ``requirement`` (ours, with extras) and what proves it works there."""

    requirement: str
    tests: tuple[str, ...] = ()  # pytest paths, relative to the repository root
    commands: tuple[tuple[str, ...], ...] = ()  # the venv's python's arguments, or bin/<script>
    pins: tuple[str, ...] = ()  # third-party versions to test instead of the newest

    @property
    def name(self) -> str:
        return f"{self.requirement} with {', '.join(self.pins)}" if self.pins else self.requirement


@dataclasses.dataclass(frozen=True)
class ResolveCase:
    """Ask the resolver only. ``conflict`` is the documented reason it must refuse, if any."""

    requirement: str
    forbidden: tuple[str, ...] = ()  # distributions the resolution must not contain
    conflict: str | None = None

    @property
    def name(self) -> str:
        return f"{self.requirement} (resolve only)"


# CI sets TENSORPLAY_REQUIRE_NATIVE=1: then the core wheel must carry a working tensorplay._C.
NATIVE_LOADS = (
    "import os, tensorplay._native as n; "
    "assert n.NATIVE is not None or os.environ.get('TENSORPLAY_REQUIRE_NATIVE') != '1', n.REASON"
)
CASES: tuple[Case | ResolveCase, ...] = (
    Case(
        "tensorplay-core",
        tests=("tests/core",),
        commands=(("-c", NATIVE_LOADS), ("bin/tensorplay",)),  # the console script
    ),
    Case("tensorplay-library", tests=("tests/library",)),
    Case("tensorplay-compile", tests=("tests/compile",)),
    Case("tensorplay-compile[tvm]", tests=("tests/compile",)),
    Case("tensorplay-kernels", tests=("tests/kernels",)),
    Case("tensorplay-kernels[triton]", tests=("tests/kernels",)),
    Case("tensorplay-cppjit", tests=("tests/cppjit",)),
    Case("tensorplay-nn", tests=("tests/nn",)),
    Case("tensorplay-oplib", tests=("tests/oplib",)),
    Case(
        "tensorplay",
        tests=("tests/integration/test_docs.py",),
        commands=(("examples/quickstart.py",), ("-m", "tensorplay")),
    ),
    # The oldest releases the declared ranges admit (the cases above get the newest).
    Case(
        "tensorplay[tvm,triton]",
        tests=("tests/core", "tests/compile", "tests/kernels"),
        pins=("numpy==2.2.*", "ml_dtypes==0.4.*", "apache-tvm==0.26.0", "triton==3.5.1"),
    ),
    # [all] = cuda + tvm + triton: no GPU here, so the resolver's choice is what is checked;
    # it must not reach torch (a multi-GB download by name).
    ResolveCase("tensorplay[all]", forbidden=("torch",)),
    # tilelang 0.1.15 pins apache-tvm-ffi<0.1.13; apache-tvm 0.26 (our oldest) needs
    # >=0.1.13.post2. pip must refuse the pair, not fall back to an apache-tvm we don't support.
    ResolveCase("tensorplay[tvm,tilelang]", conflict="apache-tvm-ffi"),
)


@dataclasses.dataclass
class Outcome:
    name: str
    ok: bool
    install_s: float = 0.0
    test_s: float = 0.0
    summary: str = ""
    log: str = ""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.pop("TENSORPLAY_PURE_PYTHON", None)  # the installed wheel decides
    return env


def _run(cmd: list[str], log: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    log.append(f"$ {' '.join(cmd)}\n{proc.stdout[-6000:]}{proc.stderr[-6000:]}")
    return proc


# ---- wheels and their metadata --------------------------------------------------------------


def build_wheels(out: Path, python: str) -> None:
    """Our eight wheels: seven pure Python, core for this interpreter and platform (pure only
    when no compiler could build tensorplay._C, which TENSORPLAY_REQUIRE_NATIVE=1 forbids)."""
    cmd = [python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out)]
    subprocess.run(cmd + [str(REPO / "packages" / d) for d in OURS], check=True, env=_env())
    tag = subprocess.run(
        [python, "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for wheel in out.glob("*.whl"):
        native = wheel.name.startswith("tensorplay_core-") and f"-{tag}-{tag}-" in wheel.name
        if not (native or wheel.name.endswith("-py3-none-any.whl")):
            raise SystemExit(f"error: unexpected wheel tag: {wheel.name}")
        if wheel.name.startswith("tensorplay_core-") and not native:
            if os.environ.get("TENSORPLAY_REQUIRE_NATIVE") == "1":
                raise SystemExit(f"error: the core wheel has no tensorplay._C: {wheel.name}")


@dataclasses.dataclass(frozen=True)
class Wheelhouse:
    """A folder with our eight wheels, and what their metadata says (read once): the version
    (core's) and each distribution's Requires-Dist."""

    path: Path
    version: str
    requires: dict[str, tuple[Requirement, ...]]  # canonical name -> Requires-Dist

    @classmethod
    def read(cls, path: Path) -> Wheelhouse:
        requires: dict[str, tuple[Requirement, ...]] = {}
        version = ""
        for wheel in sorted(path.glob("*.whl")):
            with zipfile.ZipFile(wheel) as zf:
                name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
                meta = Parser().parsestr(zf.read(name).decode())
            dist = canonicalize_name(meta["Name"])
            if dist == "tensorplay-core":
                version = meta["Version"]
            if dist in OURS:
                reqs = tuple(Requirement(r) for r in meta.get_all("Requires-Dist") or [])
                requires.setdefault(dist, reqs)
        missing = set(OURS) - set(requires)
        if missing:
            raise SystemExit(f"error: no wheel for {sorted(missing)} in {path}")
        return cls(path, version, requires)

    def resolve(self, requirement: str) -> tuple[set[str], list[str]]:
        """What an install of ``requirement`` brings: our distributions (exactly these, no
        others), and the third-party requirements, transitively through ours and their
        extras (markers applied, then dropped)."""
        ours: set[str] = set()
        third: list[str] = []
        seen: set[tuple[str, frozenset[str]]] = set()
        todo = [Requirement(requirement)]
        while todo:
            req = todo.pop()
            key = (canonicalize_name(req.name), frozenset(req.extras))
            if key in seen:
                continue
            seen.add(key)
            ours.add(key[0])
            for dep in self.requires[key[0]]:
                if dep.marker is not None and not any(
                    dep.marker.evaluate({"extra": extra}) for extra in (req.extras or {""})
                ):
                    continue
                if canonicalize_name(dep.name) in OURS:
                    todo.append(dep)
                    continue
                extras = f"[{','.join(sorted(dep.extras))}]" if dep.extras else ""
                text = f"{dep.name}{extras}{dep.specifier}"
                if text not in third:
                    third.append(text)
        return ours, third


# ---- the cases ------------------------------------------------------------------------------


def run_case(case: Case, wheels: Wheelhouse, python: str, work: Path) -> Outcome:
    log: list[str] = []
    venv = work / re.sub(r"[^A-Za-z0-9]+", "-", case.name)
    t0 = time.perf_counter()
    _run([python, "-m", "venv", "--clear", str(venv)], log)
    py = str(venv / "bin" / "python")
    expected, deps = wheels.resolve(case.requirement)
    steps = [
        [py, "-m", "pip", "install", "-q", *deps, *case.pins, *TEST_TOOLS],
        [py, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels.path)]
        + [case.requirement],
    ]
    for step in steps:
        if _run(step, log).returncode != 0:
            return Outcome(case.name, False, time.perf_counter() - t0, 0, "install failed", log[-1])
    install_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    ok, summary = True, []
    # exactly the closure of ours the requirement declares, imported from this venv
    listed = json.loads(_run([py, "-m", "pip", "list", "--format=json"], log).stdout)
    installed = {canonicalize_name(p["name"]) for p in listed} & set(OURS)
    if installed != expected:
        ok = False
        summary.append(f"installed {sorted(installed)}, declared {sorted(expected)}")
    where = _run([py, "-c", "import tensorplay; print(tensorplay.__file__)"], log, cwd=work)
    if not Path(where.stdout.strip() or "/").resolve().is_relative_to(venv.resolve()):
        ok = False
        summary.append(f"`import tensorplay` found {where.stdout.strip() or where.stderr[-300:]}")
    for command in case.commands:
        script = command[0].startswith("bin/")
        proc = _run([str(venv / command[0]), *command[1:]] if script else [py, *command], log)
        if proc.returncode != 0:
            ok = False
            summary.append(f"`{' '.join(command)}` exited {proc.returncode}")
    if case.tests:
        # -rfE: the log's tail lists the failures, not thousands of expected skips
        pytest = [py, "-m", "pytest", *case.tests, "-q", "-rfE", "-p", "no:cacheprovider"]
        proc = _run(pytest, log)
        last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1].strip("= ")
        summary.append(last)
        ok = ok and proc.returncode == 0
    return Outcome(
        case.name, ok, install_s, time.perf_counter() - t1, "; ".join(summary), "\n".join(log)
    )


def resolve_case(case: ResolveCase, wheels: Wheelhouse, python: str, work: Path) -> Outcome:
    log: list[str] = []
    t0 = time.perf_counter()
    report = work / (re.sub(r"[^A-Za-z0-9]+", "-", case.name) + ".json")
    # One resolve needs the index (third-party) and our wheels together, so --no-index is
    # out; our names are pinned to our exact version instead, which PyPI's unrelated
    # `tensorplay` does not have, and the report is checked for it.
    version = wheels.version
    pins = work / "ours.txt"
    pins.write_text("".join(f"{d}=={version}\n" for d in OURS))
    cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
    cmd += ["--report", str(report), "--find-links", str(wheels.path), "-c", str(pins)]
    proc = _run(cmd + [case.requirement], log)
    took = time.perf_counter() - t0
    if case.conflict is not None:
        refused = proc.returncode != 0 and case.conflict in proc.stderr
        summary = (
            f"refused as documented ({case.conflict} conflict)"
            if refused
            else f"pip did not refuse over {case.conflict}: the conflict is gone or changed; "
            "update the extras and docs/install notes"
        )
        return Outcome(case.name, refused, took, 0, summary, "\n".join(log))
    if proc.returncode != 0:
        return Outcome(case.name, False, took, 0, "did not resolve", "\n".join(log))
    chosen = {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    bad = sorted(set(chosen) & {canonicalize_name(f) for f in case.forbidden})
    wrong_ours = sorted(d for d in OURS if d in chosen and chosen[d] != version)
    notable = ", ".join(
        f"{k} {chosen[k]}" for k in ("apache-tvm", "triton", "cupy-cuda13x") if k in chosen
    )
    if bad or wrong_ours:
        return Outcome(
            case.name,
            False,
            took,
            0,
            f"resolved to forbidden {bad} / foreign {wrong_ours}",
            "\n".join(log),
        )
    return Outcome(case.name, True, took, 0, f"{len(chosen)} packages: {notable}", "\n".join(log))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="CASE", help="run the cases named so")
    parser.add_argument("--wheels", type=Path, help="use these wheels instead of building")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venvs")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    parser.add_argument("--list", action="store_true", help="print the case names and exit")
    parser.add_argument("--workdir", type=Path, help="keep the venvs here (default: a temp dir)")
    args = parser.parse_args(argv)

    cases = [c for c in CASES if not args.only or c.requirement in args.only]
    if args.list:
        print("\n".join(c.name for c in CASES))
        return 0
    if not cases:
        parser.error(f"--only matched no case; the cases are: {[c.requirement for c in CASES]}")

    with tempfile.TemporaryDirectory(prefix="tensorplay-installs-") as tmp:
        work = Path(tmp) if args.workdir is None else args.workdir.resolve()
        work.mkdir(parents=True, exist_ok=True)
        folder = args.wheels
        if folder is None:
            folder = work / "wheels"
            t0 = time.perf_counter()
            build_wheels(folder, args.python)
            print(f"built our wheels in {time.perf_counter() - t0:.0f} s:", flush=True)
            for wheel in sorted(folder.glob("*.whl")):
                print(f"  {wheel.name}")
        wheels = Wheelhouse.read(folder)  # all eight are there

        def one(case: Case | ResolveCase) -> Outcome:
            if isinstance(case, ResolveCase):
                return resolve_case(case, wheels, args.python, work)
            return run_case(case, wheels, args.python, work)

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(pool.map(one, cases))
        total = time.perf_counter() - t0

    width = max(len(o.name) for o in outcomes)
    print(f"\n{'case':<{width}}  install s  tests s  result")
    for o in outcomes:
        status = "ok  " if o.ok else "FAIL"
        print(f"{o.name:<{width}}  {o.install_s:9.0f}  {o.test_s:7.0f}  {status} {o.summary}")
    print(f"total {total:.0f} s wall, {args.jobs} at a time, Python {_version(args.python)}")
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        print(f"\n---- {o.name}: {o.summary}\n{o.log[-8000:]}", file=sys.stderr)
    return 1 if failed else 0


def _version(python: str) -> str:
    out = subprocess.run([python, "--version"], capture_output=True, text=True).stdout
    return out.split()[-1] if out else "?"


if __name__ == "__main__":
    sys.exit(main())
