#!/usr/bin/env python3
"""Print or set the one TensorPlay version shared by every distribution under packages/.

    python tools/release/version.py               # prints e.g. 0.1.0
    python tools/release/version.py --set 0.2.0   # rewrites _version.py

The single source is packages/tensorplay-core/src/tensorplay/_version.py; every
distribution's build reads it (tools/build/hatch_version.py), including the ``==version``
pins between our own distributions.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

VERSION_FILE = (
    Path(__file__).resolve().parents[2]
    / "packages"
    / "tensorplay-core"
    / "src"
    / "tensorplay"
    / "_version.py"
)
_ASSIGN = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\'][ \t]*$', re.MULTILINE)
# PEP 440 public versions: N(.N)*[{a|b|rc}N][.postN][.devN]
_PEP440 = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


def get_version(path: Path = VERSION_FILE) -> str:
    match = _ASSIGN.search(path.read_text(encoding="utf-8"))
    if match is None:
        raise SystemExit(f'error: no `__version__ = "X.Y.Z"` line in {path}')
    return match.group(1)


def set_version(new: str, path: Path = VERSION_FILE) -> None:
    if not _PEP440.match(new):
        raise SystemExit(f"error: {new!r} is not a PEP 440 version such as 1.2.3 or 1.2.3rc1")
    text = path.read_text(encoding="utf-8")
    updated, count = _ASSIGN.subn(f'__version__ = "{new}"', text, count=1)
    if count != 1:
        raise SystemExit(f'error: no `__version__ = "X.Y.Z"` line in {path}')
    path.write_text(updated, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", metavar="X.Y.Z", help="rewrite _version.py to this version")
    args = parser.parse_args(argv)
    if args.set is not None:
        old = get_version()
        set_version(args.set)
        print(f"{old} -> {get_version()}  ({VERSION_FILE})")
    else:
        print(get_version())
    return 0


if __name__ == "__main__":
    sys.exit(main())
