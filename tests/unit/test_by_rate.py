"""thetalker.report.by_rate from a points.csv written by hand: one row per (system, rate),
p95 audible first audio in ms, dropped arrivals and the scheduling lag beside it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from thetalker.report.by_rate import by_rate_rows, by_rate_table, main
from thetalker.report.common import load_points
from thetalker.report.settings import ReportSettings


def _points(tmp_path: Path) -> Path:
    base = {"model": "m", "rtfx": 1.0, "continuity_pct": 100.0, "chars_per_s": 1.0}
    rows = [
        {**base, "system": "a", "point": "c2", "concurrency": 2, "ttfa_audible_s_p95": 0.9},
        {
            **base,
            "system": "a",
            "point": "r1",
            "concurrency": None,
            "ttfa_audible_s_p95": 0.0315,
            "ttfa_s_p95": 0.02,
            "audible_pct": 100.0,
            "n_inaudible": 0,
            "stall_gate_pct": 100.0,
            "n_dropped": 0,
            "schedule_lag_s_p95": 0.0012,
            "schedule_lag_s_max": 0.003,
            "n_failed": 0,
            "n_scored": 20,
        },
        {
            **base,
            "system": "a",
            "point": "r4",
            "concurrency": None,
            "ttfa_audible_s_p95": 0.25,
            "ttfa_s_p95": 0.2,
            "audible_pct": 95.0,
            "n_inaudible": 1,
            "stall_gate_pct": 90.0,
            "n_dropped": 3,
            "schedule_lag_s_p95": 0.002,
            "schedule_lag_s_max": 0.004,
            "n_failed": 1,
            "n_scored": 17,
        },
        # an older points.csv row: none of the new columns
        {**base, "system": "b", "point": "r1", "concurrency": None},
    ]
    path = tmp_path / "points.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_by_rate_rows_and_table(tmp_path: Path) -> None:
    points = load_points(_points(tmp_path))
    rows = by_rate_rows(points, ["m"], ["a", "b"])
    assert [(r["system"], r["request_rate"]) for r in rows] == [("a", 1.0), ("a", 4.0), ("b", 1.0)]
    assert rows[0]["ttfa_audible_ms_p95"] == 31.5
    text = by_rate_table(points, ["m"], ["a", "b"])
    assert "| m | a | 1 | 31.5 | 20.0 | 100.0 | 100.0 | 0 | 1.2 / 3.0 | 0/20 |" in text
    assert (
        "| m | a | 4 | 250.0 | 200.0 | 95.0 (1 inaudible) | 90.0 | 3 | 2.0 / 4.0 | 1/17 |" in text
    )
    # the old row prints n/a, not a crash
    assert "| m | b | 1 | n/a | n/a | n/a | n/a | n/a | n/a / n/a | 0/0 |" in text


def test_by_rate_main_writes_table_csv_and_figure(tmp_path: Path) -> None:
    table, figure = tmp_path / "by_rate.md", tmp_path / "by_rate.png"
    settings = ReportSettings(
        models=("m",),
        systems=("a", "b"),
        headline=1,
        ratio=("a", "b"),
        gpu_hour_usd=2.99,
        min_continuity_pct=95.0,
        ttfa_slo_s=None,
        grid=(1,),
        slo={},
    )
    args = ["--points", str(_points(tmp_path)), "--settings", settings.to_json()]
    assert main([*args, "--table", str(table), "--figure", str(figure)]) == 0
    assert table.read_text().startswith("By request rate")
    assert pd.read_csv(tmp_path / "by_rate.csv").shape[0] == 3
    assert figure.stat().st_size > 0
