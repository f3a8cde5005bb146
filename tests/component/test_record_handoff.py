"""Finished exchanges reach the records file during the run, not only at its end: held while
the receive loop reads (thetalker.client.handoff), written at its first quiet moment or at the
bound when it never pauses, and everything still held at close. The real receive loop notes
its reads for that. No duration is asserted: each wait is for a condition, with a generous
deadline."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp

from tests.support.scripted_server import Script, ScriptedServer
from thetalker.client.context import RunContext
from thetalker.client.exchange import Exchange
from thetalker.client.handoff import last_read, note_read
from thetalker.client.options import BenchOptions
from thetalker.client.receive import receive_response
from thetalker.client.sinks import ThreadSink
from thetalker.data.prompts import Prompt

DEADLINE_S = 30.0


def _sink(tmp_path: Path) -> ThreadSink:
    ctx = RunContext.for_run(BenchOptions(base_url="http://127.0.0.1:9"), tmp_path, 0.0)
    return ThreadSink(tmp_path / "records.jsonl", ctx)


def _indices(tmp_path: Path) -> list[int]:
    text = (tmp_path / "records.jsonl").read_text(encoding="utf-8")
    return [json.loads(line)["request_index"] for line in text.splitlines()]


async def _until_written(tmp_path: Path, count: int) -> None:
    end = time.monotonic() + DEADLINE_S
    while len(_indices(tmp_path)) < count and time.monotonic() < end:
        await asyncio.sleep(0.01)


async def _read_without_pause(stop: asyncio.Event) -> None:
    """A receive loop that is never quiet: a read noted at every turn of the event loop."""
    while not stop.is_set():
        note_read(time.perf_counter())
        await asyncio.sleep(0)


async def test_a_record_is_written_at_the_loops_first_quiet_moment_before_close(tmp_path: Path):
    sink = _sink(tmp_path)
    sink.put({"request_index": 0})
    assert _indices(tmp_path) == []  # held: the loop may still be reading
    await _until_written(tmp_path, 1)
    assert _indices(tmp_path) == [0]  # written while the run goes on
    assert [r["request_index"] for r in sink.close()] == [0]


async def test_a_loop_that_never_pauses_still_has_its_records_written_before_close(
    tmp_path: Path,
):
    sink = _sink(tmp_path)
    stop = asyncio.Event()
    reader = asyncio.create_task(_read_without_pause(stop))
    try:
        sink.put({"request_index": 0})
        sink.put({"request_index": 1})
        await _until_written(tmp_path, 2)  # at the bound (HOLD_AT_MOST_S), never quiet
        assert _indices(tmp_path) == [0, 1]
    finally:
        stop.set()
        await reader
    assert [r["request_index"] for r in sink.close()] == [0, 1]


async def test_close_writes_every_record_still_held(tmp_path: Path):
    sink = _sink(tmp_path)
    for i in range(3):
        sink.put({"request_index": i})
    assert _indices(tmp_path) == []  # held: the event loop has not turned since
    assert [r["request_index"] for r in sink.close()] == [0, 1, 2]
    assert sorted(_indices(tmp_path)) == [0, 1, 2]


async def test_the_receive_loop_notes_each_read(scripted_server: ScriptedServer):
    scripted_server.default = Script(chunks=((0.0, 4800), (0.05, 4800)))
    ex = Exchange(0, Prompt("id0", "noted"), warmup=False)
    async with aiohttp.ClientSession() as session:
        url = f"{scripted_server.base_url}/v1/audio/speech"
        body = json.dumps(
            {"input": "noted", "stream": True, "stream_format": "audio", "response_format": "pcm"}
        )
        await receive_response(session, url, body.encode(), 60.0, False, ex)
    assert ex.status == 200 and ex.failure is None and len(ex.times) >= 2
    assert last_read() == ex.times[-1]  # the stamp of its last read, as the records keep it
