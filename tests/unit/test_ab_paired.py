"""The interleaved A/B's paired changes (thetalker.metrics.intervals.paired) and their
verdicts (thetalker.metrics.ab_verdicts): a planted change is found, an A/A finds none,
drift between alternate rounds is no verdict, and what is not a pair is refused."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.records import make_record
from thetalker import metrics
from thetalker.metrics import (
    IMPROVEMENT,
    NO_CHANGE,
    REGRESSION,
    MinEffect,
    failed_arm,
    failure_flag,
    judge,
    mean_statistic,
    pair_rounds,
    paired_change,
    paired_rtfx_ratio,
    percentile_statistic,
    requests_to_show,
    resolution,
    share_pct_statistic,
)

N = 40  # requests per arm per round
ROUNDS = 3
P50 = percentile_statistic(50)


def _ttfa(record):
    return record.get("ttfa_s")


def _arm(times: np.ndarray, first: int = 0, warmup: int = 1, ok=None) -> list[dict]:
    """One arm's records of one round: a warmup, then a request per time (prompt i)."""
    out = [make_record(-1, warmup=True)] if warmup else []
    for i, t in enumerate(times, start=first):
        good = ok is None or ok[i - first]
        record = make_record(i, ok=good)
        if good:
            record.update(ttfa_s=float(t), ttfa_audible_s=float(t) + 0.02)
        out.append(record)
    return out


def _prompts(seed: int = 1) -> np.ndarray:
    """Each prompt's own time to first audio: prompts differ far more than the noise."""
    return np.random.default_rng(seed).uniform(0.1, 0.6, N)


def _round(base: np.ndarray, shift: float, noise: float, rng) -> list[dict]:
    return _arm(base + shift + rng.normal(0.0, noise, N))


def _ab(shift_by_round: list[float], noise: float = 0.003, seed: int = 2):
    rng = np.random.default_rng(seed)
    base = _prompts()
    a = [_round(base, 0.0, noise, rng) for _ in shift_by_round]
    b = [_round(base, s, noise, rng) for s in shift_by_round]
    return pair_rounds(a, b)


def test_pairs_are_made_by_request_index_without_warmup():
    rounds = _ab([0.0, 0.0])
    assert len(rounds) == 2 and all(len(r) == N for r in rounds)
    for pairs in rounds:
        for ra, rb in pairs:
            assert ra["request_index"] == rb["request_index"] >= 0
            assert ra["sample_id"] == rb["sample_id"]


def test_a_planted_slowdown_is_a_regression_in_every_round():
    change = paired_change(_ab([0.05] * ROUNDS), _ttfa, P50, "difference", seed=0)
    assert change.estimate == pytest.approx(0.05, abs=0.005)
    assert change.interval.low > 0.0 and change.n_pairs == N * ROUNDS
    assert change.interval.method == metrics.METHOD_PAIRED_BOOTSTRAP
    assert len(change.per_round) == ROUNDS and all(v > 0.04 for v in change.per_round)
    assert change.b - change.a == pytest.approx(change.estimate)
    verdict = judge(change, "time", higher_is_better=False, min_effect=MinEffect())
    assert verdict.label == REGRESSION, verdict.why
    # the same change the other way round is an improvement
    back = paired_change(_ab([-0.05] * ROUNDS), _ttfa, P50, "difference", seed=0)
    assert judge(back, "time", higher_is_better=False).label == IMPROVEMENT


def test_pairing_sees_what_independent_samples_cannot():
    # 10 ms on prompts spread over 0.1-0.6 s: paired, the interval is a few ms wide.
    change = paired_change(_ab([0.01] * ROUNDS), _ttfa, mean_statistic, "difference", seed=0)
    assert change.interval.low > 0.0
    assert resolution(change, "time") < 0.005


