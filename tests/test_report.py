"""points.csv, tables and figures from hand-built records: every number traced to metrics.py."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from thetalker.metrics import point_cost, summarize_point
from thetalker.records import RECORD_FIELDS, append_record
from thetalker.report import figures, points, tables

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_record(i: int, *, ok: bool = True, continuous: bool = True, warmup: bool = False):
    """A record whose figures are set by hand (2 s of audio in 0.5 s of wall clock)."""
    record = {field: None for field in RECORD_FIELDS}
    record.update(
        request_index=i,
        sample_id=f"s{i}",
        text="Hello there.",
        text_chars=12,
        warmup=warmup,
        ok=ok,
        error=None if ok else {"type": "timeout", "message": "t", "status": None},
        t_submit_s=0.1 * i,
        t_connect_s=0.001,
        ttfa_s=0.05 + 0.01 * i if ok else None,
        leading_silence_s=0.02,
        ttfa_audible_s=0.07 + 0.01 * i if ok else None,
        ttfa_audible_naive_s=0.07 + 0.01 * i if ok else None,
        wall_s=0.5,
        chunk_arrival_s=[0.05, 0.3] if ok else [],
        chunk_bytes=[44100, 44100] if ok else [],
        audio_s=2.0 if ok else 0.0,
        sample_rate=22050,
        max_underrun_s=0.0 if continuous else 0.4,
        underrun_events=0 if continuous else 1,
        continuity_ok=ok and continuous,
        stalls=0 if continuous else 1,
        stall_s=0.0 if continuous else 0.4,
    )
    return record


def write_point(root: Path, system: str, model: str, c: int, records: list[dict]) -> Path:
    path = root / "runs" / system / model / f"c{c}" / "records.jsonl"
    path.parent.mkdir(parents=True)
    with path.open("w", encoding="utf-8") as fh:
        for record in records:
            append_record(fh, record)
    return path


@pytest.fixture
def runs(tmp_path: Path) -> dict[tuple[str, str, int], list[dict]]:
    """Two systems x one model x concurrency 1 and 2; system b drops continuity at c2."""
    data = {
        ("a", "m", 1): [make_record(0, warmup=True)] + [make_record(i) for i in range(1, 5)],
        ("a", "m", 2): [make_record(i) for i in range(6)],
        ("b", "m", 1): [make_record(i) for i in range(4)],
        ("b", "m", 2): [make_record(i, continuous=i % 2 == 0) for i in range(5)]
        + [make_record(5, ok=False)],
    }
    for (system, model, c), records in data.items():
        write_point(tmp_path, system, model, c, records)
    return data


def _points_csv(tmp_path: Path) -> Path:
    out = tmp_path / "points.csv"
    paths = sorted((tmp_path / "runs").glob("*/*/c*/records.jsonl"))
    assert points.main(["--out", str(out), *map(str, paths)]) == 0
    return out


def test_points_csv_has_one_row_per_point_with_every_summary_figure(tmp_path, runs):
    out = _points_csv(tmp_path)
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 4
    by_key = {(r["system"], r["model"], int(r["concurrency"])): r for r in rows}
    for key, records in runs.items():
        expected = summarize_point(records, concurrency=key[2])
        row = by_key[key]
        assert float(row["rtfx"]) == pytest.approx(expected["rtfx"])
        assert float(row["ttfa_s_p50"]) == pytest.approx(expected["ttfa_s"]["p50"])
        assert int(row["n_failed"]) == expected["n_failed"]
        assert float(row["continuity_pct"]) == pytest.approx(expected["continuity_pct"])
    # The warmup record is not scored.
    assert int(by_key[("a", "m", 1)]["n_scored"]) == 4


def test_point_key_rejects_a_path_outside_the_layout(tmp_path):
    with pytest.raises(points.PointPathError, match="records.jsonl"):
        points.point_key(tmp_path / "records.jsonl")


def test_tables_hold_the_recomputed_numbers(tmp_path, runs):
    out = _points_csv(tmp_path)
    md = {name: tmp_path / f"{name}.md" for name in ("throughput", "continuity", "ttfa", "cost")}
    argv = ["--points", str(out), "--models", "m", "--systems", "a", "b", "--headline", "2"]
    argv += ["--ratio", "a", "b", "--gpu-hour-usd", "2.99"]
    for name, path in md.items():
        argv += [f"--{name}", str(path)]
    assert tables.main(argv) == 0

    a2 = summarize_point(runs[("a", "m", 2)], 2)
    b2 = summarize_point(runs[("b", "m", 2)], 2)
    throughput = md["throughput"].read_text()
    assert f"| m | {a2['rtfx']:.1f} | {b2['rtfx']:.1f} | {a2['rtfx'] / b2['rtfx']:.2f}x |" in (
        throughput
    )
    continuity = md["continuity"].read_text()
    # b at c2: 3 of 6 scored requests continuous (one failed): 50.0%.
    assert "| m | b | 100.0 | 50.0 (1 failed) |" in continuity
    ttfa = md["ttfa"].read_text()
    assert f"{a2['ttfa_s']['p50']:.3f} / {a2['ttfa_audible_s']['p50']:.3f}" in ttfa
    cost = md["cost"].read_text()
    # a is priced; b at 50% continuity is not.
    assert f"| m | {point_cost(a2, 2.99):.2f} | n/a |" in cost


def test_tables_name_a_missing_column(tmp_path):
    bad = tmp_path / "points.csv"
    bad.write_text("system,model,concurrency\na,m,1\n")
    with pytest.raises(tables.PointsError, match="rtfx"):
        tables.load_points(bad)


def test_figures_are_png_files(tmp_path, runs):
    out = _points_csv(tmp_path)
    png = {name: tmp_path / f"{name}.png" for name in ("throughput", "continuity", "ttfa", "cost")}
    argv = ["--points", str(out), "--models", "m", "--systems", "a", "b", "--headline", "2"]
    for name, path in png.items():
        argv += [f"--{name}", str(path)]
    assert figures.main(argv) == 0
    for path in png.values():
        assert path.read_bytes()[:8] == PNG_MAGIC, path
