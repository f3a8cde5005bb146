"""A record's derived figures are checked against its own raw timeline when it is read
(issue 36's red team: an `audio_s` of 10^9 gave an RTFx of 476,591): refused by the points
table, warned by every other reader, one line naming file, line and field; and the one-pass
msgspec check accepts exactly the records the field-by-field check accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from thetalker.data import records as records_mod
from thetalker.data.records import RecordError, check_record, read_records, read_rounds
from thetalker.report import points


def _record(index: int, **over: Any) -> dict[str, Any]:
    """A consistent successful record: 0.1 s of audio at 24 kHz, first audio at 10 ms."""
    rec: dict[str, Any] = {name: 0.0 for name in records_mod.RECORD_FIELDS}
    rec.update(request_index=index, sample_id=f"s{index}", text="x", text_chars=1,
               warmup=False, ok=True, error=None, t_submit_s=index * 0.2, ttfa_s=0.01,
               ttfa_audible_s=0.01, ttfa_audible_naive_s=0.01, wall_s=0.1,
               chunk_arrival_s=[0.01], chunk_bytes=[4800], audio_s=0.1, sample_rate=24000,
               underrun_events=0, continuity_ok=True, stalls=0)  # fmt: skip
    return {**rec, **over}


def _line(record: dict) -> str:
    """The record's JSON line; `"ok": "REPEATED"` writes a failed request whose line says
    `"ok"` twice, false then true (the last value is what a decoder keeps)."""
    if record.get("ok") != "REPEATED":
        return json.dumps(record)
    failed = {**record, "ok": False, "error": {"type": "empty", "message": "x", "status": None}}
    return json.dumps(failed)[:-1] + ', "ok": true}'


def _point(tmp_path: Path, records: list[dict], label: str = "c1") -> Path:
    path = tmp_path / "runs" / "s" / "m" / label / "records.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(_line(r) + "\n" for r in records))
    return path


BAD = [
    (
        {"audio_s": 1e9},
        "field audio_s: 1e+09 s, but its chunks carry 0.1 s (sum(chunk_bytes) / "
        "(sample_rate x 2)): a figure apart from its timeline",
    ),
    (
        {"ttfa_s": 5.0},
        "field ttfa_s: first audio at 5 s, after the request's end (wall_s 0.1 s)",
    ),
    (
        {"sample_rate": 48000, "chunk_bytes": [9600]},
        "field sample_rate: 48000 Hz, but line 1 has 24000 Hz (one run has one rate: "
        "its figures would mix two)",
    ),
    # Issue 45's red team: figures a type check passes and the timeline contradicts.
    (
        {"stalls": 2**63},
        "field stalls: 9223372036854775808, but its 2400 whole frame(s) allow 0 to 2399 "
        "(gaps between arrivals)",
    ),
    (
        {"read_arrival_s": [0.005, 0.01], "read_bytes": [2400, 2400], "stalls": 2},
        "field stalls: 2, but its 2 read(s) allow 0 to 1 (gaps between arrivals)",
    ),
    ({"ttfa_s": -0.5}, "field ttfa_s: -0.5 s: a time from the request's start is never negative"),
    ({"wall_s": -1.0}, "field wall_s: -1 s: a time from the request's start is never negative"),
    (
        {"chunk_arrival_s": []},
        "field chunk_arrival_s: 0 arrival(s) for 1 chunk(s) in chunk_bytes: one a chunk",
    ),
    (
        {"read_arrival_s": [0.01], "read_bytes": [9600]},
        "field read_bytes: 9600 bytes, but its chunks carry 4800 (chunk_bytes): one byte "
        "stream, counted twice",
    ),
    ({"ok": "REPEATED"}, "field ok: given twice in the line (a decoder keeps the last value: "
     "what it said first is lost)"),
]  # fmt: skip
IDS = ["audio_s", "ttfa_s", "sample_rate", "stalls", "stalls-reads", "ttfa_s<0", "wall_s<0",
       "arrivals", "read_bytes", "ok-twice"]  # fmt: skip


@pytest.mark.parametrize(("over", "said"), BAD, ids=IDS)
def test_the_points_table_refuses_a_figure_its_timeline_contradicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], over: dict, said: str
):
    path = _point(tmp_path, [_record(0), _record(1, **over), _record(2)])
    assert points.main(["--out", str(tmp_path / "points.csv"), str(path)]) == 1
    assert capsys.readouterr().err.strip() == f"error: {path}:2: {said}"
    with pytest.raises(RecordError, match="^" + str(path) + ":2: field "):
        list(read_records(path, require_consistent=True))


@pytest.mark.parametrize(("over", "said"), BAD, ids=IDS)
def test_other_readers_warn_once_per_field_naming_the_first_line(
    tmp_path: Path, over: dict, said: str
):
    records = [_record(0), _record(1, **over), _record(2, **over), _record(3, **over)]
    warnings: list[str] = []
    assert len(list(read_records(_point(tmp_path, records), warn=warnings.append))) == 4
    assert warnings == [
        f"{tmp_path / 'runs/s/m/c1/records.jsonl'}:2: {said} (2 more records like it)"
    ]


def test_allow_inconsistent_takes_the_point_warned(tmp_path: Path, capsys):
    path = _point(tmp_path, [_record(0), _record(1, audio_s=1e9)])
    out = tmp_path / "points.csv"
    assert points.main(["--out", str(out), "--allow-inconsistent", str(path)]) == 0
    assert f"warning: {path}:2: field audio_s" in capsys.readouterr().err


def test_rounds_of_a_point_at_two_rates_are_refused_naming_the_file(tmp_path: Path):
    one = _point(tmp_path, [_record(0)], "c1/round1")
    two = _point(tmp_path, [_record(0, sample_rate=48000, chunk_bytes=[9600])], "c1/round2")
    with pytest.raises(RecordError) as err:
        read_rounds([one, two], require_consistent=True)
    assert str(err.value) == (
        f"{two}: field sample_rate: 48000 Hz, but {one} has 24000 Hz (one run has one rate: "
        "its figures would mix two)"
    )


def test_a_consistent_record_of_every_kind_passes_unwarned(tmp_path: Path):
    failed = _record(1, ok=False, ttfa_s=None, chunk_arrival_s=[], chunk_bytes=[], audio_s=0.0)
    odd = _record(2, chunk_bytes=[4801], audio_s=4801 / 48000)  # a half sample at the end
    warnings: list[str] = []
    got = list(read_records(_point(tmp_path, [_record(0), failed, odd]), warn=warnings.append))
    assert len(got) == 3 and warnings == []


MUTATIONS = [
    {"request_index": True}, {"request_index": 1.0}, {"request_index": -1},
    {"request_index": 10**7 + 1}, {"request_index": 10**30}, {"text_chars": 10**30},
    {"warmup": 1}, {"warmup": "false"}, {"ok": None}, {"t_submit_s": True},
    {"t_submit_s": "0.1"}, {"t_submit_s": 1}, {"ttfa_s": None}, {"error": []},
    {"error": {"type": "x", "deep": [1, {"a": None}]}}, {"chunk_bytes": [1.5]},
    {"chunk_arrival_s": [1, None]}, {"chunk_arrival_s": (0.01,)}, {"sentence_lag_s": [None, 1]},
    {"sentence_lag_s": ["x"]}, {"server_events": [{"type": "a", "t_s": 1}]},
    {"server_events": [1]}, {"protocol": None}, {"http_status": 200.5}, {"audible": 0},
    {"read_bytes": None}, {"read_bytes": [True]}, {"text_pieces": ["a", 1]}, {"unknown": {}},
]  # fmt: skip


@pytest.mark.parametrize("over", MUTATIONS, ids=[str(m)[:40] for m in MUTATIONS])
def test_the_one_pass_check_takes_what_the_field_check_takes(over: dict):
    record = _record(0, **over)
    line = json.dumps(record).encode()
    fast = records_mod._fast_record(line)
    assert (fast is not None) == (check_record(json.loads(line)) is None)
    if fast is not None:
        assert fast == json.loads(line)


def test_the_one_pass_check_takes_no_line_missing_a_field():
    for name in records_mod.RECORD_FIELDS:
        record = _record(0)
        del record[name]
        assert records_mod._fast_record(json.dumps(record).encode()) is None, name


def _with_tail(record: dict, tail: str) -> bytes:
    return (json.dumps(record)[:-1] + tail + "}").encode()


DISGUISED_REPEATS = [
    ("text-colons", _with_tail(_record(0, text="a: b: c"), ', "ok": false')),
    ("escaped-colon", _with_tail(_record(0, text="@"), ', "ok": false').replace(
        b'"@"', b'"\\u003a"')),  # a colon written escaped: one more decoded than written
    ("space-before-colon", _with_tail(_record(0), ', "ok" : false')),
    ("in-error", json.dumps(
        _record(0, ok=False, error={"type": "empty", "message": "m", "status": None})
    ).replace('"status": null}', '"status": null, "type": "http_status"}').encode()),
    ("absent-optional", json.dumps(
        {k: v for k, v in _record(0).items() if k != "ok"} | {"audio_path": None}
    ).encode()),
]  # fmt: skip


@pytest.mark.parametrize("declared_only", [False, True], ids=["whole", "declared-only"])
@pytest.mark.parametrize(("name", "line"), DISGUISED_REPEATS, ids=[n for n, _ in DISGUISED_REPEATS])
def test_a_repeated_key_is_found_however_the_line_hides_it(
    tmp_path: Path, name: str, line: bytes, declared_only: bool
):
    if name == "absent-optional":  # an optional field left out, a required one given twice
        line = line[:-1] + b', "ok": true, "ok": false}'
    path = tmp_path / "records.jsonl"
    path.write_bytes(line + b"\n")
    warnings: list[str] = []
    list(read_records(path, warn=warnings.append, declared_only=declared_only))
    assert len(warnings) == 1 and "given twice in the line" in warnings[0], warnings


@pytest.mark.parametrize("declared_only", [False, True], ids=["whole", "declared-only"])
def test_colons_in_strings_are_no_repeated_key(tmp_path: Path, declared_only: bool):
    error = {"type": "http_status", "message": 'HTTP 503: busy: {"a": 1}', "status": 503}
    records = [_record(0, text='say: "x": y', sample_id="a:b"), _record(1, ok=False, error=error,
               ttfa_s=None, chunk_arrival_s=[], chunk_bytes=[], audio_s=0.0)]  # fmt: skip
    path = _point(tmp_path, records)
    warnings: list[str] = []
    got = list(read_records(path, warn=warnings.append, declared_only=declared_only))
    assert len(got) == 2 and warnings == []
