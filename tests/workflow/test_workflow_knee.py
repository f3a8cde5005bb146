"""The default configuration shows the knee: `snakemake --cores 2` on a copy of the workflow.

What config/README.md describes, as facts that hold on any CPU, fast or slow, idle or busy:
the fair system (`local`: pieces, round-robin over two workers) streams each request in
several pieces and, at the top of the grid, serves many streams at once (more than it has
workers: every stream starts, and every stream stretches); the fifo system (`local-stock`: one
worker, whole sentences, a request holds the worker until it ends) serves one stream at a
time, so each stream's first audio waits for every stream served before it. These could fail
(a server that wrote each request as one chunk, a fair scheduler that queued streams, a stock
server that interleaved them). Where the knee falls on a given machine (continuity and first
audio against load) is a figure, printed by benchmarks/knee.py, never asserted here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from thetalker.data.record_reads import read_records
from thetalker.metrics import summarize_point

# Client-side stamps of two streams on one event loop: one turn of the loop may separate the
# receipt of one stream's last chunk and the next one's first. Much less than any synthesis.
LOOP_SLACK_S = 0.005


def records(workdir: Path, system: str, concurrency: int) -> list[dict]:
    path = workdir / f"results/runs/{system}/piper-joe/c{concurrency}/records.jsonl"
    found = list(read_records(path))
    assert found, path
    return found


def audio_spans(recs: list[dict]) -> list[tuple[float, float]]:
    """(first chunk, last chunk) of each successful request, on the run's clock, by start."""
    spans = [
        (r["t_submit_s"] + r["chunk_arrival_s"][0], r["t_submit_s"] + r["chunk_arrival_s"][-1])
        for r in recs
        if r["ok"] and r["chunk_arrival_s"]
    ]
    return sorted(spans)


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most streams between their first and last chunk at one moment."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.slow
def test_default_config_shows_the_knee(default_workflow_run: Path) -> None:
    workdir = default_workflow_run  # `snakemake --cores 2` on a copy (tests/conftest.py)
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    deploy = yaml.safe_load((workdir / "deploy" / "piper-joe.yaml").read_text())
    grid = config["concurrency"]
    low, top = grid[0], grid[-1]
    assert low == 1 and top > deploy["workers"]
    for system in ("local", "local-stock"):
        for c in (low, top):
            point = summarize_point([r for r in records(workdir, system, c) if not r["warmup"]], c)
            assert point["n_failed"] == 0, (system, c)

    # Fair: every stream in pieces (several chunks each), more pieces than the stock server
    # sends for the same prompts (same seed: same texts at a point).
    fair_low, fifo_low = records(workdir, "local", low), records(workdir, "local-stock", low)
    assert all(len(r["chunk_bytes"]) > 1 for r in fair_low if r["ok"])
    assert sorted(r["text"] for r in fair_low) == sorted(r["text"] for r in fifo_low)
    assert sum(len(r["chunk_bytes"]) for r in fair_low) > sum(
        len(r["chunk_bytes"]) for r in fifo_low
    )
    # Fair at the top: more streams under way at once than there are workers.
    fair_top = audio_spans(records(workdir, "local", top))
    assert most_at_once(fair_top) > deploy["workers"]

    # Fifo at the top: one stream at a time, each after the one before it has ended, so the
    # first audio of the k-th grows with the k-1 streams served before it.
    fifo_top = audio_spans(records(workdir, "local-stock", top))
    assert len(fifo_top) >= top
    for (_, end_before), (start_after, _) in zip(fifo_top, fifo_top[1:], strict=False):
        assert start_after >= end_before - LOOP_SLACK_S
    assert f"| c{top} |" in (workdir / "results" / "tables" / "continuity.md").read_text()
