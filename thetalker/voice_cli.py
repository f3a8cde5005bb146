"""`thetalker-voice`: register, list and delete uploaded voices (`/v1/audio/voices`).

    thetalker-voice register NAME --audio ref.wav [--ref-text "..."] [--consent TEXT]
    thetalker-voice list
    thetalker-voice delete NAME

The coroutines (`register_voice`, `list_voices`, `delete_voice`) take an open aiohttp session,
so the benchmark client registers its voice on the session of its run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import aiohttp

from thetalker.wavio import WavError, parse_wav_header

__all__ = [
    "VoiceError",
    "DEFAULT_CONSENT",
    "normalize_base_url",
    "register_voice",
    "list_voices",
    "delete_voice",
    "main",
]

# vllm-omni requires a consent field; what it holds is the operator's statement.
DEFAULT_CONSENT = "thetalker: the speaker consented to this reference recording"


class VoiceError(RuntimeError):
    """The server refused a voice request; the message carries its status and error text."""


def normalize_base_url(url: str) -> str:
    """`http://h:p` from `http://h:p/`, `http://h:p/v1` or `http://h:p/v1/`."""
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


async def _json_or_raise(resp: aiohttp.ClientResponse, what: str) -> Any:
    text = await resp.text()
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = None
    if resp.status >= 400 or data is None:
        message = text[:300]
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            message = str(data["error"].get("message", message))
        raise VoiceError(f"{what}: HTTP {resp.status}: {message}")
    return data


async def register_voice(
    session: aiohttp.ClientSession,
    base_url: str,
    name: str,
    audio_path: str | Path,
    ref_text: str | None = None,
    consent: str = DEFAULT_CONSENT,
) -> dict[str, Any]:
    """Upload `audio_path` as voice `name` (re-upload overwrites); returns the server's
    voice description."""
    audio_path = Path(audio_path)
    data = audio_path.read_bytes()
    parse_wav_header(data, source=str(audio_path))
    form = aiohttp.FormData()
    form.add_field("name", name)
    form.add_field("consent", consent)
    form.add_field("audio_sample", data, filename=audio_path.name, content_type="audio/wav")
    if ref_text:
        form.add_field("ref_text", ref_text)
    url = f"{normalize_base_url(base_url)}/v1/audio/voices"
    async with session.post(url, data=form) as resp:
        reply = await _json_or_raise(resp, f"register voice {name!r}")
    return reply.get("voice", reply) if isinstance(reply, dict) else {"reply": reply}


async def list_voices(session: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    async with session.get(f"{normalize_base_url(base_url)}/v1/audio/voices") as resp:
        return await _json_or_raise(resp, "list voices")


async def delete_voice(session: aiohttp.ClientSession, base_url: str, name: str) -> dict:
    url = f"{normalize_base_url(base_url)}/v1/audio/voices/{name}"
    async with session.delete(url) as resp:
        return await _json_or_raise(resp, f"delete voice {name!r}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="thetalker-voice", description="Manage uploaded voices.")
    parser.add_argument("--base-url", help="server URL (default http://HOST:PORT)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    reg = sub.add_parser("register", help="upload a reference WAV as a voice")
    reg.add_argument("name")
    reg.add_argument("--audio", required=True, help="reference WAV (1 to 30 s)")
    reg.add_argument("--ref-text", help="transcript of the reference audio")
    reg.add_argument("--consent", default=DEFAULT_CONSENT)
    sub.add_parser("list", help="print the server's voices as JSON")
    dele = sub.add_parser("delete", help="delete an uploaded voice")
    dele.add_argument("name")
    return parser


async def _run(args: argparse.Namespace, base_url: str) -> Any:
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        if args.command == "register":
            return await register_voice(
                session, base_url, args.name, args.audio, args.ref_text, args.consent
            )
        if args.command == "list":
            return await list_voices(session, base_url)
        return await delete_voice(session, base_url, args.name)


def main(argv: list[str] | None = None) -> int:
    """0 on success, 1 when the server refused or could not be reached, 2 for bad arguments."""
    parser = _parser()
    args = parser.parse_args(argv)
    base_url = normalize_base_url(args.base_url or f"http://{args.host}:{args.port}")
    if args.command == "register":
        if not Path(args.audio).is_file():
            parser.error(f"--audio: no such file: {args.audio}")
        try:
            parse_wav_header(Path(args.audio).read_bytes(), source=args.audio)
        except WavError as exc:
            parser.error(f"--audio: {exc}")
    try:
        result = asyncio.run(_run(args, base_url))
    except VoiceError as exc:
        print(f"thetalker-voice: {exc}", file=sys.stderr)
        return 1
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        print(
            f"thetalker-voice: cannot reach {base_url}: {exc or type(exc).__name__}",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
