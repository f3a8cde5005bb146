"""The real local server: `thetalker-serve-local` as a subprocess, real Piper synthesis.

One deterministic two-worker server serves the whole module (tests/support/server_fixtures.py).
Sentences are kept short: each costs about 0.1 to 0.3 s of CPU.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest

from tests.support.http_chunks import read_server_chunks
from tests.support.server_fixtures import LocalServer, local_server, start_local_server
from thetalker.server.formats import wav_bytes

__all__ = ["local_server"]  # the fixture, imported so pytest finds it here

RATE = 22050
STREAM = {"stream": True, "stream_format": "audio", "response_format": "pcm"}
TWO_SENTENCES = "The cat sat down. Then it slept."


async def fetch(
    server: LocalServer, method: str, path: str, **kwargs: Any
) -> tuple[int, dict, bytes, list[bytes]]:
    """(status, headers, body, the body split at the server's HTTP chunk ends)."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session,
        session.request(method, server.base_url + path, **kwargs) as resp,
    ):
        chunks = await read_server_chunks(resp)
        return resp.status, dict(resp.headers), b"".join(chunks), chunks


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def in_process_piper(text: str) -> list[bytes]:
    """Piper in this process with the server's --deterministic settings, one chunk a sentence."""
    from piper import SynthesisConfig

    from thetalker.server.engine import load_piper_voice

    voice = load_piper_voice(threads=1)
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    return [c.audio_int16_bytes for c in voice.synthesize(text, syn_config=config)]


def metric(server: LocalServer, name: str) -> float:
    _, _, body, _ = run(fetch(server, "GET", "/metrics"))
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_health_models_version(local_server: LocalServer) -> None:
    status, _, body, _ = run(fetch(local_server, "GET", "/health"))
    assert (status, json.loads(body)) == (200, {"status": "healthy"})
    _, _, body, _ = run(fetch(local_server, "GET", "/v1/models"))
    assert json.loads(body)["data"][0]["id"] == "piper-joe"
    _, _, body, _ = run(fetch(local_server, "GET", "/version"))
    assert json.loads(body)["piper_tts"] == "1.8.0"
    print(f"\nlocal server ready {local_server.start_s:.2f} s after spawn")


def test_stream_is_piper_sentence_by_sentence(local_server: LocalServer) -> None:
    body = {"input": TWO_SENTENCES, **STREAM}
    status, headers, audio, chunks = run(fetch(local_server, "POST", "/v1/audio/speech", json=body))
    assert status == 200 and headers["Content-Type"] == "audio/pcm"
    expected = in_process_piper(TWO_SENTENCES)
    assert len(expected) == 2
    # One HTTP chunk per sentence, each exactly what Piper gives in-process (deterministic).
    assert [len(c) for c in chunks] == [len(c) for c in expected]
    assert chunks == expected
    samples = np.frombuffer(audio, "<i2")
    assert np.abs(samples).max() > 3000  # speech, not silence
    assert 1.0 < len(samples) / RATE < 6.0


def test_non_streamed_wav_carries_22050(local_server: LocalServer) -> None:
    body = {"input": "Hello.", "response_format": "wav"}
    status, headers, wav, _ = run(fetch(local_server, "POST", "/v1/audio/speech", json=body))
    assert status == 200 and headers["Content-Type"] == "audio/wav"
    assert wav[:4] == b"RIFF" and struct.unpack_from("<I", wav, 24)[0] == RATE
    assert struct.unpack_from("<I", wav, 40)[0] == len(wav) - 44 > RATE  # over half a second


def test_wav_stream_header_then_audio(local_server: LocalServer) -> None:
    body = {"input": "Hello.", **STREAM, "response_format": "wav"}
    _, _, _, chunks = run(fetch(local_server, "POST", "/v1/audio/speech", json=body))
    assert len(chunks[0]) == 44 and struct.unpack_from("<I", chunks[0], 24)[0] == RATE
    assert struct.unpack_from("<I", chunks[0], 40)[0] == 0xFFFFFFFF
    assert len(chunks) == 2 and len(chunks[1]) > RATE


