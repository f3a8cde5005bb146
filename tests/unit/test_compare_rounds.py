"""thetalker-compare's RTFx over rounds: each round keeps its own window, a failed round
counts at 0, and no interval claims certainty the rounds do not give."""

from __future__ import annotations

import math

import pytest

from tests.support.records import make_record
from tests.unit.test_compare import BASE_AUDIO, BASE_TTFA, _run, write_point
from thetalker.report import compare


def _rounds(folder, runs: list[list[dict]]) -> None:
    for k, records in enumerate(runs, start=1):
        write_point(folder, "s", "m", 2, records, round_=k if len(runs) > 1 else None)


def test_three_rounds_against_one_keep_each_rounds_window(tmp_path):
    # The same records three times in A, once in B: the same RTFx, a ratio of 1 (it printed
    # 0.333x: A's three rounds pooled over one round's window).
    a, b = tmp_path / "a", tmp_path / "b"
    records = _run(BASE_AUDIO, BASE_TTFA)
    _rounds(a, [records] * 3)
    _rounds(b, [records])
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert row["rtfx_a"].value == pytest.approx(row["rtfx_b"].value)
    ratio = row["rtfx_ratio"]
    assert ratio.value == pytest.approx(1.0)
    assert ratio.low < 1.0 < ratio.high
    # and the other way round
    (row,), _, _, _ = compare.compare_folders(b, a)
    assert row["rtfx_ratio"].value == pytest.approx(1.0)


def _failed(n: int = 20) -> list[dict]:
    return [make_record(i, ok=False) for i in range(n)]


def test_a_failed_round_counts_at_zero_in_the_ratio(tmp_path):
    # A: one round where every request failed (RTFx 0) and two good ones; B: three good
    # ones. It printed 0.995x: the failed round was dropped from the ratio.
    a, b = tmp_path / "a", tmp_path / "b"
    good = _run(BASE_AUDIO, BASE_TTFA)
    _rounds(a, [_failed(), good, good])
    _rounds(b, [good, good, good])
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert row["rtfx_a"].value == pytest.approx(row["rtfx_b"].value * 2 / 3)
    ratio = row["rtfx_ratio"]
    assert ratio.value == pytest.approx(1.5)  # B / A, A's mean with its round at 0
    assert ratio.low is not None and ratio.high is not None
    assert ratio.low <= 1.5 <= ratio.high and ratio.low < ratio.high
    text = compare.format_changes([row])
    assert "1.500x" in text


def test_a_failed_round_is_named_beside_the_verdict(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    good = _run(BASE_AUDIO, BASE_TTFA)
    _rounds(a, [_failed(), good, good])
    _rounds(b, [good, good, good])
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert "A round 1 delivered no audio" in compare.format_changes([row])


def test_a_ratio_with_rounds_at_zero_on_both_sides_has_no_value(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _rounds(a, [_failed(), _failed()])
    _rounds(b, [_run(BASE_AUDIO, BASE_TTFA)] * 2)
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert row["rtfx_a"].value == 0.0
    assert row["rtfx_ratio"].value is None  # B / 0: no ratio, never a number


def test_identical_rounds_claim_no_certainty(tmp_path):
    # Two identical rounds a side printed `20.1 [20.1, 20.1]`: the rounds' t interval has
    # no width, so the requests' bootstrap (each round's window kept) gives the interval.
    a, b = tmp_path / "a", tmp_path / "b"
    records = _run(BASE_AUDIO, BASE_TTFA)
    _rounds(a, [records] * 2)
    _rounds(b, [records] * 2)
    (row,), _, _, _ = compare.compare_folders(a, b)
    for key in ("rtfx_a", "rtfx_b", "rtfx_ratio"):
        ci = row[key]
        assert ci.low is not None and ci.high is not None, key
        assert ci.low < ci.value < ci.high, key
    assert row["rtfx_ratio"].value == pytest.approx(1.0)
    assert compare.distinguishable(row) == []


def test_rounds_whose_mean_is_not_told_from_zero_give_an_open_ratio(tmp_path):
    # A's rounds 0, x, x: its mean cannot be told from 0 at 95% over 3 rounds, so B / A has
    # no upper bound (Fieller's interval), shown as such rather than as a narrow interval.
    a, b = tmp_path / "a", tmp_path / "b"
    good = _run(BASE_AUDIO, BASE_TTFA)
    _rounds(a, [_failed(), good, good])
    _rounds(b, [_run([x * d for x in BASE_AUDIO], BASE_TTFA) for d in (1.0, 1.02, 0.98)])
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert row["rtfx_ratio"].high == math.inf
    assert "RTFx B/A" not in compare.distinguishable(row)
