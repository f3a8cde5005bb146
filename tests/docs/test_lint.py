"""The code stays ruff clean (lint and format); Snakemake's own lint runs in test_workflow."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.support.paths import REPO

ROOT = REPO


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff")
    command = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    return subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [("check", "."), ("format", "--check", ".")])
def test_ruff_is_clean(args):
    result = _ruff(*args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