def test_sse_decodes_to_the_raw_stream(local_server: LocalServer) -> None:
    raw_body = {"input": TWO_SENTENCES, **STREAM}
    _, _, raw, _ = run(fetch(local_server, "POST", "/v1/audio/speech", json=raw_body))
    sse_body = {"input": TWO_SENTENCES, "stream": True, "response_format": "pcm"}
    status, headers, text, _ = run(fetch(local_server, "POST", "/v1/audio/speech", json=sse_body))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [
        json.loads(line[6:]) for line in text.decode().splitlines() if line.startswith("data: ")
    ]
    assert [e["type"] for e in events] == ["speech.audio.delta"] * 2 + ["speech.audio.done"]
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == raw


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": ""}, 400, None),
        ({"input": "Hi.", "model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"}, 404, "model"),
        ({"input": "Hi.", "task_type": "Base"}, 400, None),
        ({"input": "Hi.", "speaker": "ryan"}, 400, None),
        ({"input": "Hi.", "speed": 2.0, **STREAM}, 400, None),
        ({"input": "Hi.", **STREAM, "response_format": "mp3"}, 400, "body.response_format"),
        ({"input": " ".join(["word"] * 5000)}, 400, None),  # over MAX_INPUT_CHARS
    ],
)
def test_bad_input_status_and_error_body(
    local_server: LocalServer, body: dict, status: int, param: str
) -> None:
    got, _, data, _ = run(fetch(local_server, "POST", "/v1/audio/speech", json=body))
    error = json.loads(data)["error"]
    assert (got, error["param"], error["code"]) == (status, param, status)


def test_voices_round_trip(local_server: LocalServer) -> None:
    sample = wav_bytes(b"".join(in_process_piper("This is my voice. Please keep it.")), RATE)
    form = aiohttp.FormData()
    form.add_field("name", "Guest")
    form.add_field("consent", "recorded-2026")
    form.add_field("ref_text", "This is my voice. Please keep it.")
    form.add_field("audio_sample", sample, filename="guest.wav", content_type="audio/wav")
    status, _, body, _ = run(fetch(local_server, "POST", "/v1/audio/voices", data=form))
    assert status == 200, body
    assert json.loads(body)["voice"]["file_size"] == len(sample)
    _, _, body, _ = run(fetch(local_server, "GET", "/v1/audio/voices"))
    assert json.loads(body)["voices"] == ["guest", "joe"]
    speech = {"input": "Hi.", "voice": "guest", **STREAM}
    status, _, body, _ = run(fetch(local_server, "POST", "/v1/audio/speech", json=speech))
    assert status == 400 and "clone" in json.loads(body)["error"]["message"]
    status, _, _, _ = run(fetch(local_server, "DELETE", "/v1/audio/voices/GUEST"))
    assert status == 200
    status, _, _, _ = run(fetch(local_server, "DELETE", "/v1/audio/voices/guest"))
    assert status == 404


async def _open_and_drop(server: LocalServer, text: str) -> int:
    """Start a stream, read its first sentence, then drop the connection."""
    session = aiohttp.ClientSession()
    try:
        resp = await session.post(
            server.base_url + "/v1/audio/speech", json={"input": text, **STREAM}
        )
        first = await resp.content.readany()
        resp.close()
        return len(first)
    finally:
        await session.close()


def test_disconnect_mid_stream_frees_the_worker(local_server: LocalServer) -> None:
    cancelled_before = metric(local_server, "thetalker:requests_cancelled_total")
    # About 60 s of synthesis each if nobody stopped it.
    long_text = " ".join(f"This is sentence number {i}." for i in range(40))

    async def both() -> list[int]:
        return await asyncio.gather(*(_open_and_drop(local_server, long_text) for _ in range(2)))

    assert all(n > 0 for n in run(both()))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metric(local_server, "thetalker:workers_busy") == 0:
            break
        time.sleep(0.1)
    assert metric(local_server, "thetalker:workers_busy") == 0
    assert metric(local_server, "thetalker:requests_in_flight") == 0
    assert metric(local_server, "thetalker:requests_cancelled_total") == cancelled_before + 2

    # Both workers are free again: two requests at once are both served.
    async def two() -> list[tuple]:
        body = {"input": "Done.", **STREAM}
        return await asyncio.gather(
            *(fetch(local_server, "POST", "/v1/audio/speech", json=body) for _ in range(2))
        )

    assert [r[0] for r in run(two())] == [200, 200]


