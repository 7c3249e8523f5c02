"""Every library example of the seeds runs verbatim (tests/library/seeds_verbatim.py), in
a subprocess: the seeds' operator names stay out of this session's registry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHECKS = sorted(
    line.split("(")[0][4:]
    for line in (HERE / "seeds_verbatim.py").read_text().splitlines()
    if line.startswith("def check_")
)


@pytest.fixture(scope="module")
def results() -> dict:
    run = subprocess.run(
        [sys.executable, str(HERE / "seeds_verbatim.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_seeds_define_their_checks():
    assert len(CHECKS) >= 7


@pytest.mark.parametrize("check", CHECKS)
def test_seed(results, check):
    assert results.get(check) == "ok", results.get(check, "check did not run")
