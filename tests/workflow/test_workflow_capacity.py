"""The bench job's capacity search, repeats and open-loop points, against a scripted server
whose knee the test sets: a request that arrives while K others are in flight streams with
gaps (0.4 s between 0.1 s chunks), any other streams smoothly. So a closed-loop point holds
continuity exactly up to K streams, and the bisection between the grid's last passing and
first failing point is worked out here by hand. The search points are points like any other
(records, summary, provenance, marked `search_point`), listed in search.json, rows of
points.csv, and capacity.md (from points.csv alone) says what the job found."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.bench_jobs import job, records_files
from tests.support.scripted_server import Script, ScriptedServer, start_scripted_server
from thetalker.pipeline.job import BenchJob
from thetalker.pipeline.serve_and_sweep import run_job
from thetalker.report import capacity as capacity_report
from thetalker.report.common import load_points
from thetalker.report.points import points_rows, search_records, write_points

SMOOTH = Script(chunks=((0.0, 4800), (0.02, 4800), (0.02, 4800)))  # 0.3 s of audio, ahead
GAPPY = Script(chunks=((0.0, 4800), (0.4, 4800), (0.4, 4800)))  # 0.3 s deficits


def streams(body: dict[str, Any]) -> bool:
    return body.get("stream") is True or body.get("stream_format") in ("audio", "sse")


def knee_at(k: int):
    """script_for: gaps for a request that finds k or more others in flight."""

    def script_for(server: ScriptedServer, body: dict[str, Any]) -> Script:
        # Streaming requests only: the client's probes are answered whole (never `finished`).
        in_flight = sum(1 for r in server.requests if not r.finished and streams(r.body))
        return GAPPY if in_flight >= k else SMOOTH

    return script_for


@contextlib.contextmanager
def scripted(k: int) -> Iterator[Any]:
    box: dict[str, ScriptedServer] = {}
    with start_scripted_server(script_for=lambda body: knee_at(k)(box["s"], body)) as server:
        box["s"] = server

        @contextlib.contextmanager
        def launch(spec: Any) -> Iterator[Any]:
            class Handle:
                base_url = server.base_url
                pid = os.getpid()
                command = ["scripted-server"]
                env: dict[str, str] = {}
                log_path = None

            yield Handle()

        yield launch


def run(tmp_path: Path, k: int, **changes: Any) -> tuple[BenchJob, Path, dict[str, Any]]:
    spec = job(tmp_path, **changes)
    run_dir = tmp_path / "runs" / spec.system / spec.model
    manifest = run_dir / "search.json"
    with scripted(k) as launch:
        run_job(spec, records_files(run_dir, spec), tmp_path / "server.log", manifest, launch)
    return spec, run_dir, json.loads(manifest.read_text())


def capacity_md(tmp_path: Path, run_dir: Path, spec: BenchJob) -> tuple[str, list[dict]]:
    """capacity.md from points.csv rebuilt from the records alone (grid + manifest)."""
    paths = [*records_files(run_dir, spec), *search_records([run_dir / "search.json"])]
    write_points(points_rows(paths), tmp_path / "points.csv")
    points = load_points(tmp_path / "points.csv")
    # The jobs here carry the older capacity spec: continuity alone.
    level = capacity_report.ServiceLevel(95.0, None, max_audible_p95_s=None, max_failed_pct=None)
    rows = capacity_report.capacity_rows(points, [spec.model], [spec.system], level, 2, 2.99)
    return capacity_report.capacity_table(rows, points, level, 2, 2.99), rows


def test_bisection_between_last_pass_and_first_failure_finds_the_knee(tmp_path: Path) -> None:
    # Knee at 5: c1, c2 hold, c8 fails -> (2+8)//2 = 5 holds -> (5+8)//2 = 6 fails -> 5, 6
    # are adjacent: two search points, capacity 5.
    spec, run_dir, manifest = run(tmp_path, k=5)
    assert [(p["point"], p["holds"]) for p in manifest["points"]] == [("c5", True), ("c6", False)]
    assert manifest["capacity"]["streams"]["load"] == 5
    assert manifest["capacity"]["streams"]["verdict"] == "found"
    for point in ("c5", "c6"):
        folder = run_dir / "search" / point
        assert json.loads((folder / "summary.json").read_text())["search_point"] is True
        provenance = json.loads((folder / "provenance.json").read_text())
        assert provenance["search_point"] is True and provenance["point"] == point
    assert json.loads((run_dir / "c2" / "provenance.json").read_text())["search_point"] is False
    table, rows = capacity_md(tmp_path, run_dir, spec)
    assert rows[0]["capacity_streams"] == 5 and rows[0]["first_failing_streams"] == 6
    assert "| m | scripted | 5 |" in table
    points = load_points(tmp_path / "points.csv")
    searched = points[points["search_point"]]["point"].tolist()
    assert sorted(searched) == ["c5", "c6"]


def test_max_steps_bounds_the_search(tmp_path: Path) -> None:
    # One step only: c5 holds, the search stops; the capacity is 5 with c8 failing.
    cap = {"max_steps": 1, "min_continuity_pct": 95.0, "ttfa_slo_s": None}
    _, _, manifest = run(tmp_path, k=5, capacity=cap)
    assert [p["point"] for p in manifest["points"]] == ["c5"]
    assert manifest["capacity"]["streams"]["first_failing"] == 8


@pytest.mark.parametrize(
    ("k", "label", "verdict"),
    [(100, "at least 8", "at_least"), (0, "never (fails at 1)", "never")],
)
def test_no_bracket_gives_the_documented_answer_and_no_search(
    tmp_path: Path, k: int, label: str, verdict: str
) -> None:
    spec, run_dir, manifest = run(tmp_path, k=k)
    assert manifest["points"] == [] and manifest["refine"] is True
    assert manifest["capacity"]["streams"]["label"] == label
    assert not (run_dir / "search").exists() or not any((run_dir / "search").iterdir())
    table, rows = capacity_md(tmp_path, run_dir, spec)
    assert rows[0]["verdict"] == verdict and f"| {label} |" in table


def test_refine_off_writes_an_empty_manifest(tmp_path: Path) -> None:
    _, _, manifest = run(tmp_path, k=5, capacity=None)
    assert manifest["refine"] is False and manifest["points"] == []


def test_repeats_run_rounds_back_to_back_and_rtfx_interval_comes_from_them(
    tmp_path: Path,
) -> None:
    spec, run_dir, manifest = run(
        tmp_path, k=100, repeats=2, concurrency=(1, 2), requests={1: 2, 2: 2}
    )
    for point in ("c1", "c2"):
        for k in (1, 2):
            provenance = json.loads((run_dir / point / f"round{k}" / "provenance.json").read_text())
            assert provenance["round"] == k
    table, rows = capacity_md(tmp_path, run_dir, spec)
    points = load_points(tmp_path / "points.csv")
    assert set(points["rounds"]) == {2}
    assert set(points["rtfx_method"]) == {"repeats-t"}
    assert rows[0]["capacity_label"] == "at least 2"


def test_open_loop_points_are_named_by_rate_and_searched_in_requests_per_second(
    tmp_path: Path,
) -> None:
    # Knee at 100 in flight: every rate holds, so the rate capacity is "at least" the top.
    spec, run_dir, manifest = run(
        tmp_path,
        k=100,
        request_rates=(2.0, 4.5),
        rate_requests=4,
        concurrency=(1,),
        requests={1: 2},
    )
    assert (run_dir / "r2" / "records.jsonl").is_file()
    assert (run_dir / "r4.5" / "records.jsonl").is_file()
    assert manifest["capacity"]["requests_per_s"]["label"] == "at least 4.5 req/s"
    _, rows = capacity_md(tmp_path, run_dir, spec)
    assert rows[0]["capacity_rps"] == 4.5 and rows[0]["verdict_rps"] == "at_least"


def test_stock_contaminated_points_are_marked_in_tables_and_warned(tmp_path: Path) -> None:
    from thetalker.pipeline.verdicts import contaminated_points_warning
    from thetalker.report.common import STOCK_CONTAMINATED, failed_mark

    clean, dirty = tmp_path / "a" / "provenance.json", tmp_path / "b" / "provenance.json"
    for path, flag in ((clean, False), (dirty, True)):
        path.parent.mkdir()
        path.write_text(json.dumps({"stock_contaminated": flag}))
    from thetalker.data.manifest import SearchManifest, SearchPoint, write_search_manifest

    manifest = tmp_path / "search.json"
    point = SearchPoint("c3", 3, None, False, None, None, None, (), (), (str(dirty),))
    write_search_manifest(manifest, SearchManifest("s", "m", True, None, (point,)))
    warning = contaminated_points_warning([clean, dirty, tmp_path / "missing.json"], [manifest])
    assert warning is not None and warning.startswith("WARNING: 2 stock point(s)")
    assert str(clean) not in warning and warning.count(str(dirty)) == 2
    assert contaminated_points_warning([clean]) is None
    assert failed_mark({"n_failed": 0, "stock_contaminated": True}) == f" {STOCK_CONTAMINATED}"
    assert failed_mark({"n_failed": 0, "stock_contaminated": False}) == ""


def _continuity_row(text: str, system: str) -> dict[str, float]:
    """The first table of continuity.md: the value of each point column of one system."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[1] == system:
            return {
                h: float(c.split()[0])
                for h, c in zip(header[2:], cells[2:], strict=True)
                if c != "n/a"
            }
    raise AssertionError(f"{system} not in continuity.md")