@pytest.mark.parametrize("concurrency", [1, 2])
def test_bench_client_against_it(
    local_server: LocalServer, tmp_path: Path, concurrency: int
) -> None:
    import thetalker.client as client
    from thetalker.data.prompts import Prompt
    from thetalker.data.record_reads import read_records

    prompts = [
        Prompt(f"s{i}", text)
        for i, text in enumerate(
            ["Good morning.", "The sky is blue.", "Please call me back.", "It is cold today."]
        )
    ]
    opts = client.BenchOptions(
        base_url=local_server.base_url,
        model="piper-joe",
        concurrency=concurrency,
        requests=4,
        warmup=1,
        expected_sample_rate=RATE,
        timeout_s=60,
    )
    summary = client.run_benchmark(opts, prompts, tmp_path)
    records = [r for r in read_records(tmp_path / "records.jsonl") if not r["warmup"]]
    assert len(records) == 4 and all(r["ok"] for r in records), records
    assert all(r["sample_rate"] == RATE and r["audio_s"] > 0.3 for r in records)
    assert summary["n_ok"] == 4 and summary["rtfx"] > 0
    print(f"\nc{concurrency}: RTFx {summary['rtfx']:.1f}")


LONG_SENTENCE = (
    "The old lighthouse keeper climbed the narrow stairs every evening, carrying a lamp, "
    "a book and a small tin of biscuits for the long and quiet hours before the dawn came."
)
PIECES = (
    "initial_chunk_words: 3\nchunk_words: 6\nmin_chunk_words: 3\n"
    "workers: 1\nthreads_per_worker: 1\n"
)


async def timed_chunks(server: LocalServer, body: dict) -> tuple[float, list[tuple[float, bytes]]]:
    """(seconds to the end of the body, [(seconds to this chunk's end, chunk)])."""
    t0 = time.perf_counter()
    chunks, current = [], b""
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.base_url + "/v1/audio/speech", json=body) as resp,
    ):
        assert resp.status == 200
        async for data, end in resp.content.iter_chunks():
            current += data
            if end and current:
                chunks.append((time.perf_counter() - t0, current))
                current = b""
    return time.perf_counter() - t0, chunks


def test_long_sentence_streams_in_pieces(tmp_path: Path) -> None:
    from thetalker.server.engine import EngineSettings, PiperBackend
    from thetalker.server.pieces import ChunkPlan

    deploy = tmp_path / "pieces.yaml"
    deploy.write_text(PIECES)
    args = ["--deterministic", "--deploy-config", str(deploy), "--voices-dir", str(tmp_path)]
    with start_local_server(args, log_dir=tmp_path) as server:
        total_s, chunks = run(timed_chunks(server, {"input": LONG_SENTENCE, **STREAM}))
    # One sentence, several HTTP chunks, in order. (How soon the first came against the
    # whole is a speed figure: benchmarks/, not here; nothing deterministic shows the first
    # arrived before the last was made without a hook in the server.)
    assert len(chunks) >= 5
    times = [t for t, _ in chunks]
    assert times == sorted(times) and times[-1] <= total_s
    # Each chunk is exactly the piece Piper makes in-process with the same plan.
    backend = PiperBackend(EngineSettings(threads_per_worker=1, deterministic=True))
    voice = backend.load_worker()
    pieces = backend.split(voice, LONG_SENTENCE, ChunkPlan(3, 6, 3), True)
    expected = [backend.render(voice, p, 1.0, i) for i, p in enumerate(pieces)]
    assert [p.words for p in pieces][0] == 3 and min(p.words for p in pieces) >= 3
    assert [len(c) for _, c in chunks] == [len(e) for e in expected]
    assert b"".join(c for _, c in chunks) == b"".join(expected)
    samples = np.frombuffer(b"".join(c for _, c in chunks), "<i2")
    assert len(samples) == sum(len(e) for e in expected) // 2
    assert 4.0 < len(samples) / RATE < 15.0


def test_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    with start_local_server(["--voices-dir", str(tmp_path / "v")], log_dir=tmp_path) as server:
        print(f"\nstock server ready {server.start_s:.2f} s after spawn")
        assert "Application startup complete." in server.log()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0
    assert "Shutting down" in server.log()


def test_bad_deploy_config_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "deploy.yaml"
    bad.write_text("workers: 2\nthreads: 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "thetalker.server", "--port", "0", "--deploy-config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert str(bad) in proc.stderr and "'threads'" in proc.stderr
