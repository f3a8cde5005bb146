"""The machine cost of a point (issue 50) from records and provenance.json to points.csv,
capacity.md and cost.md: GPU energy above idle, CPU-seconds where no GPU was sampled, and
the reason where a GPU gave no power; every number worked from the files by hand."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.support.records import make_record, write_point
from thetalker.metrics import summarize_point
from thetalker.report import capacity as report_capacity
from thetalker.report import points, tables
from thetalker.report.settings import ReportSettings


def _settings() -> str:
    return ReportSettings(
        models=("m",),
        systems=("a", "b", "c"),
        headline=2,
        ratio=None,
        gpu_hour_usd=2.99,
        min_continuity_pct=95.0,
        ttfa_slo_s=None,
        grid=(2,),
        slo={"min_continuity_pct": 95.0, "ttfa_slo_s": None},
    ).to_json()


def _provenance(records: Path, resources: dict, idle: dict | None = None) -> None:
    body = {"resources": resources, "idle_power": idle}
    records.with_name("provenance.json").write_text(json.dumps(body))


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    """a: a GPU point of 600 J over 2 s, idle 100 W; b: a CPU point of 3 CPU-seconds;
    c: a GPU that reports no power.draw."""
    expected = {}
    for system in ("a", "b", "c"):
        records = [make_record(i) for i in range(4)]
        path = write_point(tmp_path, system, "m", 2, records)
        expected[system] = summarize_point(records, concurrency=2)
    gpu = {"source": "nvidia-smi", "power_note": None}
    _provenance(
        tmp_path / "runs/a/m/c2/records.jsonl",
        {**gpu, "scored": {"seconds": 2.0, "cpu_seconds": None, "energy_j": 600.0}},
        {"seconds": 5.0, "idle_w": 100.0, "power_note": None},
    )
    _provenance(
        tmp_path / "runs/b/m/c2/records.jsonl",
        {"source": "proc", "scored": {"seconds": 2.0, "cpu_seconds": 3.0, "energy_j": None}},
    )
    no_power = {"source": "nvidia-smi", "power_note": "power.draw [N/A] (not reported)"}
    _provenance(
        tmp_path / "runs/c/m/c2/records.jsonl",
        {**no_power, "scored": {"seconds": 2.0, "cpu_seconds": None, "energy_j": None}},
        {"seconds": None, "idle_w": None, "power_note": no_power["power_note"]},
    )
    out = tmp_path / "points.csv"
    paths = sorted(str(p) for p in (tmp_path / "runs").rglob("records.jsonl"))
    assert points.main(["--out", str(out), *paths]) == 0
    assert path.exists()
    return out, expected


def test_points_csv_prices_the_point_in_joules_and_cpu_seconds(built) -> None:
    out, expected = built
    rows = {r["system"]: r for r in csv.DictReader(out.open())}
    audio = expected["a"]["audio_s"]
    chars = expected["a"]["chars_per_s"] * expected["a"]["window_s"]
    # 600 J - 100 W x 2 s = 400 J above idle.
    assert float(rows["a"]["gpu_energy_j"]) == 400.0
    assert float(rows["a"]["gpu_idle_w"]) == 100.0
    assert float(rows["a"]["j_per_audio_s"]) == pytest.approx(400.0 / audio)
    assert float(rows["a"]["wh_per_million_chars"]) == pytest.approx(400 / 3600 / chars * 1e6)
    assert float(rows["b"]["cpu_s_per_audio_s"]) == pytest.approx(3.0 / expected["b"]["audio_s"])
    assert rows["b"]["j_per_audio_s"] == "" and rows["b"]["energy_note"] == ""
    assert rows["c"]["energy_note"].startswith("power.draw [N/A]")
    assert rows["c"]["gpu_energy_j"] == rows["c"]["j_per_audio_s"] == ""


def test_capacity_and_cost_tables_show_it(built, tmp_path) -> None:
    out, expected = built
    j = 400.0 / expected["a"]["audio_s"]
    cpu = 3.0 / expected["b"]["audio_s"]
    table = tmp_path / "capacity.md"
    argv = ["--points", str(out), "--settings", _settings(), "--table", str(table)]
    assert report_capacity.main([*argv, "--figure", str(tmp_path / "c.png")]) == 0
    text = table.read_text()
    assert f"| {j:.2f} J/audio-s, " in text and "(idle 100 W apart) |" in text
    assert f"| {cpu:.2f} CPU-s/audio-s |" in text
    assert "| no energy: power.draw [N/A] (not reported) |" in text
    rows = {r["system"]: r for r in csv.DictReader(table.with_suffix(".csv").open())}
    assert float(rows["a"]["at_capacity_j_per_audio_s"]) == pytest.approx(j)
    cost = tmp_path / "cost.md"
    argv = ["--points", str(out), "--settings", _settings(), "--cost", str(cost)]
    for name in ("throughput", "continuity", "ttfa"):
        argv += [f"--{name}", str(tmp_path / f"{name}.md")]
    assert tables.main(argv) == 0
    machine = cost.read_text().split("Machine cost")[1]
    assert f"| m | {j:.2f} J/audio-s, " in machine and f"| {cpu:.2f} CPU-s/audio-s |" in machine
    (row,) = csv.DictReader(cost.with_suffix(".csv").open())
    assert float(row["b_cpu_s_per_audio_s"]) == pytest.approx(cpu)