def test_identical_arms_give_no_change_on_every_figure():
    base = _prompts()
    a = [_arm(base) for _ in range(ROUNDS)]
    b = [_arm(base) for _ in range(ROUNDS)]
    pairs = pair_rounds(a, b)
    for stat in (P50, percentile_statistic(95), mean_statistic):
        change = paired_change(pairs, _ttfa, stat, "difference")
        assert change.estimate == 0.0
        assert change.interval.low is None  # no spread is no certainty
        assert judge(change, "time", higher_is_better=False).label == NO_CHANGE
    ratio = paired_rtfx_ratio(pairs)
    assert ratio.estimate == pytest.approx(1.0)
    assert judge(ratio, "ratio", higher_is_better=True).label == NO_CHANGE
    share = paired_change(pairs, failure_flag, share_pct_statistic, "difference")
    assert judge(share, "share", higher_is_better=False).label == NO_CHANGE


def test_an_aa_run_with_noise_gives_no_change():
    change = paired_change(_ab([0.0] * ROUNDS, noise=0.02), _ttfa, P50, "difference")
    assert change.interval.low < 0.0 < change.interval.high
    assert judge(change, "time", higher_is_better=False).label == NO_CHANGE


def test_drift_between_alternate_rounds_is_no_verdict():
    # B better in round 1 (ran second on a cooling machine), worse in round 2 (ran first),
    # better in 3: pooled, a change the interval clears; round by round, no agreement.
    change = paired_change(_ab([-0.12, 0.06, -0.12]), _ttfa, mean_statistic, "difference")
    assert change.interval.high < 0.0  # the pooled interval alone would call it
    verdict = judge(change, "time", higher_is_better=False)
    assert verdict.label == NO_CHANGE
    assert "round 2" in verdict.why


def test_rounds_that_agree_in_sign_but_not_in_size_are_no_verdict():
    # An A/A on a busy machine: one round's B landed on a busy moment (+0.8 s), the other
    # a little slower (+0.04 s). Every round is worse by the minimum effect, and the pooled
    # bootstrap clears 0, but the rounds, taken as two observations, do not.
    change = paired_change(_ab([0.8, 0.04, 0.05], noise=0.003), _ttfa, P50, "difference")
    assert change.interval.low > 0.0 and all(v > 0.03 for v in change.per_round)
    verdict = judge(change, "time", higher_is_better=False)
    assert verdict.label == NO_CHANGE
    assert "between rounds" in verdict.why
    # Two rounds that agree closely pass the same condition.
    close = paired_change(_ab([0.50, 0.52, 0.51], noise=0.003), _ttfa, P50, "difference")
    assert judge(close, "time", higher_is_better=False).label == REGRESSION


def test_between_rounds_takes_a_ratio_on_the_log_scale():
    from dataclasses import replace

    from thetalker.metrics.ab_verdicts import between_rounds

    change = replace(paired_rtfx_ratio(_ab([0.0] * ROUNDS)), per_round=[0.9, 1.0, 1.1])
    spread = between_rounds(change, "ratio")
    assert spread.low <= spread.value <= spread.high and spread.n == ROUNDS
    assert spread.value == pytest.approx(float(np.exp(np.mean(np.log(change.per_round)))))


def test_a_change_below_the_minimum_effect_is_not_named():
    change = paired_change(_ab([0.01] * ROUNDS), _ttfa, mean_statistic, "difference")
    assert change.interval.low > 0.0
    # 10 ms: below 20 ms (and below 10% of A's ~0.35 s)
    assert judge(change, "time", higher_is_better=False).label == NO_CHANGE
    loose = MinEffect(time_s=0.005, time_pct=1.0)
    assert judge(change, "time", higher_is_better=False, min_effect=loose).label == REGRESSION


def test_the_time_minimum_is_the_larger_of_seconds_and_percent_of_a():
    # 50 ms on ~0.35 s is 14%: passes 20 ms and 10%, not 20%.
    change = paired_change(_ab([0.05] * ROUNDS), _ttfa, mean_statistic, "difference")
    strict = MinEffect(time_pct=20.0)
    assert judge(change, "time", False, strict).label == NO_CHANGE
    assert judge(change, "time", False, MinEffect(time_s=0.06)).label == NO_CHANGE


