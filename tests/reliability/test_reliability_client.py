"""Faults during a run, seen through `thetalker-bench`: a server killed mid-run and a mix of
failures in one run end as records and an exit status, never a hang.

The single faults (5xx, cut stream, stall past the timeout, JSON with 200, reset, SSE error)
are each proven in tests/component/test_client.py; here they come together, through the CLI.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.scripted_server import Script, ScriptedServer
from thetalker.cli.bench import main
from thetalker.data.record_reads import read_json, read_records

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _prompts(path: Path, texts: list[str]) -> Path:
    path.write_text(
        "".join(json.dumps({"sample_id": f"s{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return path


@contextlib.contextmanager
def scripted_server_process(chunks: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The scripted server in a process of its own (so it can be killed), stopped after."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_server", "--port", "0", "--chunks", chunks],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("PORT "), f"scripted server did not start: {line!r}"
        yield proc, f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _finished_on_server(base_url: str) -> int:
    with NO_PROXY.open(base_url + "/_log", timeout=5) as resp:
        return sum(1 for r in json.loads(resp.read()) if r["finished"])


def test_server_killed_mid_run_keeps_finished_records_and_exits_1(tmp_path: Path):
    prompts = _prompts(tmp_path / "p.jsonl", [f"sentence {i}" for i in range(8)])
    out = tmp_path / "out"
    with scripted_server_process("0:4800,0.05:4800") as (server, base_url):
        cmd = [sys.executable, "-m", "thetalker.cli.bench", "--base-url", base_url,
               "--texts-jsonl", str(prompts), "--requests", "60", "--warmup", "0",
               "--concurrency", "2", "--sample-rate", "24000", "--timeout", "10",
               "--speaker", "scripted", "--out-dir", str(out)]  # fmt: skip
        bench = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(600):  # until a few requests are done (at most 60 s)
                if bench.poll() is not None or _finished_on_server(base_url) >= 6:
                    break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    bench.wait(0.1)
            server.send_signal(signal.SIGKILL)  # a crash: no goodbye to open connections
            server.wait(10)
            _, err = bench.communicate(timeout=60)  # the rest fail fast: no hang
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.wait()
    assert bench.returncode == 1, err
    records = list(read_records(out / "records.jsonl"))
    assert len(records) == 60  # every request is a record
    ok = [r for r in records if r["ok"]]
    assert 6 <= len(ok) < 60
    failed_types = {r["error"]["type"] for r in records if not r["ok"]}
    assert failed_types <= {"connection", "truncated"}, failed_types
    summary = read_json(out / "summary.json")
    assert summary["n_failed"] == 60 - len(ok)
    assert summary["complete"] is True
    assert sum(summary["errors_by_type"].values()) == summary["n_failed"]
    assert f"{len(ok)}/60 ok" in err


@pytest.mark.parametrize(("max_error_rate", "status"), [("0.05", 1), ("1.0", 0)])
def test_a_mix_of_faults_in_one_run_is_recorded_and_sets_the_exit_status(
    scripted_server: ScriptedServer, tmp_path: Path, max_error_rate: str, status: int
):
    srv = scripted_server
    srv.add_script("boom", Script(mode="http_error", status=503, message="overloaded"))
    srv.add_script("cut", Script(mode="cut", cut_after=1, chunks=((0, 4800),) * 3))
    srv.add_script("stall", Script(chunks=((0, 4800), (30.0, 4800))))
    srv.add_script("json", Script(mode="json_200", message="queued"))
    texts = ["boom one", "cut two", "stall three", "json four", "fine five", "fine six"]
    prompts = _prompts(tmp_path / "p.jsonl", texts)
    out = tmp_path / "out"
    argv = ["--base-url", srv.base_url, "--texts-jsonl", str(prompts), "--requests", "6",
            "--warmup", "0", "--concurrency", "6", "--sample-rate", "24000", "--timeout", "1",
            "--max-error-rate", max_error_rate, "--speaker", "scripted",
            "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == status
    records = {r["text"]: r for r in read_records(out / "records.jsonl")}
    assert set(records) == set(texts)
    types = {t: (r["error"] or {}).get("type") for t, r in records.items()}
    assert types == {
        "boom one": "http_status",
        "cut two": "truncated",
        "stall three": "timeout",
        "json four": "content_type",
        "fine five": None,
        "fine six": None,
    }
    summary = read_json(out / "summary.json")
    assert summary["n_failed"] == 4 and summary["n_ok"] == 2
    assert summary["errors_by_type"] == {
        "http_status": 1,
        "truncated": 1,
        "timeout": 1,
        "content_type": 1,
    }


# --- memory bounded by the bytes of a response, not by the timeout --------------------------


def test_a_response_past_the_byte_bound_fails_too_large_and_is_not_read_further(
    scripted_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # A server streaming without end filled memory at the network's pace until the timeout
    # (5.2 GB in 3 s). Every response is bounded (64 MiB; 100 kB here, the same code).
    monkeypatch.setattr("thetalker.client.receive.MAX_RESPONSE_BYTES", 100_000)
    scripted_server.add_script("flood", Script(chunks=((0, 48_000),) * 40))
    prompts = _prompts(tmp_path / "p.jsonl", ["flood a", "fine b"])
    out = tmp_path / "o"
    code = main(["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts),
                 "--requests", "2", "--warmup", "0", "--sample-rate", "24000",
                 "--trust-sample-rate", "--max-error-rate", "1", "--speaker", "scripted",
                 "--out-dir", str(out)])  # fmt: skip
    assert code == 0
    by_text = {r["text"]: r for r in read_records(out / "records.jsonl")}
    flood = by_text["flood a"]
    assert flood["ok"] is False and flood["error"]["type"] == "too_large"
    assert "100000 bytes" in flood["error"]["message"]
    assert sum(flood["chunk_bytes"]) <= 100_000 + 48_000  # the piece that passed it, no more
    assert by_text["fine b"]["ok"] is True


def test_a_probe_answer_past_the_byte_bound_stops_the_run_in_one_line(
    scripted_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):  # fmt: skip
    # The sample-rate probe read its whole answer (a 400 MB one cost 872 MB): bounded too.
    monkeypatch.setattr("thetalker.client.receive.MAX_RESPONSE_BYTES", 100_000)
    scripted_server.default = Script(chunks=((0, 48_000),) * 40)
    prompts = _prompts(tmp_path / "p.jsonl", ["hello"])
    code = main(["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts),
                 "--requests", "1", "--warmup", "0", "--speaker", "scripted",
                 "--out-dir", str(tmp_path / "o")])  # fmt: skip
    assert code == 1  # the server's fault, as any failed probe
    err = capsys.readouterr().err.strip().splitlines()
    assert "sample-rate request to" in err[-1] and "passed 100000 bytes" in err[-1]


# --- one SSE event Python's JSON cannot take fails its request; every other record kept -------

_DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize(
    "raw_event",
    [
        '{"type": "speech.audio.delta", "audio": "", "x": ' + _DEEP + "}",
        '{"type": "speech.audio.delta", "audio": "", "n": ' + "7" * 5000 + "}",
    ],
    ids=["nested_200k_deep", "integer_of_5000_digits"],
)
def test_an_sse_event_json_cannot_take_fails_its_request_and_keeps_the_others(
    scripted_server: ScriptedServer, tmp_path: Path, raw_event: str
):
    # It ended the point with "writing records failed: RecursionError", 0 records written.
    scripted_server.add_script(
        "hostile", Script(mode="sse_raw", cut_after=1, chunks=((0, 4800),) * 2, raw_event=raw_event)
    )
    prompts = _prompts(tmp_path / "p.jsonl", ["hostile a", "fine b", "fine c"])
    out = tmp_path / "o"
    code = main(["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts),
                 "--requests", "3", "--warmup", "0", "--sample-rate", "24000",
                 "--stream-format", "sse", "--max-error-rate", "1", "--speaker", "scripted",
                 "--out-dir", str(out)])  # fmt: skip
    assert code == 0
    by_text = {r["text"]: r for r in read_records(out / "records.jsonl")}
    assert set(by_text) == {"hostile a", "fine b", "fine c"}
    bad = by_text["hostile a"]
    assert bad["ok"] is False and bad["error"]["type"] == "bad_event", bad["error"]
    assert len(bad["error"]["message"]) <= 200
    assert bad["chunk_bytes"] == [4800]  # the audio before it is kept
    assert by_text["fine b"]["ok"] and by_text["fine c"]["ok"]


def test_a_response_past_the_read_bound_fails_too_large(
    scripted_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # 1-byte chunks escaped the byte bound through their overhead (716 MB of client memory
    # and a 161 MB records line for 4 MB of audio): a response is bounded by its reads too
    # (MAX_RESPONSE_READS; 50 here, the same code).
    monkeypatch.setattr("thetalker.client.receive.MAX_RESPONSE_READS", 50)
    scripted_server.add_script("tiny", Script(chunks=((0, 2),) * 200, wait_for_read=True))
    prompts = _prompts(tmp_path / "p.jsonl", ["tiny a", "fine b"])
    out = tmp_path / "o"
    code = main(["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts),
                 "--requests", "2", "--warmup", "0", "--sample-rate", "24000",
                 "--trust-sample-rate", "--max-error-rate", "1", "--speaker", "scripted",
                 "--out-dir", str(out)])  # fmt: skip
    assert code == 0
    by_text = {r["text"]: r for r in read_records(out / "records.jsonl")}
    tiny = by_text["tiny a"]
    assert tiny["ok"] is False and tiny["error"]["type"] == "too_large", tiny["error"]
    assert "50 reads" in tiny["error"]["message"]
    assert len(tiny["read_bytes"]) <= 50
    assert by_text["fine b"]["ok"] is True


def test_an_error_body_json_cannot_take_is_its_requests_message_and_keeps_the_others(
    scripted_server: ScriptedServer, tmp_path: Path
):
    # The error body is read when the record is built: a RecursionError there ended the
    # record writer, and every record of the point with it.
    deep = '{"error": {"message": ' + "[" * 30_000 + "]" * 30_000 + "}}"
    scripted_server.add_script("deep", Script(mode="http_error", status=500, raw_event=deep))
    prompts = _prompts(tmp_path / "p.jsonl", ["deep a", "fine b"])
    out = tmp_path / "o"
    code = main(["--base-url", scripted_server.base_url, "--texts-jsonl", str(prompts),
                 "--requests", "2", "--warmup", "0", "--sample-rate", "24000",
                 "--trust-sample-rate", "--max-error-rate", "1", "--speaker", "scripted",
                 "--out-dir", str(out)])  # fmt: skip
    assert code == 0
    by_text = {r["text"]: r for r in read_records(out / "records.jsonl")}
    assert by_text["deep a"]["error"]["type"] == "http_status"
    assert len(by_text["deep a"]["error"]["message"]) <= 300
    assert by_text["fine b"]["ok"] is True
