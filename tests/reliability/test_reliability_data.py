"""Nothing lost in silence: ids of any length, a records file that cannot be written, torn or
incomplete records files, and input the pipeline must refuse when it loads (prompts, WAV
headers), each against the real client and a real scripted server on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO
from tests.support.scripted_server import Script, ScriptedServer
from thetalker.client import BenchError, BenchOptions, run_benchmark
from thetalker.client.context import audio_file_name
from thetalker.data import records as records_mod
from thetalker.data import wavio
from thetalker.data.prompts import Prompt, PromptError, load_prompts
from thetalker.data.records import RecordError, read_json, read_records
from thetalker.data.wavio import (
    WavError,
    build_wav_header,
    check_reference_clip,
    read_wav,
    write_wav,
)
from thetalker.report import points


def _opts(srv: ScriptedServer, **kw: Any) -> BenchOptions:
    defaults: dict[str, Any] = {"requests": 2, "warmup": 0, "sample_rate": 24000}
    return BenchOptions(base_url=srv.base_url, speaker="scripted", **{**defaults, **kw})


# --- ids of any length --------------------------------------------------------------------


def test_a_300_character_id_with_saved_audio_keeps_its_record_and_the_summary(
    scripted_server: ScriptedServer, tmp_path: Path
):
    long_id = "q" * 150 + "/" + "é" * 150  # 451 bytes in UTF-8: no file system takes it
    out = tmp_path / "run"
    opts = _opts(scripted_server, requests=1, save_audio_dir=str(out / "audio"))
    run_benchmark(opts, [Prompt(long_id, "hello there")], out)
    (rec,) = read_records(out / "records.jsonl")
    assert rec["ok"] and rec["sample_id"] == long_id  # the full id stays in the record
    audio = out / rec["audio_path"]
    assert audio.is_file() and len(audio.name.encode()) < 100
    assert read_json(out / "summary.json")["n_ok"] == 1


def test_two_long_ids_sharing_a_prefix_get_distinct_audio_files():
    from thetalker.client.context import audio_file_name

    a, b = audio_file_name(3, "x" * 300 + "a"), audio_file_name(3, "x" * 300 + "b")
    assert a != b and a.startswith("00003_x") and a.endswith(".wav")
    assert audio_file_name(1, "s1") == "00001_s1.wav"  # short ids keep the documented name


# --- prompt ids checked when the prompts load ------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "where", "what"),
    [
        (['{"sample_id": "a", "text": "x"}', '{"sample_id": "a", "text": "y"}'], ":2", "line 1"),
        (['{"sample_id": "a\\u0007b", "text": "x"}'], ":1", "control character"),
        (['{"sample_id": "  ", "text": "x"}'], ":1", "non-empty"),
        (['{"sample_id": true, "text": "x"}'], ":1", "non-empty string"),
        (['{"sample_id": "a", "text": "x\\u0000y"}'], ":1", "NUL"),
        (['{"sample_id": "a", "text": "\\ud800"}'], ":1", "surrogate"),
        (['{"sample_id": "a", "text": "ok"}', json.dumps({"sample_id": "b", "text": "w " * 5**10})],
         ":2", "MAX_PROMPT_CHARS"),
    ],
    ids=["duplicate", "control-char", "blank-id", "bool-id", "nul-text", "surrogate", "10-mb-line"],
)  # fmt: skip
def test_bad_prompt_ids_and_texts_are_refused_naming_file_and_line(
    tmp_path: Path, lines: list[str], where: str, what: str
):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(PromptError) as info:
        load_prompts(path)
    message = str(info.value)
    assert f"{path}{where}:" in message and what in message and "\n" not in message


def test_the_quality_prompt_set_with_a_duplicate_id_is_refused_at_load(tmp_path: Path):
    from thetalker.pipeline.config_checks import ConfigError, check_quality

    prompts = tmp_path / "q.jsonl"
    prompts.write_text(
        '{"sample_id": "s1", "text": "one"}\n{"sample_id": "s2", "text": "two"}\n'
        '{"sample_id": "s1", "text": "three"}\n',
        encoding="utf-8",
    )
    config = {
        "prompts": str(prompts),
        "systems": {"local": {}},
        "models": {"m": {}},
        "report": {"ratio": []},
        "quality": {"enabled": True, "prompts": str(prompts), "models": ["m"], "compare": [],
                    "requests": 2},
    }  # fmt: skip
    with pytest.raises((ConfigError, PromptError)) as info:
        check_quality(config)
    assert f"{prompts}:3" in str(info.value) and "duplicate sample_id 's1'" in str(info.value)


# --- a records file that cannot be written ---------------------------------------------------


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str = "64k") -> Iterator[Path]:
    """A real full disk: a tmpfs of `size` mounted at `where` (root only), unmounted after."""
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or 'not root'})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize("loop", ["closed", "open"])  # writer thread (workers) / writer process
def test_a_full_disk_stops_the_point_at_once_naming_the_records_file(
    scripted_server: ScriptedServer, tmp_path: Path, loop: str
):
    # Each response 20 ms after its headers: 4 in flight send at most 200 requests a second,
    # as the open loop does, so the count below rests on the server's pace, not the CPU's (a
    # record reaches the writer up to HOLD_AT_MOST_S after its request ends).
    scripted_server.default = Script(chunks=((0.02, 4800),))
    with tiny_tmpfs(tmp_path / "disk") as disk:
        out = disk / "c4"
        kw: dict[str, Any] = {"concurrency": 4, "workers": 2}
        if loop == "open":
            kw = {"request_rate": 200.0}
        opts = _opts(scripted_server, requests=600, **kw)
        with pytest.raises(BenchError) as info:
            run_benchmark(opts, [Prompt(f"s{i}", f"sentence {i}") for i in range(5)], out)
        message = str(info.value)
        assert str(out / "records.jsonl") in message and "No space left" in message
        # Stopped at once: far fewer of the 600 requests were sent than the disk could not hold.
        assert len(scripted_server.requests) < 400, len(scripted_server.requests)
        # What is on the disk reads back (a torn last line at most, with a warning).
        warnings: list[str] = []
        kept = list(read_records(out / "records.jsonl", warn=warnings.append))
        assert kept and all(not w.startswith("incomplete") for w in warnings)


def test_a_failed_write_mid_run_stops_the_point_without_root(
    scripted_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The same without a tmpfs: the 11th write fails as a full disk does (ENOSPC), in the
    writer thread of a run with workers (a patch here cannot reach the writer process)."""
    real = records_mod.append_record
    written = []

    def failing(fh: Any, record: Any, sync: bool = True) -> None:
        if len(written) == 10:
            raise OSError(28, "No space left on device")
        written.append(record)
        real(fh, record, sync)

    monkeypatch.setattr("thetalker.data.appender.append_record", failing)
    scripted_server.default = Script(chunks=((0.0, 4800), (0.02, 4800)))
    with pytest.raises(BenchError) as info:
        run_benchmark(_opts(scripted_server, requests=300, concurrency=2, workers=2),
                      [Prompt("a", "hello")], tmp_path / "o")  # fmt: skip
    assert "writing records failed" in str(info.value)
    assert len(scripted_server.requests) < 100


