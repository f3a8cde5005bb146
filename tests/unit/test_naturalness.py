"""results/tables/naturalness.md (thetalker.report.naturalness) from hand-made dnsmos.json
files: means with intervals, the paired difference against the lowest load, and a point
without the model saying "not installed" rather than leaving a gap."""

from __future__ import annotations

import json

import pytest

from thetalker.report import naturalness


def write(tmp_path, system: str, point: str, ovrl: dict[str, float] | None, run: str = "runs"):
    folder = tmp_path / "results" / run / system / "piper" / point
    folder.mkdir(parents=True)
    if ovrl is None:
        data = {"available": False, "reason": "speechmos not installed (pip install x)"}
    else:
        streams = [
            {"sample_id": sid, "ok": True, "scored": True, "sig": v, "bak": v, "ovrl": v}
            for sid, v in ovrl.items()
        ]
        data = {"available": True, "streams": streams}
    (folder / "dnsmos.json").write_text(json.dumps(data))
    return folder / "dnsmos.json"


def test_each_load_against_the_lowest_paired_by_prompt(tmp_path):
    low = write(tmp_path, "a", "c1", {"p1": 3.0, "p2": 3.4, "p3": 2.6, "p4": 3.2})
    # Every sentence 0.5 lower at 8 streams: a paired difference of exactly -0.5, no spread.
    high = write(tmp_path, "a", "c8", {"p1": 2.5, "p2": 2.9, "p3": 2.1, "p4": 2.7})
    rows = naturalness.naturalness_rows([high, low])  # any order in, loads ascending out
    assert [r["point"] for r in rows] == ["c1", "c8"]
    assert rows[0]["ovrl"] == pytest.approx(3.05)
    assert rows[0].get("ovrl_vs_lowest") is None
    assert rows[1]["ovrl_vs_lowest"] == pytest.approx(-0.5)
    assert rows[1]["ovrl_vs_lowest_low"] == pytest.approx(-0.5)
    assert rows[1]["ovrl_vs_lowest_high"] == pytest.approx(-0.5)
    assert rows[1]["ovrl_vs_lowest_pairing"] == "paired"
    text = naturalness.naturalness_table(rows)
    assert "-0.50 [-0.50, -0.50] (vs c1, paired)" in text


def test_points_without_shared_prompts_are_compared_unpaired(tmp_path):
    low = write(tmp_path, "a", "c1", {"p1": 3.0, "p2": 3.2})
    high = write(tmp_path, "a", "c8", {"q1": 2.0, "q2": 2.2, "q3": 2.1})
    row = naturalness.naturalness_rows([low, high])[1]
    assert row["ovrl_vs_lowest_pairing"] == "unpaired"
    assert row["ovrl_vs_lowest"] == pytest.approx(2.1 - 3.1)
    assert row["ovrl_vs_lowest_low"] < row["ovrl_vs_lowest"] < row["ovrl_vs_lowest_high"]


def test_not_installed_is_said_in_every_cell_and_why(tmp_path):
    path = write(tmp_path, "a", "c2", None, run="quality")
    table = tmp_path / "naturalness.md"
    assert naturalness.main(["--dnsmos", str(path), "--table", str(table)]) == 0
    text = table.read_text()
    assert (
        "| a | piper | quality | c2 | n/a | not installed | not installed | not installed |" in text
    )
    assert "not installed: speechmos not installed (pip install x)" in text


def test_a_rate_point_is_compared_with_the_lowest_rate_and_rounds_keep_their_names(tmp_path):
    paths = [
        write(tmp_path, "a", "r2", {"p1": 2.0, "p2": 2.2}),
        write(tmp_path, "a", "c8", {"p1": 2.5, "p2": 2.9}),
        write(tmp_path, "a", "r1", {"p1": 3.0, "p2": 3.2}),
        write(tmp_path, "a", "c1", {"p1": 3.0, "p2": 3.4}),
        write(tmp_path, "a", "c2/round2", {"p1": 3.1, "p2": 3.3}),
        write(tmp_path, "a", "c2/round1", {"p1": 3.1, "p2": 3.3}),
    ]
    rows = naturalness.naturalness_rows(paths)
    assert [r["point"] for r in rows] == ["c1", "c2/round1", "c2/round2", "c8", "r1", "r2"]
    by = {r["point"]: r for r in rows}
    assert by["r2"]["lowest_load"] == "r1"
    assert by["r2"]["ovrl_vs_lowest"] == pytest.approx(-1.0)
    assert by["c8"]["lowest_load"] == "c1"
    assert by["r1"].get("ovrl_vs_lowest") is None  # the lowest rate


def test_silent_streams_are_named_and_a_score_below_the_floor_is_shown_as_it_is(tmp_path):
    """Issue 45 item 5: a stream with no audible onset counts at 1.0 with its reason named
    beside the failures, and a score below the floor (0.96) stays in the mean as it is and
    is counted in the row, not clipped up and not hidden."""
    folder = tmp_path / "results" / "runs" / "a" / "piper" / "c1"
    folder.mkdir(parents=True)
    streams = [
        {"sample_id": "p1", "ok": True, "scored": True, "sig": 3.0, "bak": 3.0, "ovrl": 3.04,
         "unscored_reason": None, "below_floor": False},
        {"sample_id": "p2", "ok": True, "scored": True, "sig": 1.2, "bak": 1.1, "ovrl": 0.96,
         "unscored_reason": None, "below_floor": True},
        {"sample_id": "p3", "ok": True, "scored": False, "sig": 1.0, "bak": 1.0, "ovrl": 1.0,
         "unscored_reason": "no audible onset", "below_floor": False},
        {"sample_id": "p4", "ok": False, "scored": False, "sig": 1.0, "bak": 1.0, "ovrl": 1.0,
         "unscored_reason": "failed", "below_floor": False},
    ]  # fmt: skip
    (folder / "dnsmos.json").write_text(json.dumps({"available": True, "streams": streams}))
    (row,) = naturalness.naturalness_rows([folder / "dnsmos.json"])
    assert row["ovrl"] == pytest.approx((3.04 + 0.96 + 1.0 + 1.0) / 4)
    assert row["below_floor"] == 1
    text = naturalness.naturalness_table([row])
    assert "| 4 (1 failed, 1 no audible onset; 1 below 1.0) |" in text
    assert "a failed stream or one with no audible onset counts at 1.0" in text
    assert "below the floor is kept as it is" in text
