"""The default run's tables stand beside the public report (issue 22), end to end on the
embedded server: audible first audio by the absolute -45 dBFS onset with inaudible streams
counted, continuity under named player models with the start buffer figure, capacity under
the several-figure service level with the figure that broke first, and the by-rate table.

Shares the one default run of tests/conftest.py (`default_workflow_run`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from thetalker.data.records import read_records
from thetalker.metrics import summarize_point
from thetalker.pipeline.capacity import ServiceLevel, find_capacity
from thetalker.pipeline.load_points import service_level_spec


@pytest.mark.slow
def test_default_run_reports_the_public_definitions(default_workflow_run: Path) -> None:
    workdir = default_workflow_run
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    validate(config, str(workdir / "config" / "schema.yaml"))  # the defaults filled, as the run had
    tables = workdir / "results" / "tables"
    runs = workdir / "results" / "runs"

    # Every record's onset is the absolute rule's; an inaudible one has no audible time.
    for path in runs.glob("*/piper-joe/*/records.jsonl"):
        for rec in read_records(path):
            if not rec["ok"]:
                continue
            assert rec["audible_onset_rule"] == "abs-45dBFS/20ms/10ms/2", path
            if rec["audible"]:
                assert rec["ttfa_audible_s"] >= rec["ttfa_s"]
            else:
                assert rec["ttfa_audible_s"] is None and rec["leading_silence_s"] is None

    # points.csv: audibility, the player models and the start buffer on every point.
    rows = list(csv.DictReader((workdir / "results" / "points.csv").open()))
    assert rows
    for row in rows:
        assert row["audible_onset_rule"] == "abs-45dBFS/20ms/10ms/2"
        assert row["audible_pct"] != "" and row["stall_gate_pct"] != ""
        assert "start_buffer_s_p95" in row and "n_dropped" in row

    ttfa = (tables / "ttfa.md").read_text()
    assert "-45 dBFS" in ttfa and "audible %" in ttfa
    continuity = (tables / "continuity.md").read_text()
    assert "max_deficit_0.1s" in continuity and "stall_gate %" in continuity
    assert "buffer for 95% (s)" in continuity
    assert (workdir / "results" / "figures" / "start_buffer.png").stat().st_size > 0

    # The open-loop points: one row per system and rate, dropped arrivals and lag shown.
    by_rate = (tables / "by_rate.md").read_text()
    assert "audible p95 (ms)" in by_rate and "dropped" in by_rate
    for system in config["systems"]:
        for rate in config["request_rates"]:
            assert f"| piper-joe | {system} | {rate:g} |" in by_rate, (system, rate)
    assert (workdir / "results" / "figures" / "by_rate.png").stat().st_size > 0

    # capacity.md under the service level of several figures: each search's capacity is
    # find_capacity over the level's verdicts, and the figure that broke first is named.
    level = ServiceLevel.from_spec(service_level_spec(config))
    capacity = (tables / "capacity.md").read_text()
    assert "broke first" in capacity and "audible first audio p95 <= 1 s" in capacity
    for system in config["systems"]:
        manifest = json.loads((runs / system / "piper-joe" / "search.json").read_text())
        found = manifest["capacity"]["streams"]
        if found["first_failing"] is not None:
            assert found["broke_first"], found
        held = {p["concurrency"]: p["holds"] for p in manifest["points"] if p["concurrency"]}
        for c in config["concurrency"]:
            records = list(read_records(runs / system / "piper-joe" / f"c{c}" / "records.jsonl"))
            held[c] = level.holds(summarize_point(records, c), live=True)
        assert find_capacity(held).load == found["load"], (system, held)
