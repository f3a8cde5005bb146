"""thetalker-compare on what the listener hears: DNSMOS OVRL and the clean share, B against
A, where both points saved them; no columns where neither did."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_compare import BASE_AUDIO, BASE_TTFA, _run, write_point
from thetalker.report import compare


def _listen(records, ovrl: list[float], defects: int) -> None:
    folder = records.parent
    ids = [f"s{i}" for i in range(len(ovrl))]
    streams = [{"sample_id": i, "scored": True, "ovrl": o} for i, o in zip(ids, ovrl, strict=True)]
    (folder / "dnsmos.json").write_text(json.dumps({"available": True, "streams": streams}))
    health = [{"ok": True, "defects": ["clicks"] if k < defects else []} for k in range(20)]
    (folder / "health.json").write_text(json.dumps({"streams": health}))


def test_a_lower_ovrl_and_more_defects_are_caught(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    base = [3.0 + 0.02 * (i % 5) for i in range(20)]
    # Two rounds a side (a change is named only then); the first round's audio is judged.
    _listen(write_point(a, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA), 1), base, defects=0)
    write_point(a, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA), 2)
    # B: every sentence 0.4 lower (paired by prompt: exactly -0.4), 10 of 20 streams click.
    low = [x - 0.4 for x in base]
    _listen(write_point(b, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA), 1), low, defects=10)
    write_point(b, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA), 2)
    (row,) = compare.compare_folders(a, b)[0]
    assert row["dnsmos_ovrl_change"].value == pytest.approx(-0.4)
    assert row["dnsmos_ovrl_change"].high == pytest.approx(-0.4)
    assert row["clean_pct_change"].value == pytest.approx(-50.0)
    assert row["clean_pct_change"].high < 0
    assert compare.distinguishable(row) == ["DNSMOS OVRL B-A", "clean streams B-A (pp)"]
    text = compare.format_changes([row])
    assert "DNSMOS OVRL B-A" in text and "-0.40 [-0.40, -0.40]" in text


def test_no_listening_columns_where_no_point_has_them(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_point(a, "s", "m", 1, _run(BASE_AUDIO, BASE_TTFA))
    write_point(b, "s", "m", 1, _run(BASE_AUDIO, BASE_TTFA))
    rows = compare.compare_folders(a, b)[0]
    assert rows[0]["dnsmos_ovrl_change"].value is None
    assert "DNSMOS" not in compare.format_changes(rows)


def test_every_stream_clean_on_both_sides_is_no_certainty(tmp_path):
    """20 clean streams a side show no spread to resample; the change is 0 with Newcombe's
    interval (as continuity's), not `0.0 [0.0, 0.0]`."""
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        _listen(write_point(folder, "s", "m", 1, _run(BASE_AUDIO, BASE_TTFA)), [3.0] * 20, 0)
    (row,) = compare.compare_folders(a, b)[0]
    change = row["clean_pct_change"]
    assert change.value == 0.0 and change.method == "newcombe"
    assert change.low < -10 and change.high > 10  # 20 of 20 rules out little: about +-16 pp
    assert "clean streams B-A (pp)" not in compare.distinguishable(row)
