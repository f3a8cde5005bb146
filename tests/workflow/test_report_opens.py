"""The report opens after the README's commands, typed as written, on a fresh copy.

A fresh copy of the workflow (tests/support/workflow_copy.py: what a clone holds, no `results/`, no
`.snakemake/`) runs the README's first command, without its `pip install` (the package is
installed already; installing a copy would replace the editable install): the session's one
default run (`default_workflow_run`, tests/conftest.py), shared with the knee and capacity
tests. Then each line
of the README's report block exactly, in order, with bash. Snakemake's `--report` builds
nothing, so each report line must name what was built before it; this test fails when the
README's commands stop producing a report that opens (the issue a user hit:
`File results/figures/throughput.png marked for report but does not exist`).
The embedded server and Whisper run for real: no stand-ins on PATH.
"""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import run_in_group
from tests.support.readme import readme_commands
from tests.support.workflow_copy import smk_env

pytestmark = pytest.mark.slow

SPEED_TABLES = ("throughput", "continuity", "ttfa", "cost")
# One report entry per bundled file: {"name": ..., "data_uri": "data:MIME;...;base64,..."}.
DATA_URI = re.compile(
    r'"data_uri": "data:([^;"]+);(?:charset=[^;"]+;)?filename=([^;"]+);base64,([A-Za-z0-9+/=]*)"'
)


def bash(command: str, cwd: Path, timeout: float = 840) -> subprocess.CompletedProcess[str]:
    """A README line, as a user types it (no stand-ins on PATH); its whole tree is stopped on
    a timeout."""
    return run_in_group(
        ["bash", "-c", command], cwd=cwd, env=smk_env(standins=False), timeout=timeout
    )


def bundled(html: str) -> dict[str, bytes]:
    """File name -> decoded bytes of every file embedded in a Snakemake report."""
    return {m.group(2): base64.b64decode(m.group(3)) for m in DATA_URI.finditer(html)}


def check_tables(workdir: Path, files: dict[str, bytes], stems: tuple[str, ...]) -> None:
    """Each table in the report, with the content of its Markdown file (or as CSV/TSV)."""
    for stem in stems:
        md = (workdir / "results" / "tables" / f"{stem}.md").read_bytes()
        entries = {n: data for n, data in files.items() if Path(n).stem == stem}
        assert entries, f"{stem}: not in the report (bundled: {sorted(files)})"
        assert any(
            data == md or Path(n).suffix in (".csv", ".tsv") and data for n, data in entries.items()
        ), stem


@pytest.fixture(scope="module")
def after_first_command(default_workflow_run: Path) -> Path:
    """The README's first command, run as written on a fresh copy: tests/conftest.py's
    `default_workflow_run`, the one default run of the test session."""
    first, _ = readme_commands()
    assert first == "snakemake --cores 2 results/tables/throughput.md"
    assert (default_workflow_run / "results" / "tables" / "throughput.md").is_file()
    return default_workflow_run


def test_the_readme_names_a_report_line_for_the_first_command() -> None:
    _, report = readme_commands()
    assert report[0] == "snakemake --report results/report.html results/tables/throughput.md"
    assert report[1] == "snakemake --cores 2 && snakemake --report results/report.html"


def test_the_report_of_the_first_commands_target_opens(after_first_command: Path) -> None:
    workdir = after_first_command
    _, report = readme_commands()
    result = bash(report[0], workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    html = (workdir / "results" / "report.html").read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html")
    check_tables(workdir, bundled(html), SPEED_TABLES)


# The whole default target (every system's sweep, the quality run, DNSMOS and health of every
# point, the listening packs): 9 of the 17 minutes of a busy run of the main suite, one worker
# on it alone, so a tier of its own (README "Tests", .ci/run's e2e step).
@pytest.mark.e2e
def test_the_full_report_after_the_default_target(after_first_command: Path) -> None:
    workdir = after_first_command
    _, report = readme_commands()
    (workdir / "results" / "report.html").unlink(missing_ok=True)
    result = bash(report[1], workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    html = (workdir / "results" / "report.html").read_text(encoding="utf-8")
    files = bundled(html)
    check_tables(workdir, files, (*SPEED_TABLES, "wer", "provenance"))
    for figure in ("throughput", "continuity", "ttfa", "cost", "wer"):
        assert f"{figure}.png" in html, figure