def test_write_errors_name_the_file(tmp_path: Path):
    target = tmp_path / "gone" / "records.jsonl"
    target.parent.mkdir()
    fh = target.open("w", encoding="utf-8")
    os.close(fh.fileno())  # the descriptor is gone: every write fails
    with pytest.raises(records_mod.RecordWriteError) as info:
        records_mod.append_record(fh, {"request_index": 7})
    assert str(target) in str(info.value) and "request 7" in str(info.value)
    with contextlib.suppress(OSError):
        fh.close()


def _check_audio_left(out: Path, audio: Path, err: str | None) -> None:
    """Every record kept and the summary written; each saved WAV whole, none half-written."""
    recs = list(read_records(out / "records.jsonl"))
    assert sorted(r["request_index"] for r in recs) == list(range(12))
    assert all(r["ok"] for r in recs)
    assert read_json(out / "summary.json")["n_ok"] == 12
    saved = [r for r in recs if r["audio_path"]]
    lost = [r for r in recs if not r["audio_path"]]
    assert saved and lost, (len(saved), len(lost))
    for rec in saved:  # a kept WAV reads back whole, its header true
        pcm, _ = read_wav(out / rec["audio_path"])
        assert len(pcm) == sum(rec["chunk_bytes"])
    # Nothing else left in the audio folder: no truncated WAV, no temporary file.
    assert sorted(p.name for p in audio.iterdir()) == sorted(
        Path(r["audio_path"]).name for r in saved
    )
    if err is None:
        return
    # The warning names the file that could not be written and why.
    first = audio / audio_file_name(lost[0]["request_index"], lost[0]["sample_id"])
    assert f"{first}: " in err and "No space left" in err and "record kept" in err


