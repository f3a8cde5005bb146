"""The README opens with the two commands of a fresh machine, and CI runs the second."""

from __future__ import annotations

import re
import shlex

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


def _readme_tests_block() -> list[str]:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Tests\n", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section.split("\n## ", 1)[0], re.S)
    assert block, "README.md's Tests section has no bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_readme_tests_section_names_every_tier_ci_runs():
    """Each pytest run of `.ci/run` beyond the main suite (a plain `python -m pytest -q -m X`
    step, or `tier NAME VENV_SCRIPTS TEST_PATH [MARKER]`) is a line of the README's Tests block."""
    expected = []
    for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r"python -m pytest -q -m \S+", line):
            expected.append(line)
        elif line.startswith("tier "):
            # `tier NAME "SCRIPT [SCRIPT ...]" TEST_PATH [MARKER]`: each script built in turn
            _, name, scripts, path, *marker = shlex.split(line)
            builds = " && ".join(f"bash {script}" for script in scripts.split())
            expected.append(f"{builds} && python -m pytest -q -m {(marker or [name])[0]} {path}")
    assert len(expected) == 4, expected  # e2e, contract, sglang, engine
    assert _readme_tests_block() == expected
