"""The README opens with the two commands of a fresh machine, and CI runs the second."""

from __future__ import annotations

from tests.support.paths import REPO
from tests.support.readme import first_code_block_lines

ROOT = REPO
_first_code_block_lines = first_code_block_lines


def test_readme_starts_with_exactly_two_commands():
    lines = _first_code_block_lines()
    assert len(lines) == 2, lines
    install_and_run, install_and_test = lines
    assert "pip install" in install_and_run and "snakemake" in install_and_run
    assert "pip install" in install_and_test and "pytest" in install_and_test


def test_ci_runs_the_readme_test_command():
    test_command = _first_code_block_lines()[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()
