"""The README's commands, read once for the tests that run them or check CI against them."""

from __future__ import annotations

import re

from tests.support.paths import REPO

__all__ = ["first_code_block_lines", "readme_commands"]


def _text() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def first_code_block_lines() -> list[str]:
    """The non-blank lines of the README's first code block (its two commands)."""
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", _text(), re.S)
    assert block, "README.md has no code block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def readme_commands() -> tuple[str, list[str]]:
    """The snakemake part of the README's first line, and the lines of its report block."""
    blocks = re.findall(r"```bash\n(.*?)```", _text(), re.S)
    first_line = blocks[0].splitlines()[0]
    first = first_line.split("&&", 1)[1].strip()  # after `pip install -e '.[local]'`
    report = next(b for b in blocks if "--report" in b)
    return first, [line for line in report.splitlines() if line.strip()]
