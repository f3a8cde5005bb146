"""`thetalker-voice`: register, list and delete uploaded voices (`/v1/audio/voices`).

    thetalker-voice register NAME --audio ref.wav [--ref-text "..."] [--consent TEXT]
    thetalker-voice list
    thetalker-voice delete NAME
    thetalker-voice --port 8091 --name NAME --ref-audio ref.wav --ref-text "..."

The last form, with no subcommand, registers: it is the original benchmark's command.
`--ref-audio` is also accepted for `--audio` after `register`. This module only parses
arguments and prints; the requests are `thetalker.api.speech`'s.

Exit status: 0; 1 when the server refused or could not be reached; 2 for bad arguments
(one line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import aiohttp

from thetalker.api.auth import auth_headers
from thetalker.api.speech import (
    DEFAULT_CONSENT,
    SpeechApiError,
    delete_voice,
    list_voices,
    normalize_base_url,
    register_voice,
)
from thetalker.data.wavio import WavError, check_reference_clip
from thetalker.util.redact import redact_url

__all__ = ["build_parser", "main"]

PROG = "thetalker-voice"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2; no URL's password
        self.exit(2, f"{self.prog}: error: {redact_url(message)}\n")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 (got {text})")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Manage uploaded voices.")
    parser.add_argument("--base-url", help="server URL (default http://HOST:PORT)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--timeout", type=_seconds, default=60.0, help="seconds per request")
    # The original benchmark's form: these alone (no subcommand) register a voice.
    parser.add_argument("--name", dest="top_name", help="register this voice (no subcommand)")
    parser.add_argument("--ref-audio", dest="top_audio", help="its reference WAV (1 to 30 s)")
    parser.add_argument("--ref-text", dest="top_ref_text", help="its transcript")
    parser.add_argument("--consent", dest="top_consent", default=DEFAULT_CONSENT)
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    reg = sub.add_parser("register", help="upload a reference WAV as a voice")
    reg.add_argument("name")
    reg.add_argument(
        "--audio", "--ref-audio", dest="audio", required=True, help="reference WAV (1 to 30 s)"
    )
    reg.add_argument("--ref-text", help="transcript of the reference audio")
    reg.add_argument("--consent", default=DEFAULT_CONSENT)
    sub.add_parser("list", help="print the server's voices as JSON")
    dele = sub.add_parser("delete", help="delete an uploaded voice")
    dele.add_argument("name")
    return parser


def _resolve_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The original form (no subcommand) as `register`; one line and exit 2 when neither."""
    if args.command is not None:
        if args.command == "register" or not (args.top_name or args.top_audio):
            return
        parser.error(f"--name/--ref-audio register without a subcommand, not with {args.command}")
    if not (args.top_name and args.top_audio):
        parser.error(
            "give a subcommand (register, list, delete), or --name NAME --ref-audio WAV to register"
        )
    args.command, args.name, args.audio = "register", args.top_name, args.top_audio
    args.ref_text, args.consent = args.top_ref_text, args.top_consent


async def _run(args: argparse.Namespace, base_url: str) -> Any:
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    # A server started with an API key: the key from its variable (thetalker.api.auth).
    async with aiohttp.ClientSession(timeout=timeout, headers=auth_headers()) as session:
        if args.command == "register":
            return await register_voice(
                session, base_url, args.name, args.audio, args.ref_text, args.consent
            )
        if args.command == "list":
            return await list_voices(session, base_url)
        return await delete_voice(session, base_url, args.name)


def main(argv: list[str] | None = None) -> int:
    """0 on success, 1 when the server refused or could not be reached, 2 for bad arguments."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _resolve_command(parser, args)
    base_url = normalize_base_url(args.base_url or f"http://{args.host}:{args.port}")
    if args.command == "register":
        if not Path(args.audio).is_file():
            parser.error(f"--audio: no such file: {args.audio}")
        try:
            check_reference_clip(args.audio)
        except WavError as exc:
            parser.error(f"--audio: {exc}")
    try:
        result = asyncio.run(_run(args, base_url))
    except SpeechApiError as exc:
        print(f"{PROG}: {redact_url(str(exc))}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