@pytest.mark.parametrize("loop", ["closed", "open"])  # writer thread (workers) / writer process
def test_a_full_disk_under_the_saved_audio_keeps_every_record_and_the_summary(
    scripted_server: ScriptedServer, tmp_path: Path, loop: str, capfd: pytest.CaptureFixture[str]
):
    """Issue 45 (weak): the audio folder on a full disk, the records on another with room.
    Before: `writing records failed: OSError: [Errno 28]` naming no file, 6 of 12 records
    lost, a truncated WAV left and no summary.json."""
    scripted_server.default = Script(chunks=((0.0, 9600),))  # a 9,644-byte WAV a request
    out = tmp_path / "c2"
    with tiny_tmpfs(tmp_path / "disk") as disk:
        kw: dict[str, Any] = {"concurrency": 2, "workers": 2}
        if loop == "open":
            kw = {"request_rate": 50.0}
        opts = _opts(scripted_server, requests=12, save_audio_dir=str(disk / "audio"), **kw)
        run_benchmark(opts, [Prompt(f"s{i}", f"sentence {i}") for i in range(3)], out)
        # The writer process's stderr is not the one capfd holds; the thread's workers' is.
        err = capfd.readouterr().err if loop == "closed" else None
        _check_audio_left(out, disk / "audio", err)


