"""The server-metrics reader (`thetalker.pipeline.server_metrics.families`): prometheus_client's
parser under the three prefixes, deltas over a point, quantiles from buckets worked by hand."""

from __future__ import annotations

import math

import pytest

from thetalker.pipeline.server_metrics import (
    counter_deltas,
    histogram_deltas,
    histogram_quantile,
    merge_histograms,
    parse_metrics,
)


def exposition(prefix: str, ttfp: tuple[int, int, int], aborted: int, running: int) -> str:
    """vllm-omni's /metrics text as prometheus_client writes it (with `_created` lines)."""
    a, b, inf = ttfp
    labels = 'model_name="m",replica="0",stage="1"'
    return f"""# HELP {prefix}audio_ttfp_s Time from request arrival to first audio packet.
# TYPE {prefix}audio_ttfp_s histogram
{prefix}audio_ttfp_s_bucket{{le="0.05",{labels}}} {a}.0
{prefix}audio_ttfp_s_bucket{{le="0.1",{labels}}} {b}.0
{prefix}audio_ttfp_s_bucket{{le="+Inf",{labels}}} {inf}.0
{prefix}audio_ttfp_s_count{{{labels}}} {inf}.0
{prefix}audio_ttfp_s_sum{{{labels}}} {0.05 * inf}
{prefix}audio_ttfp_s_created{{{labels}}} 1.7e9
# HELP {prefix}speech_stream_aborted_total Streams ended early.
# TYPE {prefix}speech_stream_aborted_total counter
{prefix}speech_stream_aborted_total{{model_name="m",reason="closed"}} {aborted}.0
{prefix}speech_stream_aborted_created{{model_name="m",reason="closed"}} 1.7e9
# HELP {prefix}num_requests_running Requests running.
# TYPE {prefix}num_requests_running gauge
{prefix}num_requests_running{{model_name="m"}} {running}.0
# HELP vllm:num_requests_running vLLM's own family, not read here.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} 7.0
"""


@pytest.mark.parametrize("prefix", ["vllm_omni:", "vllm:omni_", "thetalker:"])
def test_every_prefix_gives_the_same_families(prefix: str) -> None:
    snap = parse_metrics(exposition(prefix, (1, 2, 3), 4, 5))
    assert snap.prefix == prefix
    assert sorted(snap.families) == [
        "audio_ttfp_s",
        "num_requests_running",
        "speech_stream_aborted",
    ]
    kind, samples = snap.of("speech_stream_aborted")
    assert kind == "counter"
    assert [(s.suffix, dict(s.labels), s.value) for s in samples] == [
        ("_total", {"model_name": "m", "reason": "closed"}, 4.0)
    ]
    kind, samples = snap.of("audio_ttfp_s")
    assert kind == "histogram" and not any(s.suffix == "_created" for s in samples)


def test_text_with_none_of_the_prefixes_has_no_families() -> None:
    assert parse_metrics("# TYPE sglang:x gauge\nsglang:x 1\n").families == {}


def test_counter_and_histogram_deltas_over_a_point() -> None:
    before = parse_metrics(exposition("vllm_omni:", (1, 2, 3), 4, 0))
    after = parse_metrics(exposition("vllm_omni:", (3, 5, 9), 6, 2))
    counters, resets = counter_deltas(before, after)
    assert resets == []
    assert counters["speech_stream_aborted"] == [
        {"labels": {"model_name": "m", "reason": "closed"}, "value": 2.0}
    ]
    assert "num_requests_running" not in counters  # a gauge is a series, not a delta
    hists, _ = histogram_deltas(before, after)
    (row,) = hists["audio_ttfp_s"]
    assert row["labels"] == {"model_name": "m", "replica": "0", "stage": "1"}
    assert row["buckets"] == [["0.05", 2.0], ["0.1", 3.0], ["+Inf", 6.0]]
    assert row["count"] == 6.0 and row["sum"] == pytest.approx(0.05 * 9 - 0.05 * 3)


def test_a_label_set_new_in_the_point_counts_from_zero_and_a_drop_is_a_reset() -> None:
    before = parse_metrics("")
    after = parse_metrics(exposition("vllm_omni:", (0, 1, 1), 1, 0))
    counters, _ = counter_deltas(before, after)
    assert counters["speech_stream_aborted"][0]["value"] == 1.0
    restarted = parse_metrics(exposition("vllm_omni:", (0, 0, 0), 0, 0))
    counters, resets = counter_deltas(after, restarted)
    assert resets == ["speech_stream_aborted"]
    # A reset voids the family's deltas for the point (issue 36 item 3): what is left of
    # it would count part of the point as all of it.
    assert "speech_stream_aborted" not in counters


# Cumulative: 2 at or under 0.1 s, 6 under 0.5, 8 under 1.0, 10 in all.
BUCKETS = [["0.1", 2], ["0.5", 6], ["1", 8], ["+Inf", 10]]


@pytest.mark.parametrize(
    ("q", "value", "lower", "upper"),
    [
        (0.10, 0.05, 0.0, 0.1),  # rank 1 of the 2 in [0, 0.1]: halfway
        (0.25, 0.15, 0.1, 0.5),  # rank 2.5: 0.5 of the 4 in (0.1, 0.5] -> 0.1 + 0.4 * 0.125
        (0.50, 0.40, 0.1, 0.5),  # rank 5: 3 of 4 -> 0.1 + 0.4 * 0.75
        (0.80, 1.00, 0.5, 1.0),  # rank 8: the top of (0.5, 1]
        (0.95, 1.00, 1.0, math.inf),  # rank 9.5, in +Inf: the last finite bound
    ],
)
def test_quantiles_from_buckets_by_hand(q, value, lower, upper) -> None:
    found = histogram_quantile(q, BUCKETS)
    assert found is not None
    assert found.value == pytest.approx(value)
    assert (found.lower, found.upper) == (lower, upper)


def test_quantile_of_nothing_is_none_and_q_is_checked() -> None:
    assert histogram_quantile(0.5, [["0.1", 0], ["+Inf", 0]]) is None
    assert histogram_quantile(0.5, []) is None
    with pytest.raises(ValueError, match="quantile"):
        histogram_quantile(1.5, BUCKETS)


def test_merging_label_sets_adds_buckets_sums_and_counts() -> None:
    rows = [
        {"labels": {"stage": "0"}, "buckets": [["0.1", 1], ["+Inf", 2]], "sum": 0.3, "count": 2},
        {"labels": {"stage": "1"}, "buckets": [["0.1", 0], ["+Inf", 3]], "sum": 1.2, "count": 3},
    ]
    merged = merge_histograms(rows)
    assert merged == {"buckets": [["0.1", 1.0], ["+Inf", 5.0]], "sum": 1.5, "count": 5}
    assert merge_histograms(rows, {"stage": "1"})["count"] == 3
    assert merge_histograms(rows, {"stage": "9"}) is None
