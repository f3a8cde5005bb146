"""thetalker.report.server's reconciliation of one point, worked by hand: the server's deltas
(as server_metrics.json holds them) beside the client's records and the GPU sampler."""

from __future__ import annotations

import pytest

from thetalker.report.server import pool_server_metrics, reconcile, server_table


def record(ttfa: float | None, ok: bool = True, warmup: bool = False) -> dict:
    return {"ttfa_s": ttfa, "ok": ok, "warmup": warmup}


def round_data(ttfp_buckets, ttfp_sum, queue_sum, completed, aborted=0.0, ok100=None) -> dict:
    count = ttfp_buckets[-1][1]
    return {
        "version": 1,
        "available": True,
        "prefix": "vllm_omni:",
        "counters": {
            "speech_stream_completed": [{"labels": {"model_name": "m"}, "value": completed}],
            "speech_stream_aborted": [
                {"labels": {"model_name": "m", "reason": "closed"}, "value": aborted}
            ],
            "audio_continuity_ok": [
                {
                    "labels": {"stage": "1", "replica": "0", "threshold_ms": "100"},
                    "value": completed if ok100 is None else ok100,
                }
            ],
        },
        "histograms": {
            "audio_ttfp_s": [
                {
                    "labels": {"stage": "1", "replica": "0"},
                    "buckets": ttfp_buckets,
                    "sum": ttfp_sum,
                    "count": count,
                }
            ],
            "request_queue_wait_s": [
                {
                    "labels": {},
                    "buckets": [["0.1", count], ["+Inf", count]],
                    "sum": queue_sum,
                    "count": count,
                }
            ],  # fmt: skip
            "stage_gen_time_s": [
                {"labels": {"stage": "0"}, "buckets": [["+Inf", 4]], "sum": 8.0, "count": 4},
                {"labels": {"stage": "1"}, "buckets": [["+Inf", 4]], "sum": 2.0, "count": 4},
            ],
        },
        "gauges": {},
    }


# Four requests: two first audios in (0.25, 0.5], two in (0.5, 1.0]; mean TTFP 0.6 s.
BUCKETS = [["0.25", 0], ["0.5", 2], ["1", 4], ["+Inf", 4]]


def test_one_point_reconciled_by_hand() -> None:
    records = [record(0.5), record(0.7), record(0.8), record(0.8), record(0.1, warmup=True)]
    data = round_data(BUCKETS, ttfp_sum=2.4, queue_sum=0.2, completed=3, aborted=1, ok100=2)
    gpu = [{"source": "nvidia-smi", "mean_utilization_pct": 80.0, "peak_memory_mib": 1000.0}]
    row = reconcile(records, [data], gpu)
    assert row["client_sent"] == 4 and row["client_ok"] == 4  # the warmup is not scored
    assert row["client_ttfa_mean_s"] == pytest.approx(0.7)
    assert row["client_ttfa_p50_s"] == pytest.approx(0.75)
    # p50: rank 2 of 4, the top of (0.25, 0.5]; p95: rank 3.8, 1.8 of the 2 in (0.5, 1].
    assert row["server_ttfp_p50_s"] == pytest.approx(0.5)
    assert row["server_ttfp_p50_bucket_s"] == "0.25-0.5"
    assert row["server_ttfp_p95_s"] == pytest.approx(0.5 + 0.5 * 1.8 / 2)
    assert row["server_ttfp_p95_bucket_s"] == "0.5-1"
    assert row["server_ttfp_mean_s"] == pytest.approx(0.6)
    assert row["queue_wait_mean_s"] == pytest.approx(0.05)
    assert row["gen_time_mean_s_stage0"] == pytest.approx(2.0)
    assert row["gen_time_mean_s_stage1"] == pytest.approx(0.5)
    assert row["server_continuity_pct_100ms"] == pytest.approx(100 * 2 / 3)
    assert (row["server_counted"], row["server_counted_from"], row["lost"]) == (4, "streams", 0)
    assert row["gap_mean_s"] == pytest.approx(0.1)
    assert row["gap_p50_s"] == pytest.approx(0.25)
    # The client's mean first audio, in three parts that add up to it.
    assert row["part_queue_s"] == pytest.approx(0.05)
    assert row["part_generation_s"] == pytest.approx(0.55)
    assert row["part_transport_s"] == pytest.approx(0.1)
    assert row["busy_mean_pct"] == 80.0 and row["memory_peak_mib"] == 1000.0
    assert (row["busy_device"], row["memory_device"]) == ("GPU", "GPU")


