"""Is the ``tensorplay`` on this path ours? PyPI has an unrelated ``tensorplay`` (1.x).

It has the same import name. ``pip install --find-links dist/ tensorplay`` without
``--no-index`` picks it over our meta-package, and wheel installs of both write into one
``site-packages/tensorplay/`` folder, each over the other's files.

* :func:`core_is_ours` is cheap, with no metadata and no I/O. Components call it when they
  are imported, through :mod:`tensorplay.utils._require_core`. Our ``__init__`` takes
  ``__version__`` from ``tensorplay._version``. A foreign ``__init__`` never imports that
  module, even when our ``_version.py`` is still on disk next to it.
* :func:`foreign_installs` reads the file lists of all installed distributions (about 50 ms),
  so only ``python -m tensorplay`` and the error path call it.
"""

from __future__ import annotations

import json
import re
import sys

__all__ = ["core_is_ours", "require_core", "foreign_installs", "fix", "foreign_core_message"]

# our distributions that ship files of the ``tensorplay`` package (the meta-package ships none)
OURS = (
    "tensorplay-core",
    "tensorplay-library",
    "tensorplay-compile",
    "tensorplay-kernels",
    "tensorplay-cppjit",
    "tensorplay-nn",
    "tensorplay-oplib",
)
# the start of our meta-package's Summary (packages/tensorplay/pyproject.toml, description)
META_SUMMARY = "TensorPlay: all components"
NEVER = "never `pip install tensorplay` from the index (PyPI's `tensorplay` is another project)"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _our_version() -> str | None:
    try:
        # optional: a foreign ``tensorplay`` has no _version module (see above)
        from tensorplay._version import __version__  # noqa: PLC0415 - may be absent
    except ImportError:
        return None
    return __version__


def core_is_ours() -> bool:
    """True when the imported top-level ``tensorplay`` is TensorPlay's core."""
    tp = sys.modules.get("tensorplay")
    ver = sys.modules.get("tensorplay._version")
    return (
        tp is not None
        and ver is not None
        and getattr(tp, "__version__", None) == getattr(ver, "__version__", "")
    )


def _ships_tensorplay(dist) -> bool:
    files = dist.files
    if files is not None:
        return any(f.parts and f.parts[0] == "tensorplay" for f in files)
    return "tensorplay" in (dist.read_text("top_level.txt") or "").split()


def foreign_installs() -> list[str]:
    """One line per installed distribution that is not ours but is named ``tensorplay`` or
    ships files of the ``tensorplay`` package. Empty when there is none."""
    import importlib.metadata as md  # noqa: PLC0415 - cold path; keeps core_is_ours cheap

    version = _our_version()
    seen: set[tuple[str, str]] = set()
    found = []
    for dist in md.distributions():
        raw = dist.metadata["Name"] or ""
        name = _norm(raw)
        where = str(dist.locate_file(""))
        if name in OURS or (name, where) in seen:
            continue
        seen.add((name, where))
        ships = _ships_tensorplay(dist)
        head = f"distribution {raw!r} {dist.version} in {where}"
        if name == "tensorplay":
            summary = dist.metadata["Summary"] or ""
            if not summary.startswith(META_SUMMARY) or ships:
                found.append(
                    f"{head} is PyPI's unrelated `tensorplay`, not TensorPlay's meta-package: "
                    "it uses the same import name"
                )
            elif dist.version != version:
                found.append(f"{head} is TensorPlay's meta-package, but core is {version}")
        elif ships:
            found.append(f"{head} is not TensorPlay's but ships files of the `tensorplay` package")
    return found


def _installed_ours() -> tuple[list[str], list[str]]:
    """Our component distributions that are installed: (from wheels or paths, editable)."""
    import importlib.metadata as md  # noqa: PLC0415 - cold path; keeps core_is_ours cheap

    plain, editable = [], []
    for name in OURS:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        try:
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
            direct = {}
        (editable if direct.get("dir_info", {}).get("editable") else plain).append(name)
    return plain, editable


def fix() -> str:
    """What to run: remove the foreign ``tensorplay``, then (re)install ours."""
    plain, editable = _installed_ours()
    text = "pip uninstall tensorplay"
    if plain:
        paths = " ".join(f"./packages/{n}" for n in plain)
        text += (
            ", then reinstall ours, since the two wrote over each other's files: "
            f"pip install --force-reinstall --no-deps {paths} (from a TensorPlay checkout) "
            "or pip install --force-reinstall --no-deps --no-index --find-links dist/ "
            f"{' '.join(plain)} (from our wheels)"
        )
    elif not editable:
        text += (
            ", then install ours: pip install ./packages/tensorplay (all components; "
            "./packages/tensorplay-core for core only, from a TensorPlay checkout) or "
            "pip install --no-index --find-links dist/ tensorplay (from our wheels)"
        )
    return f"{text}; {NEVER}"


def foreign_core_message(component: str | None = None) -> str:
    """Why ``tensorplay`` is not our core, what else is installed, and the fix."""
    tp = sys.modules.get("tensorplay")
    where = getattr(tp, "__file__", None) or ", ".join(getattr(tp, "__path__", None) or ["?"])
    got = f"{where}, version {getattr(tp, '__version__', 'unknown')}"
    who = component or "TensorPlay"
    lines = [
        f"{who} needs TensorPlay's core (tensorplay-core), but `import tensorplay` gave another "
        f"package ({got})."
    ]
    lines += [f"Found: {line}." for line in foreign_installs()]
    lines.append(f"Fix: {fix()}.")
    return "\n".join(lines)


def require_core(component: str | None = None) -> None:
    """Raise ImportError naming the problem and the fix unless ``tensorplay`` is our core."""
    if not core_is_ours():
        raise ImportError(foreign_core_message(component))
