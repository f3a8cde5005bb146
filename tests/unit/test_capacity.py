"""thetalker.pipeline.capacity: service level, capacity verdicts and bisection, worked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thetalker.pipeline.capacity import (
    AT_LEAST,
    FOUND,
    NEVER,
    NO_POINTS,
    Capacity,
    ServiceLevel,
    find_capacity,
    next_load,
    passes,
    refine,
)

GRID = [1, 2, 4, 8, 16, 32, 64]


def _continuity_only(pct: float = 95.0, **kw) -> ServiceLevel:
    return ServiceLevel(pct, max_audible_p95_s=None, max_failed_pct=None, **kw)


def test_service_level_needs_continuity_and_optionally_ttfa():
    level = _continuity_only()
    assert level.holds({"continuity_pct": 95.0})  # inclusive
    assert not level.holds({"continuity_pct": 94.9})
    assert not level.holds({"continuity_pct": None}) and not level.holds(None)
    slo = _continuity_only(ttfa_slo_s=0.5)
    assert slo.holds({"continuity_pct": 100.0, "ttfa_s_p90": 0.5})  # points.csv row
    assert slo.holds({"continuity_pct": 100.0, "ttfa_s": {"p90": 0.4}})  # summary.json
    assert not slo.holds({"continuity_pct": 100.0, "ttfa_s_p90": 0.51})
    assert not slo.holds({"continuity_pct": 100.0, "ttfa_s_p90": None})


def test_capacity_is_the_last_pass_before_the_first_failure():
    # 1..16 pass, 32 fails, 64 passes by luck: the knee is 16, not 64, and 64 is a cliff
    passed = {1: True, 2: True, 4: True, 8: True, 16: True, 32: False, 64: True}
    assert find_capacity(passed) == Capacity(16, FOUND, 32, (64,))
    assert find_capacity(passed).label() == "16"
    assert find_capacity(passed).cliff


def test_capacity_at_the_top_of_the_grid_is_at_least():
    cap = find_capacity(dict.fromkeys(GRID, True))
    assert cap == Capacity(64, AT_LEAST) and cap.label() == "at least 64"


def test_capacity_when_the_first_point_fails_is_never():
    cap = find_capacity({1: False, 2: False, 4: True})
    assert cap == Capacity(None, NEVER, 1, (4,)) and cap.label() == "never (fails at 1)"
    assert find_capacity({}) == Capacity(None, NO_POINTS) and find_capacity({}).label() == "n/a"


def test_passes_applies_the_level_to_each_point():
    points = {8: {"continuity_pct": 100.0}, 16: {"continuity_pct": 90.0}}
    assert passes(points, _continuity_only()) == {8: True, 16: False}


def test_bisection_worked_by_hand():
    # The knee is at 26: loads <= 26 hold. Grid: 16 passes, 32 fails.
    # step 1: (16 + 32) // 2 = 24 passes  -> bracket [24, 32]
    # step 2: (24 + 32) // 2 = 28 fails   -> bracket [24, 28]
    # step 3: (24 + 28) // 2 = 26 passes  -> bracket [26, 28]
    # step 4: (26 + 28) // 2 = 27 fails   -> bracket [26, 27]: adjacent, done
    grid_results = {c: c <= 16 for c in GRID}
    tried: list[int] = []

    def probe(c):
        tried.append(c)
        return c <= 26

    results = refine(grid_results, probe, GRID, max_steps=10)
    assert tried == [24, 28, 26, 27]
    assert find_capacity(results) == Capacity(26, FOUND, 27)


def test_bisection_stops_after_max_steps():
    # same knee, 2 steps allowed: 24 (pass), 28 (fail); the answer is 24, bracket [24, 28]
    grid_results = {c: c <= 16 for c in GRID}
    results = refine(grid_results, lambda c: c <= 26, GRID, max_steps=2)
    assert sorted(set(results) - set(GRID)) == [24, 28]
    assert find_capacity(results) == Capacity(24, FOUND, 28)
    assert next_load(results, GRID, max_steps=2) is None
    assert next_load(results, GRID, max_steps=3) == 26


@pytest.mark.parametrize(
    "grid_results",
    [dict.fromkeys(GRID, True), dict.fromkeys(GRID, False), {}],
    ids=["no failing point", "no passing point", "no points"],
)
def test_no_bracket_plans_nothing(grid_results):
    assert next_load(grid_results, GRID, max_steps=5) is None
    assert refine(grid_results, lambda c: pytest.fail("probed"), GRID, 5) == grid_results


def test_adjacent_integers_cannot_be_split():
    assert next_load({4: True, 5: False}, [4, 5]) is None


def test_bisection_of_request_rates():
    # rates 1, 2, 4 req/s; 2 holds, 4 does not; the knee is 3.2
    # 3.0 passes -> [3, 4]; 3.5 fails -> [3, 3.5]; 3.25 fails -> [3, 3.25]:
    # 0.25 > 5% of 3.25 (0.1625): 3.125 passes -> [3.125, 3.25]: 0.125 <= 0.1625, done
    grid_results = {1.0: True, 2.0: True, 4.0: False}
    tried: list[float] = []

    def probe(rate):
        tried.append(rate)
        return rate <= 3.2

    results = refine(grid_results, probe, [1.0, 2.0, 4.0], max_steps=10, integer=False)
    assert tried == [3.0, 3.5, 3.25, 3.125]
    assert find_capacity(results) == Capacity(3.125, FOUND, 3.25)
    assert find_capacity(results).label(" req/s") == "3.125 req/s"


@settings(max_examples=60)
@given(st.integers(1, 200))
def test_unlimited_bisection_finds_any_knee_inside_the_grid(knee):
    # loads <= knee hold; with enough steps bisection lands exactly on the knee
    grid = [1, 2, 4, 8, 16, 32, 64, 128, 256]
    results = refine({c: c <= knee for c in grid}, lambda c: c <= knee, grid, max_steps=64)
    assert find_capacity(results) == Capacity(knee, FOUND, knee + 1)
    # and it never needs more than log2 of the bracket's width
    assert len(set(results) - set(grid)) <= 8


# --- the service level of several figures --------------------------------------------


def _summary(**kw) -> dict:
    """A points.csv-like row: 20 scored requests, all fine unless said."""
    row = {
        "n_scored": 20,
        "n_failed": 0,
        "n_inaudible": 0,
        "continuity_pct": 100.0,
        "stall_gate_pct": 100.0,
        "ttfa_audible_s_p95": 0.4,
    }
    return {**row, **kw}


def test_the_default_level_checks_failures_continuity_and_audible_first_audio():
    level = ServiceLevel()
    assert level.player_model == "max_deficit_0.1s"
    assert level.max_audible_p95_s == 1.0 and level.max_failed_pct == 1.0
    assert level.holds(_summary())
    assert level.holds(_summary(ttfa_audible_s_p95=1.0))  # inclusive
    assert level.broken(_summary(ttfa_audible_s_p95=1.2)) == ["audible first audio p95 (s)"]
    # 1 failure of 20 is 5% > 1%; so is 1 inaudible stream (a listener got nothing)
    assert level.broken(_summary(n_failed=1)) == ["failures %"]
    assert level.broken(_summary(n_inaudible=1)) == ["failures %"]
    # a summary.json's nested block reads the same as a points.csv column
    nested = {**_summary(), "ttfa_audible_s": {"p95": 1.5}}
    del nested["ttfa_audible_s_p95"]
    assert level.broken(nested) == ["audible first audio p95 (s)"]
    # no audible time at all (every stream inaudible): not measured, never holds
    assert "audible first audio p95 (s)" in level.broken(_summary(ttfa_audible_s_p95=None))


def test_continuity_is_read_under_the_named_player_model():
    gate = ServiceLevel(95.0, player_model="stall_gate")
    row = _summary(continuity_pct=50.0, stall_gate_pct=96.0)
    assert gate.holds(row)
    assert ServiceLevel(95.0).broken(row) == ["continuity % (max_deficit_0.1s)"]
    with pytest.raises(ValueError, match="player model"):
        ServiceLevel(player_model="patient")


def test_wer_is_checked_where_it_was_measured():
    level = ServiceLevel(max_wer_pct=5.0)
    assert level.broken(_summary(wer_pct=6.0)) == ["WER %"]
    assert level.holds(_summary(wer_pct=5.0))  # inclusive
    # not measured there (a search point; the live search): judged on the other figures
    assert level.holds(_summary()) and level.holds(_summary(wer_pct=6.0), live=True)


def test_a_cliff_in_the_search_and_the_figure_that_broke_first():
    # By hand: 1, 2, 4 hold; at 8 the audible p95 is 1.3 s (continuity still 100%); 16
    # holds again by luck. Capacity 4, first failing 8, broke first: audible first audio;
    # 16 is a cliff (a load holding above a failing one).
    level = ServiceLevel()
    points = {
        1: _summary(ttfa_audible_s_p95=0.2),
        2: _summary(ttfa_audible_s_p95=0.3),
        4: _summary(ttfa_audible_s_p95=0.6),
        8: _summary(ttfa_audible_s_p95=1.3),
        16: _summary(ttfa_audible_s_p95=0.9),
    }
    cap = find_capacity(passes(points, level))
    assert (cap.load, cap.verdict, cap.first_failing) == (4, FOUND, 8)
    assert cap.cliff and cap.passing_above == (16,)
    assert level.broken(points[cap.first_failing]) == ["audible first audio p95 (s)"]


def test_from_spec_names_unknown_keys():
    assert ServiceLevel.from_spec({"min_continuity_pct": None}) == ServiceLevel()
    with pytest.raises(ValueError, match="unknown key.*max_ttfa"):
        ServiceLevel.from_spec({"max_ttfa": 1})


def test_capacity_md_names_the_figure_that_broke_first_and_the_cliff(tmp_path):
    import pandas as pd

    from thetalker.report import capacity as report
    from thetalker.report.common import load_points

    base = {"model": "m", "system": "s", "rtfx": 1.0, "chars_per_s": 1.0, "n_scored": 20}
    base |= {"n_failed": 0, "n_inaudible": 0, "continuity_pct": 100.0, "audible_pct": 100.0}
    audible = {1: 0.2, 2: 0.5, 4: 1.3, 8: 0.8}  # 4 breaks the 1 s p95; 8 holds again
    rows = [
        {**base, "point": f"c{c}", "concurrency": c, "ttfa_audible_s_p95": p95}
        for c, p95 in audible.items()
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "points.csv", index=False)
    points = load_points(tmp_path / "points.csv")
    level = ServiceLevel()
    [row] = report.capacity_rows(points, ["m"], ["s"], level, 1, 2.99)
    assert row["capacity_streams"] == 2 and row["first_failing_streams"] == 4
    assert row["broke_first"] == "audible first audio p95 (s) 1.3 (limit 1) at 4"
    assert row["cliff_streams"] == "8"
    text = report.capacity_table([row], points, level, 1, 2.99)
    assert (
        "| m | s | 2 | audible first audio p95 (s) 1.3 (limit 1) at 4 | holds again at 8 |" in text
    )
    assert "audible first audio p95 <= 1 s" in text
