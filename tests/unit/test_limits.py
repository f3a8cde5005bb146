"""What limited a system at its knee and its overload shape (thetalker.report.limits) and the
admission rejections they read (thetalker.metrics.overload): each verdict from hand-built
rows, and from records through points.csv to capacity.md."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.support.records import make_record, write_point
from thetalker.metrics import is_rejection, summarize_point
from thetalker.report import capacity as report_capacity
from thetalker.report import points
from thetalker.report.limits import NOT_DETERMINED, limited_by, overload_shape
from thetalker.report.settings import ReportSettings

QUIET = {"n_scored": 30, "n_rejected": 0, "busy_device": "gpu", "busy_pct": 60.0}


@pytest.mark.parametrize(
    ("point", "server", "verdict"),
    [
        ({**QUIET, "busy_pct": 94.0}, None, "gpu"),
        ({**QUIET, "busy_device": "cpu", "busy_pct": 97.0}, None, "cpu"),
        ({**QUIET, "n_rejected": 3}, None, "admission"),
        (QUIET, {"queue_wait_mean_s": 0.5, "gen_time_mean_s_stage0": 0.3}, "server queue"),
        ({**QUIET, "schedule_lag_s_p95": 0.25}, None, "client"),
        (QUIET, {"queue_wait_mean_s": 0.1, "gen_time_mean_s_stage0": 0.3}, NOT_DETERMINED),
        ({**QUIET, "busy_pct": 95.0, "n_rejected": 3}, None, f"{NOT_DETERMINED} (admission; gpu)"),
        (
            {"n_scored": 30, "n_rejected": 3},
            None,
            f"{NOT_DETERMINED} (admission; busy share not measured)",
        ),
    ],
)
def test_the_limit_is_named_only_when_the_evidence_separates_it(point, server, verdict) -> None:
    assert limited_by(point, server)[0] == verdict


def test_the_figures_behind_the_verdict_are_shown() -> None:
    server = {
        "queue_wait_mean_s": 0.5,
        "gen_time_mean_s_stage0": 0.2,
        "gen_time_mean_s_stage1": 0.1,
    }
    verdict, evidence = limited_by(QUIET, server)
    # Generation is the stages summed: 0.2 + 0.1 = 0.3 s, under the 0.5 s queue wait.
    assert verdict == "server queue"
    assert evidence == (
        "gpu busy 60%; rejected 0/30; queue wait 0.500 s vs generation 0.300 s; client lag p95 n/a"
    )


def test_rejections_are_refusals_for_load() -> None:
    def failed(kind: str, status: int | None) -> dict:
        return {"ok": False, "error": {"type": kind, "status": status}, "http_status": status}

    assert is_rejection(failed("overloaded", 503))  # a kind that typed it (sglang-omni, Nari)
    assert is_rejection(failed("http_status", 503))  # the local server's connection limit
    assert is_rejection(failed("http_status", 429))
    assert not is_rejection(failed("http_status", 500))
    assert not is_rejection(failed("not_ready", 503))  # Nari's "not ready": no load refused
    assert not is_rejection({"ok": True, "error": None, "http_status": 200})


def test_overload_shape_lists_refusals_from_the_first_failing_load_up() -> None:
    loads = {
        4: {"n_scored": 30, "n_rejected": 0},
        8: {"n_scored": 30, "n_rejected": 12, "rejected_wall_s_p50": 0.004},
        16: {"n_scored": 30, "n_rejected": 30, "rejected_wall_s_p50": 0.003},
    }
    assert overload_shape(loads, 8) == (
        "8: 12/30 refused in 0.004 s p50; 16: 30/30 refused in 0.003 s p50"
    )
    assert overload_shape({4: loads[4]}, 4) == "none refused"
    assert overload_shape(loads, None) == ""


def _refused(i: int, wall_s: float) -> dict:
    record = make_record(i, ok=False)
    record.update(error={"type": "overloaded", "message": "queue full", "status": 503})
    record.update(http_status=503, wall_s=wall_s)
    return record


def test_a_server_that_sheds_load_shows_it_in_capacity_md(tmp_path: Path) -> None:
    held = [make_record(i) for i in range(10)]
    shed = [make_record(i) for i in range(6)] + [_refused(6 + i, 0.01 * (i + 1)) for i in range(4)]
    write_point(tmp_path, "a", "m", 1, held)
    write_point(tmp_path, "a", "m", 2, shed)
    busy = {"source": "nvidia-smi", "scored": {"seconds": 1.0, "mean_utilization_pct": 40.0}}
    for c in (1, 2):
        prov = tmp_path / f"runs/a/m/c{c}/provenance.json"
        prov.write_text(json.dumps({"resources": busy}))
    summary = summarize_point(shed, concurrency=2)
    # 4 refused in 0.01, 0.02, 0.03, 0.04 s: p50 0.025 s.
    assert summary["n_rejected"] == 4
    assert summary["rejected_wall_s"]["p50"] == pytest.approx(0.025)
    out = tmp_path / "points.csv"
    paths = sorted(str(p) for p in (tmp_path / "runs").rglob("records.jsonl"))
    assert points.main(["--out", str(out), *paths]) == 0
    settings = ReportSettings(
        models=("m",),
        systems=("a",),
        headline=1,
        ratio=None,
        gpu_hour_usd=2.0,
        min_continuity_pct=95.0,
        ttfa_slo_s=None,
        grid=(1, 2),
        slo={"min_continuity_pct": 95.0, "ttfa_slo_s": None},
    ).to_json()
    table = tmp_path / "capacity.md"
    argv = ["--points", str(out), "--settings", settings, "--table", str(table)]
    assert report_capacity.main(argv) == 0
    text = table.read_text()
    assert "| admission: gpu busy 40%; rejected 4/10; " in text
    assert "| 2: 4/10 refused in 0.025 s p50 |" in text
    (row,) = csv.DictReader(table.with_suffix(".csv").open())
    assert (row["capacity_streams"], row["limited_by"]) == ("1", "admission")
