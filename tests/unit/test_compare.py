"""thetalker-compare on two hand-built result folders: what changed, and what is noise."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.records import make_record, with_audio
from thetalker import metrics
from thetalker.cli import compare as compare_cli
from thetalker.data.record_writes import append_record, write_json
from thetalker.data.records import SCHEMA_VERSION
from thetalker.report import compare


def write_point(
    root: Path,
    system: str,
    model: str,
    c: int,
    records: list[dict],
    round_: int | None = None,
    kind: str = "runs",
    **summary: object,
) -> Path:
    """A finished point as the bench job leaves it: records, summary.json beside them, and
    the run's manifest search.json (no search points)."""
    run = root / kind / system / model
    folder = run / f"c{c}" / (f"round{round_}" if round_ else "")
    folder.mkdir(parents=True)
    with (folder / "records.jsonl").open("w", encoding="utf-8") as fh:
        for record in records:
            append_record(fh, record)
    rate = records[0]["sample_rate"] if records else 24000  # as the client writes it
    facts = {"schema_version": SCHEMA_VERSION, "concurrency": c, "request_rate": None}
    facts["sample_rate"] = rate
    facts["options"] = {"model": model, "protocol": "http"}
    write_json(folder / "summary.json", {**facts, **summary})
    write_json(run / "search.json", {"version": 1, "system": system, "model": model, "points": []})
    return folder / "records.jsonl"


def _run(audio_s: list[float], ttfa_s: list[float]) -> list[dict]:
    """Scored records sent 0.1 s apart, each 0.5 s long: RTFx = sum(audio) / window."""
    records = []
    for i, (audio, ttfa) in enumerate(zip(audio_s, ttfa_s, strict=True)):
        records.append({**with_audio(make_record(i), audio), "ttfa_s": ttfa})
    return records


BASE_AUDIO = [2.0 + 0.1 * (i % 5) for i in range(20)]
BASE_TTFA = [0.10 + 0.01 * (i % 7) for i in range(20)]


