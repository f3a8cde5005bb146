"""`snakemake --report` on the embedded default after a real run (the tiny run of
the `quality_run` fixture of tests/workflow/conftest.py, once per session): the HTML bundles every
table and figure with its caption, the WER comparisons, and the provenance of every point."""

from __future__ import annotations

import re

import pytest

from tests.support.paths import REPO as ROOT
from tests.support.workflow_copy import smk_offline, tiny_quality_config

# Caption files whose text must be in the report: what each table and figure shows.
CAPTIONS = (
    "throughput_table",
    "continuity_table",
    "ttfa_table",
    "cost_table",
    "throughput_figure",
    "cost_figure",
    "wer_table",
    "wer_figure",
    "wer_compare",
    "provenance",
)


def caption_opening(name: str) -> str:
    """The caption's first words, before any reST markup or non-ASCII character."""
    text = (ROOT / "report" / f"{name}.rst").read_text(encoding="utf-8")
    return re.split(r"[`*:(±,]", text, maxsplit=1)[0].strip()[:60]


@pytest.fixture(scope="session")
def report_html(quality_run: tuple) -> str:
    workdir, config = quality_run
    result = smk_offline(workdir, "--report", "results/report.html", "--configfile", config)
    assert result.returncode == 0, result.stderr[-3000:]
    return (workdir / "results" / "report.html").read_text(encoding="utf-8")


def test_caption_openings_are_plain_text():
    for name in CAPTIONS:
        assert len(caption_opening(name)) >= 12, name


@pytest.mark.slow
def test_report_holds_every_caption(report_html):
    for name in CAPTIONS:
        assert caption_opening(name) in report_html, name


@pytest.mark.slow
def test_report_bundles_tables_figures_and_provenance(report_html):
    for name in ("throughput.md", "cost.md", "wer.md", "provenance.md", "wer.png", "ttfa.png"):
        assert name in report_html, name
    # Every speed point's provenance.json is bundled, named by its point.
    for system in ("local", "local-stock"):
        for c in (1, 2):
            assert f"{system}_piper-joe_c{c}.json" in report_html
    assert "local_vs_local-stock.json" in report_html


@pytest.mark.slow
def test_provenance_table_has_one_row_per_speed_point(quality_run):
    workdir, _ = quality_run
    table = (workdir / "results/tables/provenance.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| local")]
    # Every system of the default config x concurrency 1, 2 (a grid of two adjacent points:
    # the capacity search adds none).
    systems = list(tiny_quality_config()["systems"])
    assert {"local", "local-stock"} <= set(systems)
    assert len(rows) == 2 * len(systems)
    copies = sorted(p.name for p in (workdir / "results/provenance").glob("*.json"))
    assert copies == sorted(f"{s}_piper-joe_c{n}.json" for s in systems for n in (1, 2))
    original = workdir / "results/runs/local/piper-joe/c2/provenance.json"
    assert (workdir / "results/provenance/local_piper-joe_c2.json").read_text() == (
        original.read_text()
    )