@pytest.mark.slow
def test_default_run_gives_each_system_a_capacity_that_agrees_with_continuity(
    default_workflow_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    from thetalker.pipeline.capacity import find_capacity

    workdir = default_workflow_run  # `snakemake --cores 2` on a copy (tests/conftest.py)
    from snakemake.utils import validate

    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    validate(config, str(workdir / "config" / "schema.yaml"))  # the defaults filled, as the run had
    assert config["capacity"]["refine"] is True
    tables = workdir / "results" / "tables"
    capacity_text = (tables / "capacity.md").read_text()
    continuity_text = (tables / "continuity.md").read_text()
    from thetalker.pipeline.load_points import service_level_spec

    level = capacity_report.ServiceLevel.from_spec(service_level_spec(config))
    runs = workdir / "results" / "runs"
    monkeypatch.chdir(workdir)  # the manifests name files as the workflow does: from its folder
    # points.csv rebuilt from records alone (the grid's and the search manifests') gives the
    # same capacity.md.
    paths = sorted(runs.glob("*/piper-joe/[cr]*/records.jsonl"))  # the grid: c{N}, r{R}
    manifests = [runs / s / "piper-joe" / "search.json" for s in config["systems"]]
    rebuilt = tmp_path / "points.csv"
    write_points(points_rows([*paths, *search_records(manifests)]), rebuilt)
    points = load_points(rebuilt)
    cost = (config["report"]["headline_concurrency"], config["report"]["gpu_hour_usd"])
    rows = capacity_report.capacity_rows(
        points,
        ["piper-joe"],
        list(config["systems"]),
        level,
        *cost,
        pd.read_csv(tables / "server.csv"),  # queue and generation times for "limited by"
    )
    assert capacity_report.capacity_table(rows, points, level, *cost) == capacity_text
    for row in rows:
        system = row["system"]
        # A verdict for each system (on a loaded machine the several-figure level may fail
        # at the first point: "never"), and the one the level gives over its points.
        assert row["verdict"] in ("found", "at_least", "never"), row
        by_point = _continuity_row(continuity_text, system)
        loads = capacity_report.loads_of(points, "piper-joe", system)
        passed = {load: level.holds(summary) for load, summary in loads.items()}
        assert find_capacity(passed).load == row["capacity_streams"], (system, by_point)
        manifest = json.loads((runs / system / "piper-joe" / "search.json").read_text())
        assert manifest["capacity"]["streams"]["load"] == row["capacity_streams"]
        for point in manifest["points"]:  # the search points, closed and open loop
            assert point["point"] in by_point, (point["point"], by_point)


def test_the_search_says_which_figure_broke_first_and_repeats_the_boundary(
    tmp_path: Path,
) -> None:
    # capacity.slo as the workflow writes it; the knee at 5 is a continuity knee (the
    # scripted server's first audio stays short), so continuity is the figure that broke at
    # the first failing load, c6; the boundary c5 is run once more under search/c5/repeat1/.
    capacity = {"max_steps": 3, "repeat_boundary": 1, "slo": {"min_continuity_pct": 95.0}}
    spec, run_dir, manifest = run(tmp_path, k=5, capacity=capacity)
    found = manifest["capacity"]["streams"]
    assert (found["load"], found["first_failing"]) == (5, 6)
    assert found["broke_first"] == ["continuity % (max_deficit_0.1s)"]
    assert found["cliff"] == []
    [again] = found["boundary_repeats"]
    assert again["point"] == "c5" and again["holds"] is True
    assert (run_dir / "search" / "c5" / "repeat1" / "records.jsonl").is_file()
    c6 = next(p for p in manifest["points"] if p["point"] == "c6")
    assert c6["broken"] == ["continuity % (max_deficit_0.1s)"]
    assert set(c6["figures"]) == {
        "failures %",
        "continuity % (max_deficit_0.1s)",
        "audible first audio p95 (s)",
    }
