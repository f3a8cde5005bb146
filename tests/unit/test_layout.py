"""thetalker.data.layout: the one place point and round folders are named and parsed."""

import pytest

from thetalker.data import layout


def test_labels_round_trip():
    assert layout.point_labels([1, 8], [2.0, 0.5]) == ["c1", "c8", "r2", "r0.5"]
    assert layout.parse_point_label("c8") == (8, None)
    assert layout.parse_point_label("r2.5") == (None, 2.5)
    assert layout.parse_point_label("round1") is None
    assert layout.sort_point_labels(["r2", "c10", "r0.5", "c2", "x"]) == ["c2", "c10", "r0.5", "r2"]


def test_rounds():
    assert layout.round_names(1) == [""] and layout.round_dirs(1) == [""]
    assert layout.round_dirs(2) == ["round1/", "round2/"]
    assert layout.parse_round("round12") == 12 and layout.parse_round("c1") is None


def test_point_location_of_grid_search_and_round_paths(tmp_path):
    where = layout.point_location("results/runs/s/m/search/r1.5/round2/records.jsonl")
    assert (where.system, where.model, where.point) == ("s", "m", "r1.5")
    assert where.search and where.round == 2 and where.request_rate == 1.5
    assert layout.point_file_stem("x/s/m/search/r1.5/round2/p.json") == "s_m_r1.5_search_round2"
    assert layout.point_file_stem("x/s/m/c4/p.json") == "s_m_c4"
    assert layout.point_key("x/s/m/c4/records.jsonl") == ("s", "m", 4)
    with pytest.raises(layout.PointPathError, match="records.jsonl"):
        layout.point_location(tmp_path / "records.jsonl")


def test_search_manifest_round_trips_and_refuses_another_version(tmp_path):
    import json

    from thetalker.data.manifest import (
        ManifestError,
        SearchManifest,
        SearchPoint,
        read_search_manifest,
        write_search_manifest,
    )

    point = SearchPoint("c3", 3, None, True, 99.0, 0.2, None, ["a/records.jsonl"], ["s"], ["p"])
    manifest = SearchManifest("s", "m", True, {"max_steps": 2}, (point,), {"streams": {}})
    path = tmp_path / "search.json"
    write_search_manifest(path, manifest)
    data = json.loads(path.read_text())
    assert list(data) == [
        "version", "system", "model", "refine", "capacity_search", "points", "capacity"
    ]  # fmt: skip
    assert data["points"][0]["records"] == ["a/records.jsonl"]
    assert read_search_manifest(path) == manifest
    assert manifest.records() == ["a/records.jsonl"] and manifest.provenance() == ["p"]
    path.write_text(json.dumps({**data, "version": 2}))
    with pytest.raises(ManifestError, match=r"search\.json: search manifest version 2"):
        read_search_manifest(path)
