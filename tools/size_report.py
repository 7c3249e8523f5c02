"""Lines of Python per distribution (code, excluding blanks and comments), tinygrad-style.

    python tools/size_report.py

CI prints it on every run so growth is visible in review.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def count(path: Path) -> int:
    n = 0
    for line in path.read_text().splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            n += 1
    return n


def main() -> None:
    rows = []
    for pkg in sorted((ROOT / "packages").iterdir()):
        files = sorted(pkg.glob("src/**/*.py"))
        rows.append((pkg.name, len(files), sum(count(f) for f in files)))
    tests = sorted((ROOT / "tests").glob("**/*.py"))
    rows.append(("tests", len(tests), sum(count(f) for f in tests)))
    width = max(len(r[0]) for r in rows)
    print(f"{'distribution'.ljust(width)} | files | lines")
    for name, files, lines in rows:
        print(f"{name.ljust(width)} | {files:5d} | {lines:5d}")


if __name__ == "__main__":
    main()
