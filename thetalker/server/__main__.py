"""`thetalker-serve-local` / `python -m thetalker.server`: the embedded default server.

Loads the Piper voice into its pool of sessions, then opens the port (so "connection refused"
means still starting, as with vllm-omni), logs `Application startup complete.` and serves until
SIGTERM or SIGINT, which stop it cleanly. `--port 0` picks a free port; the log line
`Serving on http://HOST:PORT` says which. `--api-key` (or $THETALKER_API_KEY, else
$VLLM_API_KEY) guards `/v1/*` with a Bearer token; `/health` stays open. Idle connections,
half-sent requests and unread streams are closed after their timeouts (guard.py).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

from aiohttp import web

from thetalker.server.app import SERVED_MODEL_NAME, make_app
from thetalker.server.engine import Engine, EngineSettings, PiperEngine
from thetalker.server.guard import (
    API_KEY_ENV,
    ServerLimits,
    guard_connections,
    quiet_bad_requests,
)
from thetalker.server.settings import DeployConfigError, engine_settings

__all__ = ["build_parser", "serve", "main"]

log = logging.getLogger("thetalker.server")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text}")
    return value


def api_key_from_env() -> str | None:
    for name in API_KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thetalker-serve-local",
        description="OpenAI-compatible TTS server (vllm-omni's speech API) over the Piper "
        "voice en_US-joe-medium on the CPU. piper-tts is GPL-3.0-or-later.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091, help="0 picks a free port")
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="onnxruntime sessions in the pool (default: deploy file, else 1)",
    )
    parser.add_argument(
        "--threads-per-worker",
        type=_positive_int,
        default=None,
        help="intra-op threads per session (default: deploy file, else onnxruntime's default)",
    )
    parser.add_argument("--deploy-config", default=None, help="deploy YAML (flags override it)")
    parser.add_argument(
        "--voices-dir",
        default=os.environ.get("SPEAKER_SAMPLES_DIR"),
        help="where uploaded voices live (default: $SPEAKER_SAMPLES_DIR, "
        "else a fresh temporary folder)",
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="noise scales 0: bit-identical audio run to run",
    )
    parser.add_argument(
        "--no-onnx-cache",
        action="store_true",
        help="do not cache onnxruntime's optimized graph (slower start)",
    )
    parser.add_argument("--served-model-name", default=SERVED_MODEL_NAME)
    parser.add_argument("--access-log", action="store_true", help="log every request")
    parser.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on /v1/* (default: $THETALKER_API_KEY, "
        "else $VLLM_API_KEY; prefer the variables: a command line is visible to other users)",
    )
    stock = ServerLimits()
    parser.add_argument(
        "--idle-timeout",
        type=_positive_float,
        default=stock.idle_timeout_s,
        help="close a connection with no complete request for this long, s "
        f"(default {stock.idle_timeout_s:g})",
    )
    parser.add_argument(
        "--body-timeout",
        type=_positive_float,
        default=stock.body_timeout_s,
        help=f"a request body must arrive within this, s (default {stock.body_timeout_s:g})",
    )
    parser.add_argument(
        "--write-timeout",
        type=_positive_float,
        default=stock.write_timeout_s,
        help="close a stream whose client has not read for this long, s "
        f"(default {stock.write_timeout_s:g})",
    )
    return parser


async def serve(
    engine: Engine,
    host: str,
    port: int,
    voices_dir: str | None = None,
    served_model_name: str = SERVED_MODEL_NAME,
    access_log: bool = False,
    t_start: float | None = None,
    api_key: str | None = None,
    limits: ServerLimits | None = None,
) -> None:
    """Run until SIGTERM/SIGINT. The engine loads before the port opens."""
    t_start = time.perf_counter() if t_start is None else t_start
    limits = limits or ServerLimits()
    quiet_bad_requests()
    app = make_app(
        engine,
        voices_dir=voices_dir,
        served_model_name=served_model_name,
        api_key=api_key,
        limits=limits,
    )
    runner = web.AppRunner(
        app,
        handler_cancellation=True,  # a client that leaves cancels its synthesis
        access_log=log if access_log else None,
    )
    await runner.setup()  # runs cleanup_ctx: the voice is loaded here
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    guard: asyncio.Task[None] | None = None
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        guard = asyncio.ensure_future(guard_connections(runner.server, limits))
        bound = runner.addresses[0][1] if runner.addresses else port
        log.info(
            "Serving on http://%s:%d (model %s, %d worker(s)%s)",
            host,
            bound,
            served_model_name,
            engine.workers,
            ", API key required on /v1/*" if api_key else "",
        )
        chunks = getattr(engine, "chunks", None)
        scheduler = getattr(engine, "scheduler", None)
        if chunks is not None and scheduler is not None:
            log.info(
                "Streaming: pieces of %s words (first %d, at least %d), scheduling_policy %s, "
                "max_active_streams %s",
                chunks.chunk_words or "whole-sentence",
                chunks.initial_chunk_words,
                chunks.min_chunk_words,
                scheduler.policy,
                scheduler.max_active_streams or "unlimited",
            )
        log.info("Started in %.2f s", time.perf_counter() - t_start)
        log.info("Application startup complete.")
        await stop.wait()
        log.info("Shutting down")
    finally:
        if guard is not None:
            guard.cancel()
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    t_start = time.perf_counter()
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings: EngineSettings = engine_settings(
            args.deploy_config, args.workers, args.threads_per_worker, args.deterministic
        )
        if args.no_onnx_cache:
            settings = dataclasses.replace(settings, onnx_cache=False)
    except DeployConfigError as exc:
        print(f"thetalker-serve-local: error: {exc}", file=sys.stderr)
        return 2
    engine = PiperEngine(settings)
    try:
        import uvloop
    except ImportError:
        uvloop = None
    runner = uvloop.run if uvloop is not None else asyncio.run
    try:
        runner(
            serve(
                engine,
                args.host,
                args.port,
                args.voices_dir,
                args.served_model_name,
                args.access_log,
                t_start,
                args.api_key or api_key_from_env(),
                ServerLimits(args.idle_timeout, args.body_timeout, args.write_timeout),
            )
        )
    except OSError as exc:
        print(f"thetalker-serve-local: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
