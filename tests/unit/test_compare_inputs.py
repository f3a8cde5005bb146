"""thetalker-compare on inputs it must refuse, or warn of, in one line naming the file:
JSON of the wrong shape, unknown or mixed schema versions, an empty records file, a manifest
path that leaves the run; and names that would break the printed table."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_compare import BASE_AUDIO, BASE_TTFA, _run, write_point
from thetalker.cli import compare as compare_cli
from thetalker.data.record_writes import write_json
from thetalker.report import compare


def _pair(tmp_path, system: str = "s"):
    a, b = tmp_path / "a", tmp_path / "b"
    pa = write_point(a, system, "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    pb = write_point(b, system, "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    return a, b, pa, pb


def _one_line_error(capsys, a, b, named: str) -> str:
    assert compare_cli.main([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and named in err[0], err
    return err[0]


@pytest.mark.parametrize("shape", [[], "text", 3, None, [{"concurrency": 2}]])
def test_a_summary_that_is_not_an_object_is_one_line(tmp_path, capsys, shape):
    # `[]` gave an AttributeError traceback.
    a, b, pa, _ = _pair(tmp_path)
    summary = pa.with_name("summary.json")
    summary.write_text(json.dumps(shape), encoding="utf-8")
    line = _one_line_error(capsys, a, b, str(summary))
    assert "not a JSON object" in line


@pytest.mark.parametrize(
    ("raw", "why"), [(b"\xff\xfe{}", "not UTF-8"), (b"[" * 100_000 + b"]" * 100_000, "nested")]
)
def test_a_summary_that_cannot_be_decoded_is_one_line(tmp_path, capsys, raw, why):
    a, b, pa, _ = _pair(tmp_path)
    summary = pa.with_name("summary.json")
    summary.write_bytes(raw)
    assert why in _one_line_error(capsys, a, b, str(summary))


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("search.json", [], "not a JSON object (list)"),
        ("search.json", {"system": "s", "points": [3]}, "not a search manifest"),
        ("summary.json", {"schema_version": "thetalker.data.records/2", "options": []}, "options"),
        ("dnsmos.json", [], "not a JSON object"),
        ("health.json", {"streams": 3}, "streams"),
    ],
)
def test_other_files_of_the_wrong_shape_are_one_line(tmp_path, capsys, name, content, why):
    a, b, pa, _ = _pair(tmp_path)
    path = pa.parent.parent / name if name == "search.json" else pa.with_name(name)
    if name == "summary.json":
        content = {**json.loads(path.read_text()), **content}
    path.write_text(json.dumps(content), encoding="utf-8")
    assert why in _one_line_error(capsys, a, b, str(path))


@pytest.mark.parametrize("version", ["thetalker.data.records/9", None])
def test_an_unknown_schema_version_is_refused(tmp_path, capsys, version):
    a, b, pa, _ = _pair(tmp_path)
    summary = pa.with_name("summary.json")
    data = json.loads(summary.read_text())
    data["schema_version"] = version
    summary.write_text(json.dumps(data), encoding="utf-8")
    line = _one_line_error(capsys, a, b, str(summary))
    assert "schema_version" in line


def test_schema_1_against_2_is_compared_with_a_warning(tmp_path, capsys):
    # /2 takes TTFA and the player's figures from the reads, /1 from the chunks: the change
    # holds that difference too, so it is said beside the table (RTFx is the same figure).
    a, b, pa, _ = _pair(tmp_path)
    summary = pa.with_name("summary.json")
    data = json.loads(summary.read_text())
    summary.write_text(json.dumps({**data, "schema_version": "thetalker.data.records/1"}))
    assert compare_cli.main([str(a), str(b)]) == 0
    out = capsys.readouterr()
    assert "| runs | s | m | c2 |" in out.out
    (line,) = [x for x in out.err.splitlines() if "A's records are" in x]
    assert line.startswith("warning: runs/s/m/c2: A's records are thetalker.data.records/1")
    assert "B's thetalker.data.records/2" in line and "TTFA" in line


def test_an_empty_records_file_is_refused_for_what_it_is(tmp_path, capsys):
    # It was refused as "differ in sample rate (24000 vs 22050); prompt set (0 vs 1 texts)".
    a, b = tmp_path / "a", tmp_path / "b"
    empty = write_point(a, "s", "m", 2, [])
    write_point(b, "s", "m", 2, _run(BASE_AUDIO, BASE_TTFA))
    line = _one_line_error(capsys, a, b, str(empty))
    assert "no scored records" in line


def test_a_name_with_a_pipe_or_a_newline_stays_in_its_cell(tmp_path):
    a, b, _, _ = _pair(tmp_path, system="x|y\nz")
    rows, _, _, _ = compare.compare_folders(a, b)
    text = compare.format_changes(rows)
    lines = text.splitlines()
    assert len(lines) == 3  # header, rule, one row
    assert lines[2].startswith("| runs | x\\|y z | m | c2 |")
    header_cells = lines[0].count(" | ")
    assert lines[2].replace("\\|", "").count(" | ") == header_cells


@pytest.mark.parametrize(
    "recorded", ["search/../../../../outside/records.jsonl", "search/p1/../../../x/records.jsonl"]
)
def test_a_manifest_path_that_leaves_the_run_is_refused(tmp_path, capsys, recorded):
    a, b, pa, _ = _pair(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "records.jsonl").write_text(pa.read_text())
    write_json(outside / "summary.json", json.loads(pa.with_name("summary.json").read_text()))
    manifest = pa.parent.parent / "search.json"
    data = json.loads(manifest.read_text())
    data["points"] = [{"point": "p1", "records": [recorded]}]
    manifest.write_text(json.dumps(data), encoding="utf-8")
    line = _one_line_error(capsys, a, b, str(manifest))
    assert recorded in line and "outside the run" in line
