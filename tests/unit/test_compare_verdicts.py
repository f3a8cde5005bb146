"""thetalker-compare's verdict per figure (thetalker.report.compare_verdicts): the A/B's rule
on two result folders, its column and CSV fields, and the exit status a nightly job gates on."""

from __future__ import annotations

import csv

from tests.support.records import make_record
from tests.unit.test_compare import BASE_AUDIO, BASE_TTFA, _run, write_point
from thetalker.cli import compare as compare_cli
from thetalker.metrics import IMPROVEMENT, NO_CHANGE, REGRESSION, MinEffect
from thetalker.report import compare


def _point(folder, rounds: list[list[dict]]) -> None:
    for k, records in enumerate(rounds, start=1):
        write_point(folder, "s", "m", 2, records, round_=k if len(rounds) > 1 else None)


def _slower(by: float) -> list[dict]:
    return _run(BASE_AUDIO, [t + by for t in BASE_TTFA])


def test_slower_first_audio_in_every_round_is_a_regression_and_exits_3(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    _point(a, [_run(BASE_AUDIO, BASE_TTFA)] * 3)
    _point(b, [_slower(0.2)] * 3)
    (row,), _, _, _ = compare.compare_folders(a, b)
    verdicts = row["verdicts"]
    assert verdicts["ttfa_s_p50_change"].label == REGRESSION
    assert verdicts["ttfa_s_p90_change"].label == REGRESSION
    assert "all 3 rounds alike" in verdicts["ttfa_s_p50_change"].why  # the same run twice
    assert verdicts["rtfx_ratio"].label == NO_CHANGE
    assert verdicts["continuity_pct_change"].label == NO_CHANGE
    text = compare.format_changes([row])
    assert "| regression: TTFA p50 B-A (s), TTFA p90 B-A (s) |" in text
    out = tmp_path / "changes.csv"
    assert compare_cli.main([str(a), str(b), "--csv", str(out)]) == 0
    assert compare_cli.main([str(a), str(b), "--fail-on-regression"]) == 3
    assert "regression: runs/s/m/c2: ttfa_s_p50_change regression" in capsys.readouterr().err
    (flat,) = csv.DictReader(out.open())
    assert flat["verdict"] == "regression: TTFA p50 B-A (s), TTFA p90 B-A (s)"
    assert flat["ttfa_s_p50_change_verdict"] == REGRESSION
    assert flat["rtfx_ratio_verdict"] == NO_CHANGE and flat["rtfx_ratio_verdict_why"]
    # a minimum effect above the change: not named, and the gate passes
    lenient = ["--min-effect-time-s", "0.5", "--fail-on-regression"]
    assert compare_cli.main([str(a), str(b), *lenient]) == 0


def test_the_same_run_twice_is_no_change_and_passes_the_gate(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _point(a, [_run(BASE_AUDIO, BASE_TTFA)] * 3)
    _point(b, [_run(BASE_AUDIO, BASE_TTFA)] * 3)
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert {v.label for v in row["verdicts"].values()} == {NO_CHANGE}
    assert f"| {NO_CHANGE} |" in compare.format_changes([row])
    assert compare_cli.main([str(a), str(b), "--fail-on-regression"]) == 0


def test_rounds_that_disagree_give_no_verdict(tmp_path):
    # B's rounds 1 and 3 are 0.25 s slower, its round 2 30 ms faster: pooled, p90 is far
    # worse (the slow rounds fill the tail); round by round, the signs differ.
    a, b = tmp_path / "a", tmp_path / "b"
    _point(a, [_run(BASE_AUDIO, BASE_TTFA)] * 3)
    _point(b, [_slower(0.25), _slower(-0.03), _slower(0.25)])
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert row["ttfa_s_p90_change"].low > 0.0  # the interval alone would call it
    verdict = row["verdicts"]["ttfa_s_p90_change"]
    assert verdict.label == NO_CHANGE and "round 2" in verdict.why
    assert compare_cli.main([str(a), str(b), "--fail-on-regression"]) == 0


def test_one_round_a_side_rests_on_the_interval_alone(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _point(a, [_run(BASE_AUDIO, BASE_TTFA)])
    _point(b, [_run([2 * x for x in BASE_AUDIO], BASE_TTFA)])
    (row,), _, _, _ = compare.compare_folders(a, b)
    verdict = row["verdicts"]["rtfx_ratio"]
    assert verdict.label == IMPROVEMENT
    assert "rests on the interval alone" in verdict.why
    # a minimum effect above the change keeps it unnamed
    (row,), _, _, _ = compare.compare_folders(a, b, min_effect=MinEffect(rate_pct=150.0))
    assert row["verdicts"]["rtfx_ratio"].label == NO_CHANGE


def test_a_failed_arm_is_named_on_every_figure_and_fails_the_gate(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _point(a, [_run(BASE_AUDIO, BASE_TTFA)] * 3)
    broken = [make_record(i, ok=i < 5) for i in range(20)]  # 15 of 20 fail
    _point(b, [broken] * 3)
    (row,), _, _, _ = compare.compare_folders(a, b)
    labels = {v.label for v in row["verdicts"].values()}
    assert labels == {"failed arm (B): 45 of 60 requests failed"}
    assert "| failed arm (B): 45 of 60 requests failed |" in compare.format_changes([row])
    assert compare_cli.main([str(a), str(b), "--fail-on-regression"]) == 3
    # the other way round A failed: named, but no regression to gate on
    assert compare_cli.main([str(b), str(a), "--fail-on-regression"]) == 0


def test_a_negative_minimum_effect_is_refused(tmp_path, capsys):
    assert compare_cli.main([str(tmp_path), str(tmp_path), "--min-effect-share-pp", "-1"]) == 2
    assert "MinEffect.share_pp must be a number >= 0" in capsys.readouterr().err