def test_mismatched_sample_id_is_refused_naming_round_and_index():
    base = _prompts()
    a, b = [_arm(base), _arm(base)], [_arm(base), _arm(base)]
    b[1][5]["sample_id"] = "other"  # record 5 is request_index 4 (after the warmup)
    with pytest.raises(ValueError, match=r"^round 2: request_index 4 is sample_id 's4' in A"):
        pair_rounds(a, b)


def test_a_request_missing_on_one_side_is_refused():
    base = _prompts()
    a, b = [_arm(base)], [_arm(base)]
    del b[0][10]
    with pytest.raises(ValueError, match=r"^round 1: request_index 9 is in A's records, not B's"):
        pair_rounds(a, b)
    with pytest.raises(ValueError, match="A has 1 round"):
        pair_rounds(a, [b[0], b[0]])
    with pytest.raises(ValueError, match="request_index 3 appears twice in A"):
        pair_rounds([a[0] + [a[0][4]]], [a[0]])


def test_a_request_failed_on_one_side_counts_for_failures_not_for_times():
    base = _prompts()
    ok_b = [i % 4 != 0 for i in range(N)]  # B fails every 4th prompt
    pairs = pair_rounds([_arm(base)] * 3, [_arm(base, ok=ok_b)] * 3)
    times = paired_change(pairs, _ttfa, P50, "difference")
    assert times.n_pairs == 3 * (N - N // 4)
    assert times.estimate == 0.0
    failures = paired_change(pairs, failure_flag, share_pct_statistic, "difference")
    assert failures.n_pairs == 3 * N
    assert failures.estimate == pytest.approx(25.0) and failures.a == 0.0
    # every pair counts and the share moved 25 pp in both rounds: a regression
    assert judge(failures, "share", higher_is_better=False).label == REGRESSION


def _audio_ab(scale_b: float):
    """Rounds whose requests deliver 1.6-2.4 s of audio, B's `scale_b` times A's."""
    base = _prompts()
    rng = np.random.default_rng(5)

    def arm(scale: float) -> list[dict]:
        records = _arm(base)
        for r in records[1:]:
            r["audio_s"] = 2.0 * scale * float(rng.uniform(0.8, 1.2))
        return records

    return pair_rounds([arm(1.0) for _ in range(ROUNDS)], [arm(scale_b) for _ in range(ROUNDS)])


def test_rtfx_ratio_keeps_each_rounds_window_and_finds_a_planted_change():
    pairs = _audio_ab(1.1)
    change = paired_rtfx_ratio(pairs, seed=0)
    assert change.estimate == pytest.approx(1.1, rel=0.05)
    assert change.interval.low > 1.0 and len(change.per_round) == ROUNDS
    window = metrics.measurement_window_s([ra for ra, _ in pairs[0]])
    audio = sum(ra["audio_s"] for ra, _ in pairs[0])
    assert change.a == pytest.approx(
        np.mean([sum(ra["audio_s"] for ra, _ in p) / window for p in pairs])
    )
    assert audio / window > 0
    assert judge(change, "ratio", higher_is_better=True).label == IMPROVEMENT


def test_the_bootstrap_is_seeded():
    pairs = _ab([0.02] * ROUNDS, noise=0.02)
    one = paired_change(pairs, _ttfa, P50, "difference", seed=3)
    two = paired_change(pairs, _ttfa, P50, "difference", seed=3)
    assert one.interval == two.interval
    assert paired_rtfx_ratio(pairs, seed=3) == paired_rtfx_ratio(pairs, seed=3)


def test_kind_is_checked():
    with pytest.raises(ValueError, match="kind must be one of"):
        paired_change(_ab([0.0]), _ttfa, P50, "percent")
    with pytest.raises(ValueError, match="verdict kind must be one of"):
        judge(paired_change(_ab([0.0]), _ttfa, P50, "difference"), "rate", True)


def test_a_failed_arm_is_named_never_a_speedup():
    base = _prompts()
    ok = [i < N // 4 for i in range(N)]  # 30 of 40 fail
    records = _arm(base, ok=ok)
    verdict = failed_arm(records, "B")
    assert verdict is not None
    assert verdict.label == f"failed arm (B): {N - N // 4} of {N} requests failed"
    assert failed_arm(_arm(base), "A") is None
    half = [i % 2 == 0 for i in range(N)]  # exactly half: not "mostly"
    assert failed_arm(_arm(base, ok=half), "A") is None
    summary = metrics.summarize_point(records)
    assert failed_arm(summary, "B").label == verdict.label


def test_resolution_and_requests_to_show_follow_one_over_root_n():
    change = paired_change(_ab([0.0] * ROUNDS, noise=0.02), _ttfa, mean_statistic, "difference")
    half = resolution(change, "time")
    assert half == pytest.approx(change.interval.half_width)
    assert resolution(change, "time", base=change.a) == pytest.approx(100 * half / change.a)
    n = change.n_pairs
    assert requests_to_show(change, n, half) == n
    assert requests_to_show(change, n, half / 2) == pytest.approx(4 * n, abs=1)
    ratio = paired_rtfx_ratio(_audio_ab(1.0))
    assert resolution(ratio, "ratio") == pytest.approx(100 * ratio.interval.half_width)


def test_a_change_with_no_spread_between_requests_is_judged_by_its_rounds():
    # Every stream the same length (an engine capping each at its token limit): RTFx does
    # not move when requests are redrawn, so the bootstrap has no spread; the rounds decide.
    from dataclasses import replace

    from thetalker.metrics import Interval

    change = paired_rtfx_ratio(_ab([0.0] * ROUNDS))
    flat = replace(change, estimate=0.5, interval=Interval(0.5, None, None, "x", 10),
                   per_round=[0.5, 0.49, 0.51])  # fmt: skip
    assert judge(flat, "ratio", higher_is_better=True).label == REGRESSION
    spread = replace(flat, per_round=[0.5, 1.3, 0.2])
    assert judge(spread, "ratio", higher_is_better=True).label == NO_CHANGE
    one = replace(flat, per_round=[0.5])
    assert judge(one, "ratio", higher_is_better=True).label == NO_CHANGE


def test_rounds_all_alike_are_no_measure_of_the_noise_between_starts():
    # An A/A on the engine: every stream of A's two starts stalled past the gate, none of
    # B's; the share moved by +100 points in both rounds, with no spread between them.
    from dataclasses import replace

    from thetalker.metrics import Interval
    from thetalker.metrics.ab_verdicts import between_rounds, unanimous_rounds

    change = paired_rtfx_ratio(_ab([0.0] * 2))
    flat = replace(change, estimate=100.0, interval=Interval(100.0, None, None, "x", 8),
                   per_round=[100.0] * 3, kind="difference", a=0.0, b=100.0)  # fmt: skip
    verdict = judge(flat, "share", higher_is_better=True, families=5)
    assert verdict.label == NO_CHANGE and "all alike" in verdict.why
    assert between_rounds(flat, "share", 5).low is None
    assert unanimous_rounds(5) == 8 and unanimous_rounds(1) == 6
    many = replace(flat, per_round=[100.0] * 8)
    assert judge(many, "share", higher_is_better=True, families=5).label == IMPROVEMENT


def test_two_rounds_give_no_verdict_however_alike():
    # An engine A/A: both of B's starts stalled their first batch, neither of A's, and the
    # two rounds' ratios came out 17.5x and 18.1x: alike enough for t with 1 degree of
    # freedom. A start's noise is not normal; a verdict rests on 3 rounds or more.
    from thetalker.metrics.ab_verdicts import MIN_ROUNDS

    two = paired_change(_ab([0.50, 0.50]), _ttfa, P50, "difference")
    verdict = judge(two, "time", higher_is_better=False)
    assert MIN_ROUNDS == 3 and verdict.label == NO_CHANGE and "2 rounds" in verdict.why
    three = paired_change(_ab([0.50, 0.50, 0.50]), _ttfa, P50, "difference")
    assert judge(three, "time", higher_is_better=False).label == REGRESSION
