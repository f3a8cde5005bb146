"""A scripted WebSocket server speaking 0.30.0's `/v1/audio/speech/stream`, with faults.

It splits the text at sentence ends (". ", "! ", "? ", and the rest at `input.done`), as
0.30.0 does with `split_granularity: sentence`, and answers each sentence with
`audio.start` (with `sentence_text` and the nominal `sample_rate` 24000), `frames` binary
frames of `frame_bytes` each `frame_gap_s` apart, and `audio.done`; `session.done` after
`input.done`. What goes wrong is chosen by the session.config's `voice`:

- `late`: the first `audio.start` only `late_s` after the first `input.text` arrived;
- `boom`: after the first frame of the first sentence, an `error` (as 0.30.0's generation
  failure: `partial_audio`, then that sentence's `audio.done` with `error: true`); the
  session goes on;
- `close`: the socket closes after the first frame;
- `refuse`: `error` "Invalid session config" and the socket closes (a refused config);
- `short`: `session.done` (stating 1 sentence) after the first sentence, the rest unspoken;
- `nan`: each `audio.done` carries `total_bytes: NaN` (non-standard JSON, as Python writes);
- `raw_event` (the script's, any voice): after the first frame of a sentence holding the
  word `raw_event_word`, that text as one event (a hostile one: nested 200,000 deep);
- `early`: at the first `input.text`, one sentence that names no text (no `sentence_text`)
  and `session.done` stating 1 sentence, before the rest of the text comes.

Every received message is logged with its `time.perf_counter()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

__all__ = ["WsScript", "WsScriptedServer", "start_ws_scripted_server"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class WsScript:
    frames: int = 2
    frame_bytes: int = 4800
    frame_gap_s: float = 0.01
    late_s: float = 0.3
    empty_frames: int = 0  # frames with no bytes sent after each audio.start, before audio
    raw_event: str | None = None  # sent as is after the first frame of a sentence ...
    raw_event_word: str = "hostile"  # ... that holds this word
    # text frames with nothing in them, sent after each audio.start (a flood of events)
    empty_events: int = 0


@dataclass
class WsScriptedServer:
    base_url: str
    script: WsScript
    received: list[tuple[float, dict[str, Any]]] = field(default_factory=list)


def _tone(n_bytes: int) -> bytes:
    return (b"\x10\x00\xf0\xff" * (n_bytes // 4 + 1))[:n_bytes]


async def _session(request: web.Request) -> web.WebSocketResponse:
    server: WsScriptedServer = request.app["server"]
    script = server.script
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    config: dict[str, Any] | None = None
    buffer = ""
    sentence_index = 0
    first_text_at: float | None = None
    failed_once = False

    async def speak(text: str) -> bool:
        """One sentence; False when the script closed the socket."""
        nonlocal sentence_index, failed_once
        voice = (config or {}).get("voice")
        if voice == "late" and sentence_index == 0 and first_text_at is not None:
            await asyncio.sleep(max(0.0, first_text_at + script.late_s - time.perf_counter()))
        start = {"type": "audio.start", "utterance_index": 0, "sentence_index": sentence_index}
        start.update(format="pcm", sample_rate=24000)
        if voice != "early":
            start["sentence_text"] = text
        await ws.send_json(start)
        for _ in range(script.empty_frames):
            await ws.send_bytes(b"")
        for _ in range(script.empty_events):
            await ws.send_str("")
        sent = 0
        error = False
        for i in range(script.frames):
            await asyncio.sleep(script.frame_gap_s)
            await ws.send_bytes(_tone(script.frame_bytes))
            sent += script.frame_bytes
            if i == 0 and script.raw_event is not None and script.raw_event_word in text:
                await ws.send_str(script.raw_event)
            if voice == "close":
                await ws.close()
                return False
            if voice == "boom" and not failed_once and i == 0:
                failed_once = error = True
                message = f"Generation failed for utterance 0, sentence {sentence_index}: boom"
                await ws.send_json(
                    {
                        "type": "error",
                        "message": message,
                        "partial_audio": True,
                        "action": "discard",
                    }
                )
                break
        done = {"type": "audio.done", "utterance_index": 0, "sentence_index": sentence_index}
        done.update(total_bytes=float("nan") if voice == "nan" else sent, error=error)
        await ws.send_str(json.dumps(done))  # json.dumps writes NaN as the bare token
        sentence_index += 1
        if voice in ("short", "early"):
            await ws.send_json({"type": "session.done", "utterance_index": 0, "total_sentences": 1})
            return False
        return True

    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            continue
        data = json.loads(msg.data)
        server.received.append((time.perf_counter(), data))
        kind = data.get("type")
        if kind == "session.config":
            if data.get("voice") == "refuse":
                await ws.send_json({"type": "error", "message": "Invalid session config: no"})
                await ws.close()
                break
            config = data
        elif kind == "input.text":
            if first_text_at is None:
                first_text_at = time.perf_counter()
            buffer += data.get("text", "")
            if (config or {}).get("voice") == "early":
                await speak(buffer)
                return ws
            *complete, buffer = _SENTENCE_END.split(buffer)
            for sentence in complete:
                if not await speak(sentence.strip()):
                    return ws
        elif kind == "input.done":
            if buffer.strip() and not await speak(buffer.strip()):
                return ws
            buffer = ""
            total = sentence_index
            await ws.send_json(
                {"type": "session.done", "utterance_index": 0, "total_sentences": total}
            )
            sentence_index = 0
        elif kind == "session.close":
            await ws.close()
            break
    return ws


@contextlib.contextmanager
def start_ws_scripted_server(script: WsScript | None = None) -> Iterator[WsScriptedServer]:
    """The server on 127.0.0.1 (a free port) in a thread; stops when the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = WsScriptedServer(f"http://127.0.0.1:{port}", script or WsScript())
    app = web.Application()
    app["server"] = server
    app.router.add_get("/v1/audio/speech/stream", _session)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.SockSite(runner, sock).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="ws-scripted-server", daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
