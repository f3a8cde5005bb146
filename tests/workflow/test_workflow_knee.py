"""The default configuration shows the knee: `snakemake --cores 2` on a copy of the workflow.

The fair system (`local`: pieces, round-robin scheduler) plays every stream gapless at one
stream and fails continuity at the top of the grid, which is past what two cores stream in real
time; the fifo system (`local-stock`) keeps its streams whole and lets first audio grow
instead. This is the shape config/README.md describes; it could fail (a server that wrote each
request as one chunk would show 100% everywhere, a grid that stayed under the knee too).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from thetalker.data.records import read_records
from thetalker.metrics import summarize_point


def point(workdir: Path, system: str, concurrency: int) -> dict:
    path = workdir / f"results/runs/{system}/piper-joe/c{concurrency}/records.jsonl"
    records = [r for r in read_records(path) if not r.get("warmup")]
    assert records, path
    return summarize_point(records, concurrency)


@pytest.mark.slow
def test_default_config_shows_the_knee(default_workflow_run: Path) -> None:
    workdir = default_workflow_run  # `snakemake --cores 2` on a copy (tests/conftest.py)
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    grid = config["concurrency"]
    low, top = grid[0], grid[-1]
    assert low == 1
    fair_low, fair_top = point(workdir, "local", low), point(workdir, "local", top)
    fifo_low, fifo_top = point(workdir, "local-stock", low), point(workdir, "local-stock", top)
    assert fair_low["n_failed"] == fair_top["n_failed"] == 0
    # Fair: gapless at one stream, stretched past the knee.
    assert fair_low["continuity_pct"] == 100.0
    assert fair_top["continuity_pct"] < 95.0
    # Fifo: whole streams stay gapless, first audio grows instead.
    assert fifo_top["continuity_pct"] >= 95.0
    assert fifo_top["ttfa_s"]["p50"] > 3 * fifo_low["ttfa_s"]["p50"]
    # And the fair system's streams carry several chunks each (pieces, not whole sentences).
    records = read_records(workdir / f"results/runs/local/piper-joe/c{low}/records.jsonl")
    assert all(len(r["chunk_bytes"]) > 1 for r in records if r["ok"])
    assert f"| c{top} |" in (workdir / "results" / "tables" / "continuity.md").read_text()
