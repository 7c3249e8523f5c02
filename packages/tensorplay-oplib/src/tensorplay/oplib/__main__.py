"""``python -m tensorplay.oplib``: build an op library's wheel without hatch, list installed ones.

    python -m tensorplay.oplib build ops.yaml -o dist/ [--name N] [--version V] [--check]
                                                       [--cuda auto|on|off]
    python -m tensorplay.oplib list

A definition error prints ``file:line: namespace::op: what to change`` and exits with 1.
"""

from __future__ import annotations

import argparse
import sys

from tensorplay.oplib._errors import OplibError
from tensorplay.oplib._installed import installed
from tensorplay.oplib._wheel import build_wheel

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tensorplay.oplib", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the library's wheel")
    b.add_argument("schema", help="the library's YAML file")
    b.add_argument("-o", "--output", default="dist", help="folder for the wheel (default dist/)")
    b.add_argument("--name", help="distribution name (default: the namespace, with - for _)")
    b.add_argument("--version", default="0.1.0", help="distribution version (default 0.1.0)")
    b.add_argument("--check", action="store_true", help="opcheck every operator after building")
    b.add_argument("--cuda", choices=("auto", "on", "off"), default="auto")
    sub.add_parser("list", help="list the installed op libraries")
    args = parser.parse_args(argv)
    if args.command == "list":
        for lib in installed():
            head = f"{lib['namespace']}: {lib['distribution']} {lib['version']}"
            if "error" in lib:
                print(f"{head}: {lib['error']}")
                continue
            ops = ", ".join(f"{n} [{', '.join(d) or 'no kernel'}]" for n, d in lib["ops"].items())
            print(f"{head} (TensorPlay {lib['tensorplay_version']}): {ops}")
        return 0
    try:
        wheel = build_wheel(
            args.schema,
            args.output,
            name=args.name,
            version=args.version,
            check=args.check,
            cuda=args.cuda,
        )
    except OplibError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