def test_each_busy_and_memory_figure_names_its_device() -> None:
    # The embedded server has no GPU: the sampler watched its process tree's CPU and RSS.
    records = [record(0.5) for _ in range(4)]
    data = round_data(BUCKETS, 2.4, 0.2, completed=4)
    cpu = [{"source": "proc", "mean_utilization_pct": 177.0, "peak_memory_mib": 512.0}]
    gpu = [{"source": "nvidia-smi", "mean_utilization_pct": 80.0, "peak_memory_mib": 1000.0}]
    rows = [
        {**reconcile(records, [data], cpu), "system": "local", "model": "m", "point": "c1"},
        {**reconcile(records, [data], gpu), "system": "vllm", "model": "m", "point": "c1"},
    ]
    assert (rows[0]["busy_device"], rows[0]["memory_device"]) == ("CPU", "RSS")
    table = server_table(rows)
    header, _, local, vllm = table.splitlines()[:4]
    assert "GPU" not in header  # the header claims no device: each cell names its own
    assert "177.0 (CPU, % of one core)" in local and "512 (RSS)" in local
    assert "GPU" not in local
    assert "80.0 (GPU)" in vllm and "1000 (GPU)" in vllm


def test_rounds_sampled_on_different_devices_give_no_figure() -> None:
    cpu = {"source": "proc", "mean_utilization_pct": 177.0, "peak_memory_mib": 512.0}
    gpu = {"source": "nvidia-smi", "mean_utilization_pct": 80.0, "peak_memory_mib": 1000.0}
    row = reconcile([record(0.5)], [round_data(BUCKETS, 2.4, 0.2, completed=1)], [cpu, gpu])
    assert row["busy_mean_pct"] is None and row["memory_peak_mib"] is None
    assert row["busy_device"] == "mixed: CPU, GPU"


def test_a_request_the_server_never_counted_is_lost() -> None:
    records = [record(0.5) for _ in range(5)]
    row = reconcile(records, [round_data(BUCKETS, 2.4, 0.2, completed=4)])
    assert row["lost"] == 1
    assert "(**1 lost**)" in server_table([{**row, "system": "s", "model": "m", "point": "c4"}])


def test_rounds_pool_by_adding_their_deltas() -> None:
    one = round_data(BUCKETS, 2.4, 0.2, completed=4)
    pooled = pool_server_metrics([one, one, {"available": False, "reason": "x"}])
    (ttfp,) = pooled["histograms"]["audio_ttfp_s"]
    assert ttfp["buckets"] == [["0.25", 0], ["0.5", 4], ["1", 8], ["+Inf", 8]]
    assert ttfp["count"] == 8 and ttfp["sum"] == pytest.approx(4.8)
    assert pooled["counters"]["speech_stream_completed"][0]["value"] == 8


def test_a_point_without_server_metrics_says_why() -> None:
    nothing = {"version": 1, "available": False, "reason": "GET /metrics answered HTTP 404"}
    row = reconcile([record(0.5)], [nothing], [None])
    assert row["server_metrics"] is False
    assert row["server_reason"] == "GET /metrics answered HTTP 404"
    table = server_table([{**row, "system": "nari", "model": "m", "point": "c1"}])
    assert "no server metrics (GET /metrics answered HTTP 404)" in table