def test_a_failed_audio_write_keeps_the_record_without_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """The same without a tmpfs, in this process (records are built in a writer or worker
    process, which a patch cannot reach): half the WAV's bytes go out and then the write
    fails as a full disk does (ENOSPC). No audio_path, a warning naming the file, no file."""
    from types import SimpleNamespace

    from thetalker.client.context import RunContext, saved_audio

    def failing(path: Path, data: bytes) -> None:
        path.write_bytes(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    out = tmp_path / "c2"
    opts = BenchOptions(base_url="http://127.0.0.1:9", speaker="x", requests=2, warmup=0,
                        sample_rate=24000, save_audio_dir=str(out / "audio"))  # fmt: skip
    ctx = RunContext.for_run(opts, out, 0.0, 24000)
    ex = SimpleNamespace(request_index=3, warmup=False, prompt=Prompt("s3", "x"))
    assert saved_audio(ctx, ex, True, b"\x01\x00" * 4800, 24000) == "audio/00003_s3.wav"  # type: ignore[arg-type]
    monkeypatch.setattr(wavio, "_write_file", failing)
    ex4 = SimpleNamespace(request_index=4, warmup=False, prompt=Prompt("s4", "x"))
    assert saved_audio(ctx, ex4, True, b"\x01\x00" * 4800, 24000) is None  # type: ignore[arg-type]
    assert sorted(p.name for p in (out / "audio").iterdir()) == ["00003_s3.wav"]
    err = capsys.readouterr().err
    assert f"{out / 'audio' / '00004_s4.wav'}: saving the audio of request 4 failed: " in err
    assert "No space left on device; its record kept without audio_path" in err


# --- torn and incomplete records files -------------------------------------------------------


def _record(index: int) -> dict[str, Any]:
    """A plausible successful record (0.1 s of audio, first chunk after 10 ms)."""
    rec: dict[str, Any] = {name: 0.0 for name in records_mod.RECORD_FIELDS}
    rec.update(request_index=index, sample_id=f"s{index}", text="x", text_chars=1,
               warmup=False, ok=True, error=None, t_submit_s=index * 0.01, ttfa_s=0.01,
               ttfa_audible_s=0.01, ttfa_audible_naive_s=0.01, wall_s=0.1,
               chunk_arrival_s=[0.01], chunk_bytes=[4800], audio_s=0.1, sample_rate=24000,
               underrun_events=0, continuity_ok=True, stalls=0)  # fmt: skip
    return rec


def _write(path: Path, indices: list[int], torn: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(_record(i)) + "\n" for i in indices)
    path.write_text(body + ('{"request_index": 9' if torn else ""), encoding="utf-8")
    return path


def test_a_torn_last_line_is_skipped_with_a_warning_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = _write(tmp_path / "records.jsonl", [0, 1, 2], torn=True)
    assert [r["request_index"] for r in read_records(path)] == [0, 1, 2]
    err = capsys.readouterr().err
    assert f"warning: {path}:4: torn last line skipped" in err


def test_missing_request_indices_are_reported_by_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = _write(tmp_path / "runs" / "s" / "m" / "c2" / "records.jsonl",
                  [*range(30), *range(68, 150)])  # fmt: skip
    assert len(list(read_records(path))) == 112
    assert f"warning: {path}: incomplete: 38 of 150 request indices missing (30-67)" in (
        capsys.readouterr().err
    )
    with pytest.raises(RecordError, match=r"incomplete: 38 of 150 .*\(30-67\)"):
        list(read_records(path, require_complete=True))
    # report.points refuses it, naming the file and the indices; --allow-incomplete takes it.
    out = tmp_path / "points.csv"
    assert points.main([str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "30-67" in err and not out.exists()
    assert points.main([str(path), "--out", str(out), "--allow-incomplete"]) == 0
    assert "30-67" in capsys.readouterr().err and out.exists()


def test_a_complete_file_in_finishing_order_gives_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = _write(tmp_path / "records.jsonl", [2, 0, 3, 1])
    assert len(list(read_records(path, require_complete=True))) == 4
    assert capsys.readouterr().err == ""


def test_a_records_file_that_is_not_utf8_is_one_line_naming_the_line(tmp_path: Path):
    path = tmp_path / "records.jsonl"
    path.write_bytes(json.dumps(_record(0)).encode() + b"\n\xff\xfe\n")
    with pytest.raises(RecordError, match=rf"{path}:2: not UTF-8"):
        list(read_records(path))


# --- records checked against the declared schema on read ------------------------------------


def _lines(path: Path, records: list[dict[str, Any]], raw_tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(json.dumps(r) + "\n" for r in records)
    path.write_text(body + raw_tail, encoding="utf-8")
    return path


@pytest.mark.parametrize("shape", ["list", "object"])
def test_a_value_nested_100000_deep_is_one_line_from_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str
):
    # An undeclared field passes the schema, so its depth is the decoder's to survive:
    # refused naming file and line, never a RecursionError traceback (issue 45).
    from thetalker.quality import health

    n = 100_000
    deep = "[" * n + "]" * n if shape == "list" else '{"a":' * n + "1" + "}" * n
    path = tmp_path / "runs" / "s" / "m" / "c1" / "records.jsonl"
    path.parent.mkdir(parents=True)
    line = json.dumps({**_record(1), "deep": "@"}).replace('"@"', deep)
    path.write_text(json.dumps({**_record(0), "warmup": True}) + "\n" + line + "\n")
    said = f"{path}:2: a value nested too deep to read"
    for declared_only in (False, True):
        with pytest.raises(RecordError, match="^" + re.escape(said)):
            list(read_records(path, declared_only=declared_only))
    assert points.main([str(path), "--out", str(tmp_path / "points.csv")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and len(err.strip().splitlines()) == 1
    assert health.main(["--records", str(path), "--out", str(tmp_path / "h.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and len(err.strip().splitlines()) == 1
    summary = tmp_path / "summary.json"
    summary.write_text(deep)
    with pytest.raises(RecordError, match="^" + re.escape(f"{summary}: a value nested too deep")):
        read_json(summary)


def test_a_duplicated_line_is_refused_naming_both_lines(tmp_path: Path):
    # Counted twice it would double the requests and the RTFx in silence.
    path = _lines(tmp_path / "records.jsonl", [_record(0), _record(1), _record(1)])
    with pytest.raises(RecordError, match=rf"{path}:3: request_index 1 already read at line 2"):
        list(read_records(path))


def test_the_same_file_given_twice_is_refused_by_every_multi_file_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = _write(tmp_path / "runs" / "s" / "m" / "c2" / "records.jsonl", [0, 1, 2])
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(path)
    with pytest.raises(RecordError, match="given twice"):
        records_mod.read_rounds([path, alias])
    out = tmp_path / "points.csv"
    assert points.main([str(path), str(path), "--out", str(out)]) == 1
    assert "again" in capsys.readouterr().err and not out.exists()


def test_a_stale_records_file_beside_rounds_is_not_another_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    point = tmp_path / "runs" / "s" / "m" / "c2"
    paths = [_write(point / d / "records.jsonl", [0, 1]) for d in ("round1", "round2")]
    stale = _write(point / "records.jsonl", [0, 1])
    assert points.main([*map(str, paths), str(stale), "--out", str(tmp_path / "p.csv")]) == 1
    assert "round 1 of c2 again" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "raw", "why"),
    [
        ("ttfa_s", "NaN", "not valid JSON (NaN is not standard JSON)"),
        ("ttfa_s", "1e999", "field ttfa_s: not a finite number"),
        ("warmup", '"false"', "field warmup: expected true or false"),
        ("ok", "1", "field ok: expected true or false"),
        ("chunk_bytes", '["4800"]', "field chunk_bytes: item 0: expected an integer"),
        ("request_index", "100000000", "field request_index: 100000000 outside 0..10000000"),
        ("request_index", "-1", "field request_index: -1 outside"),
        ("sample_rate", "24000.5", "field sample_rate: expected an integer"),
    ],
)
@pytest.mark.parametrize("declared_only", [False, True], ids=["whole", "declared-only"])
def test_a_value_of_the_wrong_type_is_refused_naming_line_and_field(
    tmp_path: Path, field: str, raw: str, why: str, declared_only: bool
):
    # Never reinterpreted: a string "false" is not false, a NaN is not a missing TTFA. The
    # typed one-pass read (`declared_only`, what a point's row reads with) refuses alike.
    good = json.dumps(_record(0))
    bad = json.dumps({**_record(1), field: "@"}).replace('"@"', raw)
    path = tmp_path / "records.jsonl"
    path.write_text(f"{good}\n{bad}\n", encoding="utf-8")
    with pytest.raises(RecordError) as caught:
        list(read_records(path, declared_only=declared_only))
    assert str(caught.value).startswith(f"{path}:2: ") and why in str(caught.value)


def test_a_field_the_schema_does_not_declare_passes(tmp_path: Path):
    # A newer writer's field is no error: the check is the declared schema's, no more.
    path = _lines(tmp_path / "records.jsonl", [{**_record(0), "from_a_newer_client": "x"}])
    assert list(read_records(path))[0]["from_a_newer_client"] == "x"


def test_missing_indices_are_found_without_anything_sized_by_the_largest_index():
    gap = records_mod.incompleteness("f", [0, 1, 10_000_000])
    assert gap is not None and "9999998 of 10000001 request indices missing (2-9999999)" in gap


def test_records_and_json_are_written_as_standard_json_or_refused_naming_the_field(
    tmp_path: Path,
):
    nan = {**_record(0), "ttfa_s": float("nan")}
    with (
        (tmp_path / "r.jsonl").open("w", encoding="utf-8") as fh,
        pytest.raises(ValueError, match=r"^ttfa_s: not a finite number"),
    ):
        records_mod.append_record(fh, nan)
    assert (tmp_path / "r.jsonl").read_text() == ""
    with pytest.raises(ValueError, match=r"^agent\.lag\.1: not a finite number"):
        records_mod.write_json(tmp_path / "s.json", {"agent": {"lag": [0.1, float("inf")]}})
    assert not (tmp_path / "s.json").exists()


# --- reference clips whose header lies -------------------------------------------------------


def test_a_wav_whose_header_understates_its_length_fails_the_clip_check(tmp_path: Path):
    rate = 16000
    pcm = b"\x01\x00" * (rate * 40)  # 40 s of audio...
    path = tmp_path / "ref.wav"
    path.write_bytes(build_wav_header(rate, 2 * rate * 5) + pcm)  # ...whose header says 5 s
    with pytest.raises(WavError, match="understates"):
        check_reference_clip(path)


def test_a_wav_saying_0_bits_per_sample_fails_the_clip_check(tmp_path: Path):
    path = write_wav(tmp_path / "ref.wav", b"\x01\x00" * 16000 * 3, 16000)
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, 34, 0)  # bits per sample
    path.write_bytes(bytes(data))
    with pytest.raises(WavError, match="0 bits per sample"):
        check_reference_clip(path)


def test_a_wav_with_a_trailing_list_chunk_still_passes(tmp_path: Path):
    path = write_wav(tmp_path / "ref.wav", b"\x01\x00" * 16000 * 3, 16000)
    with path.open("ab") as fh:
        fh.write(b"LIST" + struct.pack("<I", 4) + b"INFO")
    assert check_reference_clip(path) == pytest.approx(3.0)


def test_the_bench_cli_refuses_a_lying_reference_clip_before_sending(tmp_path: Path):
    rate = 16000
    clip = tmp_path / "ref.wav"
    clip.write_bytes(build_wav_header(rate, 2 * rate * 5) + b"\x01\x00" * (rate * 40))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"sample_id": "a", "text": "hi"}\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "thetalker.cli.bench", "--base-url", "http://127.0.0.1:9",
         "--texts-jsonl", str(prompts), "--task-type", "Base", "--ref-audio", str(clip),
         "--ref-text", "hi", "--out-dir", str(tmp_path / "o")],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "ref_audio" in done.stderr and str(clip) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
