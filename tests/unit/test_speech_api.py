"""`thetalker.api.speech`: URLs, the one error-body parser, voice requests on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.support.scripted_server import ScriptedServer
from thetalker.api import speech as speech_api
from thetalker.api.speech import (
    SpeechApiError,
    error_message,
    list_voices,
    register_voice_blocking,
    speech_url,
    voices_url,
)
from thetalker.data.wavio import write_wav


def test_urls():
    assert speech_url("http://h:1/v1/") == "http://h:1/v1/audio/speech"
    assert voices_url("http://h:1") == "http://h:1/v1/audio/voices"
    assert voices_url("http://h:1", "a?b c/d") == "http://h:1/v1/audio/voices/a%3Fb%20c%2Fd"


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b'{"error": {"message": "Invalid voice", "type": "BadRequestError"}}', None,
         "Invalid voice"),
        (b'{"error": "queued"}', "application/json", "queued"),
        (b'{"detail": "Not Found"}', "application/json", "Not Found"),
        (b"plain words\n", "text/plain", "plain words"),
        (b"", None, "HTTP 500 with an empty body"),
        # a non-audio failure with an audio body: described, never pasted
        (b"\x01\x00" * 24000, "audio/pcm", "audio/pcm body of 48000 bytes"),
        (b"\xff\xfe\x00\x01", None, "binary body of 4 bytes"),
    ],
)  # fmt: skip
def test_error_message(body: bytes, content_type: str | None, expected: str):
    assert error_message(body, 500, content_type) == expected


def test_error_message_says_a_capped_read_is_a_lower_bound():
    assert error_message(b"\0" * 64, 200, "audio/wav", limit=64) == (
        "audio/wav body of at least 64 bytes"
    )
    assert len(error_message(b"x" * 1000, 400, "text/plain")) == 300


def test_contract_constants_are_the_clients():
    from thetalker import client

    assert client.TASK_TYPES == speech_api.TASK_TYPES == ("CustomVoice", "Base", "VoiceDesign")
    assert client.STREAM_FORMATS == ("audio", "sse") and client.RESPONSE_FORMATS == ("pcm", "wav")
    assert speech_api.MAX_INSTRUCTIONS_CHARS == 500 and speech_api.REFERENCE_CLIP_S == (1.0, 30.0)


def test_register_blocking_works_inside_a_running_loop(
    scripted_server: ScriptedServer, tmp_path: Path
):
    ref = write_wav(tmp_path / "ref.wav", b"\1\0" * 24000, 24000)

    async def from_a_coroutine() -> dict:
        return register_voice_blocking(scripted_server.base_url, "Loop", ref, "hi")

    voice = asyncio.run(from_a_coroutine())
    assert voice["name"] == "Loop" and scripted_server.voices["loop"]["ref_text"] == "hi"


async def test_a_refusal_carries_status_and_the_servers_message(
    scripted_server: ScriptedServer, tmp_path: Path
):
    async with aiohttp.ClientSession() as session:
        listed = await list_voices(session, scripted_server.base_url)
        assert "scripted" in listed["voices"]
        with pytest.raises(SpeechApiError, match=r"^delete voice 'x\?y': HTTP 404: ") as exc:
            await speech_api.delete_voice(session, scripted_server.base_url, "x?y")
    assert exc.value.status == 404


def test_success_false_is_a_refusal(tmp_path: Path):
    from aiohttp import web

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"success": False, "message": "immutable"})

    async def go() -> None:
        app = web.Application()
        app.router.add_post("/v1/audio/voices", refuse)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ref = write_wav(tmp_path / "ref.wav", b"\1\0" * 24000, 24000)
        try:
            async with aiohttp.ClientSession() as session:
                with pytest.raises(
                    SpeechApiError, match="^register voice 'v': refused: immutable$"
                ):
                    await speech_api.register_voice(session, f"http://127.0.0.1:{port}", "v", ref)
        finally:
            await runner.cleanup()

    asyncio.run(go())
