"""thetalker-compare on two hand-built result folders: what changed, and what is noise."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_report import make_record, write_point
from thetalker import metrics
from thetalker.cli import compare as compare_cli
from thetalker.data.records import append_record
from thetalker.report import compare


def _run(audio_s: list[float], ttfa_s: list[float]) -> list[dict]:
    """Scored records sent 0.1 s apart, each 0.5 s long: RTFx = sum(audio) / window."""
    records = []
    for i, (audio, ttfa) in enumerate(zip(audio_s, ttfa_s, strict=True)):
        records.append({**make_record(i), "audio_s": audio, "ttfa_s": ttfa})
    return records


BASE_AUDIO = [2.0 + 0.1 * (i % 5) for i in range(20)]
BASE_TTFA = [0.10 + 0.01 * (i % 7) for i in range(20)]


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A: base. B: m/c2 twice as fast with TTFA unchanged; m/c1 the same; B lacks m/c4."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_point(a, "s", "m", 1, _run(BASE_AUDIO, BASE_TTFA))
    write_point(b, "s", "m", 1, _run(BASE_AUDIO, BASE_TTFA))
    write_point(a, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    write_point(b, "s", "m", 2, _run([2 * x for x in BASE_AUDIO], BASE_TTFA))
    write_point(a, "s", "m", 4, _run(BASE_AUDIO, BASE_TTFA))
    return a, b


def test_points_in_both_are_compared_and_the_rest_named(folders):
    rows, only_a, only_b = compare.compare_folders(*folders)
    assert [(r["system"], r["model"], r["point"]) for r in rows] == [
        ("s", "m", "c1"),
        ("s", "m", "c2"),
    ]
    assert only_a == [("s", "m", "c4")] and only_b == []


def test_a_doubled_rtfx_is_distinguishable_and_no_change_is_not(folders):
    rows, _, _ = compare.compare_folders(*folders)
    same, faster = rows
    assert same["rtfx_ratio"].value == pytest.approx(1.0)
    assert compare.distinguishable(same) == []
    # B delivers twice the audio in the same window: B/A = 2 exactly
    assert faster["rtfx_ratio"].value == pytest.approx(2.0)
    assert faster["rtfx_ratio"].low > 1.0
    assert compare.distinguishable(faster) == ["RTFx B/A"]
    # TTFA identical: a change of 0 whose interval holds 0
    assert faster["ttfa_s_p90_change"].value == pytest.approx(0.0)
    assert not faster["ttfa_s_p90_change"].excludes(0.0)


def test_the_change_is_the_metrics_bootstrap_of_the_two_runs(folders):
    rows, _, _ = compare.compare_folders(*folders)
    a = _run(BASE_AUDIO, BASE_TTFA)
    b = _run([2 * x for x in BASE_AUDIO], BASE_TTFA)
    assert rows[1]["rtfx_ratio"] == metrics.rtfx_change_bootstrap(b, a, ratio=True)
    assert rows[1]["continuity_pct_change"] == metrics.continuity_change_bootstrap(b, a)


def test_slower_first_audio_and_lost_continuity_are_caught(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_point(a, "s", "m", 8, _run(BASE_AUDIO, BASE_TTFA))
    worse = _run(BASE_AUDIO, [t + 0.2 for t in BASE_TTFA])
    for r in worse[:12]:
        r["continuity_ok"] = False
    write_point(b, "s", "m", 8, worse)
    (row,), _, _ = compare.compare_folders(a, b)
    assert row["ttfa_s_p50_change"].value == pytest.approx(0.2)
    assert row["continuity_pct_change"].value == pytest.approx(-60.0)
    assert compare.distinguishable(row) == [
        "TTFA p50 B-A (s)",
        "TTFA p90 B-A (s)",
        "continuity B-A (pp)",
    ]


def test_rounds_on_both_sides_use_welch(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, scale in ((a, 1.0), (b, 1.5)):
        for k, drift in enumerate((1.0, 1.02, 0.98), start=1):
            path = folder / "runs" / "s" / "m" / "c2" / f"round{k}" / "records.jsonl"
            path.parent.mkdir(parents=True)
            with path.open("w", encoding="utf-8") as fh:
                for r in _run([x * scale * drift for x in BASE_AUDIO], BASE_TTFA):
                    append_record(fh, r)
    (row,), _, _ = compare.compare_folders(a, b)
    assert row["rounds_a"] == row["rounds_b"] == 3
    assert row["rtfx_ratio"].method == "welch-t"
    assert row["rtfx_ratio"].value == pytest.approx(1.5, rel=1e-3)


def test_cli_prints_the_table_and_writes_csv(folders, tmp_path):
    a, b = folders
    out = tmp_path / "changes.csv"
    result = subprocess.run(
        ["thetalker-compare", str(a), str(b), "--csv", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    c2 = next(line for line in lines if line.startswith("| s | m | c2 |"))
    assert "2.000x [" in c2 and c2.endswith("| RTFx B/A |")
    c1 = next(line for line in lines if line.startswith("| s | m | c1 |"))
    assert c1.endswith("| none |")
    assert f"only in {a}: s/m/c4" in result.stdout
    rows = list(csv.DictReader(out.open()))
    assert [r["distinguishable"] for r in rows] == ["", "RTFx B/A"]


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert compare_cli.main([str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert "nope: not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert compare_cli.main([str(tmp_path / "empty"), str(tmp_path / "empty")]) == 1
    assert "no (system, model, point)" in capsys.readouterr().err