def write_rounds(
    root: Path,
    c: int,
    audio: list[float],
    ttfa: list[float],
    drifts: tuple[float, ...] = (1.0, 1.02),
) -> None:
    """One point in rounds (a change is judged against the noise between them), each round's
    audio scaled by its drift."""
    for k, drift in enumerate(drifts, start=1):
        write_point(root, "s", "m", c, _run([x * drift for x in audio], ttfa), round_=k)


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A: base. B: m/c2 twice as fast with TTFA unchanged; m/c1 the same; B lacks m/c4. Two
    rounds a side."""
    a, b = tmp_path / "a", tmp_path / "b"
    write_rounds(a, 1, BASE_AUDIO, BASE_TTFA)
    write_rounds(b, 1, BASE_AUDIO, BASE_TTFA)
    write_rounds(a, 2, BASE_AUDIO, BASE_TTFA)
    write_rounds(b, 2, [2 * x for x in BASE_AUDIO], BASE_TTFA)
    write_rounds(a, 4, BASE_AUDIO, BASE_TTFA)
    return a, b


def test_points_in_both_are_compared_and_the_rest_named(folders):
    rows, only_a, only_b, _ = compare.compare_folders(*folders)
    assert [(r["run"], r["system"], r["model"], r["point"]) for r in rows] == [
        ("runs", "s", "m", "c1"),
        ("runs", "s", "m", "c2"),
    ]
    assert only_a == [("runs", "s", "m", "c4")] and only_b == []


def test_a_doubled_rtfx_is_distinguishable_and_no_change_is_not(folders):
    rows, _, _, _ = compare.compare_folders(*folders)
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


def test_one_round_a_side_prints_the_bootstrap_but_names_no_change(tmp_path):
    # One round a side: a bootstrap over each run's requests knows nothing of the noise
    # between two runs, so even B at twice A's RTFx is not called a change.
    a, b = tmp_path / "a", tmp_path / "b"
    base, faster = _run(BASE_AUDIO, BASE_TTFA), _run([2 * x for x in BASE_AUDIO], BASE_TTFA)
    write_point(a, "s", "m", 2, base)
    write_point(b, "s", "m", 2, faster)
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert row["rtfx_ratio"] == metrics.rtfx_change_bootstrap(faster, base, ratio=True)
    assert row["continuity_pct_change"] == metrics.continuity_change_bootstrap(faster, base)
    assert row["rtfx_ratio"].low > 1.0  # the requests alone would say so
    assert compare.distinguishable(row) == []
    assert "not judged: 1 round(s) in A, 1 in B" in compare.format_changes([row])
    assert compare.csv_rows([row])[0]["not_judged"].startswith("not judged")


def test_a_summary_that_contradicts_its_records_is_refused_naming_both(tmp_path):
    # The records say what was measured; a summary.json saying otherwise is not trusted.
    a = tmp_path / "a"
    records = _run(BASE_AUDIO, BASE_TTFA)
    path = write_point(a, "s", "m", 2, records)  # its summary says 22050, as they do
    rewritten = [{**r, "sample_rate": 16000} for r in records]
    path.write_text("".join(json.dumps(r) + "\n" for r in rewritten), encoding="utf-8")
    with pytest.raises(compare.CompareError) as info:
        compare.compare_folders(a, a)
    message = str(info.value)
    assert str(path.with_name("summary.json")) in message
    assert "sample_rate 22050, but its records records.jsonl were measured at 16000" in message
    mixed = tmp_path / "mixed"
    records = _run(BASE_AUDIO, BASE_TTFA)
    records[3] = {**records[3], "sample_rate": 16000}
    write_point(mixed, "s", "m", 2, records)
    with pytest.raises(compare.CompareError, match="mix sample_rate values"):
        compare.compare_folders(mixed, mixed)


def test_slower_first_audio_and_lost_continuity_are_caught(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    worse = _run(BASE_AUDIO, [t + 0.2 for t in BASE_TTFA])
    for r in worse[:12]:
        r["continuity_ok"] = False
    for k in (1, 2):
        write_point(a, "s", "m", 8, _run(BASE_AUDIO, BASE_TTFA), round_=k)
        write_point(b, "s", "m", 8, worse, round_=k)
    (row,), _, _, _ = compare.compare_folders(a, b)
    assert row["ttfa_s_p50_change"].value == pytest.approx(0.2)
    assert row["continuity_pct_change"].value == pytest.approx(-60.0)
    assert compare.distinguishable(row) == [
        "TTFA p50 B-A (s)",
        "TTFA p90 B-A (s)",
        "continuity max_deficit_0.1s B-A (pp)",
    ]


def test_rounds_on_both_sides_use_welch(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, scale in ((a, 1.0), (b, 1.5)):
        for k, drift in enumerate((1.0, 1.02, 0.98), start=1):
            records = _run([x * scale * drift for x in BASE_AUDIO], BASE_TTFA)
            write_point(folder, "s", "m", 2, records, round_=k)
    (row,), _, _, _ = compare.compare_folders(a, b)
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
    c2 = next(line for line in lines if line.startswith("| runs | s | m | c2 |"))
    assert "2.000x [" in c2 and c2.endswith("| RTFx B/A |")
    c1 = next(line for line in lines if line.startswith("| runs | s | m | c1 |"))
    assert c1.endswith("| none |")
    assert f"only in {a}: runs/s/m/c4" in result.stdout
    rows = list(csv.DictReader(out.open()))
    assert [r["distinguishable"] for r in rows] == ["", "RTFx B/A"]


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert compare_cli.main([str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert "nope: not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert compare_cli.main([str(tmp_path / "empty"), str(tmp_path / "empty")]) == 1
    assert "no (run, system, model, point)" in capsys.readouterr().err


# --- like with like: the rule is the manifest's rounds and the facts that must agree ---------


def test_a_quality_run_and_a_speed_run_are_never_rounds_of_one_point(tmp_path):
    # The default layout has both results/runs/S/M/c2 and results/quality/S/M/c2: two runs.
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        write_point(folder, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA))
        write_point(
            folder, "s", "m", 2, _run([3 * x for x in BASE_AUDIO], BASE_TTFA), kind="quality"
        )
    rows, only_a, only_b, unlike = compare.compare_folders(a, b)
    assert [(r["run"], r["rounds_a"], r["rounds_b"]) for r in rows] == [
        ("quality", 1, 1),
        ("runs", 1, 1),
    ]
    assert [r["rtfx_ratio"].value for r in rows] == [pytest.approx(1.0)] * 2
    assert not any(compare.distinguishable(r) for r in rows)
    assert (only_a, only_b, unlike) == ([], [], [])


def test_a_stale_records_file_beside_rounds_is_refused_not_pooled(tmp_path):
    a = tmp_path / "a"
    for k in (1, 2):
        write_point(a, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA), round_=k)
    stale = a / "runs" / "s" / "m" / "c2" / "records.jsonl"
    stale.write_text((stale.parent / "round1" / "records.jsonl").read_text())
    with pytest.raises(compare.CompareError, match="both records.jsonl and round folders"):
        compare.compare_folders(a, a)


def test_records_without_a_run_manifest_or_summary_are_not_a_run(tmp_path):
    a = tmp_path / "a"
    write_point(a, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    (a / "runs" / "s" / "m" / "search.json").unlink()
    assert compare.find_points(a) == {}  # a glob's match is no run
    write_point(tmp_path / "b", "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    (tmp_path / "b" / "runs" / "s" / "m" / "c2" / "summary.json").unlink()
    with pytest.raises(compare.CompareError, match="records.jsonl without summary.json"):
        compare.find_points(tmp_path / "b")


@pytest.mark.parametrize(
    ("over", "named"),
    [
        ({"sample_rate": 16000}, "sample rate (22050 vs 16000)"),
        ({"options": {"model": "other", "protocol": "http"}}, "model (m vs other)"),
        ({"concurrency": 3}, "load (2 streams vs 3 streams)"),
    ],
)
def test_points_that_measured_different_things_are_named_not_compared(
    tmp_path, capsys, over, named
):
    a, b = tmp_path / "a", tmp_path / "b"
    write_point(a, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    records = _run(BASE_AUDIO, BASE_TTFA)
    if "sample_rate" in over:  # what the records say, and their summary with them
        rate = over["sample_rate"]  # the chunks carry the same audio at that rate
        records = [with_audio({**r, "sample_rate": rate}, r["audio_s"]) for r in records]
    write_point(b, "s", "m", 2, records, **over)
    rows, _, _, unlike = compare.compare_folders(a, b)
    assert rows == [] and len(unlike) == 1 and named in unlike[0]
    assert compare_cli.main([str(a), str(b)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith("error: runs/s/m/c2: not compared") and named in err[0]
    )


def test_a_different_prompt_set_is_named(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_point(a, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    other = [{**r, "text": f"Other text {i}."} for i, r in enumerate(_run(BASE_AUDIO, BASE_TTFA))]
    write_point(b, "s", "m", 2, other)
    _, _, _, (line,) = compare.compare_folders(a, b)
    assert "prompt set (1 vs 20 texts, 0 in common)" in line
