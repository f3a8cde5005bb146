"""`thetalker-bench`: one load point against a speech server, records and summary on disk.

    thetalker-bench --port 8091 --texts-jsonl prompts/seed_tts_eval_en_100.jsonl \\
        --concurrency 8 --requests 64 --out-dir results/runs/x/c8

Exit status: 0; 1 when the scored error rate exceeds --max-error-rate, nothing succeeded,
or the server could not be used; 2 for bad arguments (one line on stderr); 130 on Ctrl-C
(the records of finished requests are on disk either way).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from thetalker import backends
from thetalker.api.speech import RESPONSE_FORMATS, STREAM_FORMATS, TASK_TYPES, VOICES_LIST_HINT
from thetalker.client import (
    BenchError,
    BenchOptions,
    OptionsError,
    RequestRefusedError,
    SampleRateError,
    run_benchmark,
    validate_options,
)
from thetalker.client.options import PROTOCOLS, SPLIT_GRANULARITIES
from thetalker.client.pacing import TEXT_PACE_UNITS
from thetalker.client.progress import (
    DEFAULT_INTERVAL_S,
    LineReporter,
    ProgressReporter,
    TtyReporter,
    format_point_end,
)
from thetalker.data.prompts import PromptError, load_prompts
from thetalker.metrics.onset import OnsetSettings
from thetalker.pipeline.verdicts import point_failure
from thetalker.util.redact import redact_url

__all__ = [
    "build_parser",
    "options_from_args",
    "exit_status",
    "progress_reporter",
    "require_speaker",
    "main",
]

PROG = "thetalker-bench"
# Every flag's default is its BenchOptions field's (one owner: thetalker.client.options).
_DEFAULT = BenchOptions()
_DEFAULT_URL = urlsplit(_DEFAULT.base_url)
# The onset rule's settings (OnsetSettings' fields), each a flag `--onset-NAME`: its
# metavar and what it sets; the default is the public report's rule.
_ONSET_FLAGS = (
    ("threshold_dbfs", "DB", "a frame is active at this RMS, dBFS after DC removal"),
    ("frame_s", "S", "frame length, s"),
    ("hop_s", "S", "a frame every S seconds, at most the frame"),
    ("run_frames", "N", "active frames in a row that make the onset"),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2; no URL's password
        self.exit(2, f"{self.prog}: error: {redact_url(message)}\n")


def _sample_rate(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or auto, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _field_flag(group: Any, name: str, **kwargs: Any) -> None:
    """`--{name}` for the BenchOptions field `name`, with that field's default."""
    group.add_argument(f"--{name.replace('_', '-')}", default=getattr(_DEFAULT, name), **kwargs)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Benchmark a streaming /v1/audio/speech server.")
    where = p.add_argument_group("server")
    where.add_argument(
        "--server", default=backends.DEFAULT_API, choices=backends.api_names(),
        help="the server's API (thetalker.backends): which body, stream and socket it speaks "
        f"(default {backends.DEFAULT_API})",
    )  # fmt: skip
    where.add_argument("--base-url", help="e.g. http://127.0.0.1:8091 (overrides host/port)")
    where.add_argument("--host", default=_DEFAULT_URL.hostname)
    where.add_argument("--port", type=int, default=_DEFAULT_URL.port)
    where.add_argument("--model", help="sent as 'model' (must equal the served name)")
    where.add_argument(
        "--api-key-env",
        metavar="NAME",
        help="variable holding the server's API key, sent as Authorization: Bearer (default: "
        "the first set of THETALKER_API_KEY, VLLM_API_KEY, OPENAI_API_KEY); never the key",
    )
    load = p.add_argument_group("load")
    load.add_argument("--texts-jsonl", required=True, help="prompts: {sample_id, text} per line")
    load.add_argument(
        "--concurrency", type=int, default=_DEFAULT.concurrency, help="requests in flight"
    )
    load.add_argument(
        "--request-rate", type=float, help="open loop: Poisson arrivals per second instead"
    )
    load.add_argument("--requests", type=int, default=_DEFAULT.requests, help="scored requests")
    load.add_argument("--warmup", type=int, default=_DEFAULT.warmup, help="requests before scoring")
    load.add_argument(
        "--seed", type=int, default=_DEFAULT.seed, help="fixes prompt order and arrivals"
    )
    load.add_argument(
        "--timeout", type=float, default=_DEFAULT.timeout_s, help="seconds per request"
    )
    load.add_argument("--max-error-rate", type=float, default=_DEFAULT.max_error_rate)
    load.add_argument(
        "--workers", type=int, default=_DEFAULT.workers, metavar="K",
        help="spread the scored streams over K processes (warmup runs once, here); "
        "for ~1000 streams on a many-core client host",
    )  # fmt: skip
    body = p.add_argument_group("request body")
    body.add_argument("--task-type", default=_DEFAULT.task_type, choices=TASK_TYPES)
    body.add_argument(
        "--speaker",
        help="CustomVoice speaker (default: the --deploy model's documented speaker)",
    )
    body.add_argument("--voice", help="an uploaded voice NAME")
    body.add_argument("--ref-audio", help="Base: reference WAV, sent as a data URI")
    body.add_argument("--ref-text", help="Base: transcript of --ref-audio")
    body.add_argument(
        "--register-voice", metavar="NAME", help="upload --ref-audio once as NAME, then use it"
    )
    body.add_argument("--instructions", help="VoiceDesign description (<= 500 chars)")
    body.add_argument("--language", default=_DEFAULT.language)
    body.add_argument("--max-new-tokens", type=int)
    body.add_argument("--stream-format", default=_DEFAULT.stream_format, choices=STREAM_FORMATS)
    body.add_argument(
        "--response-format", default=_DEFAULT.response_format, choices=RESPONSE_FORMATS
    )
    audio = p.add_argument_group("audio")
    audio.add_argument(
        "--sample-rate", type=_sample_rate, default=_DEFAULT.sample_rate, metavar="N|auto",
        help="PCM rate; auto (default) asks the server once (a non-streamed wav request, or the "
        "rate header of a streamed one where the server states it: sglang-omni)",
    )  # fmt: skip
    audio.add_argument("--expected-sample-rate", type=int, help="mismatch is an error (exit 2)")
    audio.add_argument(
        "--trust-sample-rate",
        action="store_true",
        help="use --sample-rate unchecked (by default one wav request checks it against the "
        "server's; a mismatch exits 2)",
    )
    audio.add_argument(
        "--deploy", metavar="NAME",
        help="deploy name (thetalker-deploy): its sample rate is the expected one",
    )  # fmt: skip
    audio.add_argument("--save-audio", metavar="DIR", help="write each scored utterance as WAV")
    audio.add_argument(
        "--save-audio-count", type=int, metavar="N",
        help="with --save-audio: only the first N scored requests (by sending order)",
    )  # fmt: skip
    audio.add_argument(
        "--threshold", type=float, default=_DEFAULT.threshold_s, help="continuity threshold, s"
    )
    onset = p.add_argument_group(
        "audible onset (thetalker.metrics.onset; defaults: the public report's rule)"
    )
    for name, metavar, words in _ONSET_FLAGS:
        default = getattr(_DEFAULT.onset, name)
        onset.add_argument(
            f"--onset-{name.replace('_', '-')}", type=type(default), default=default,
            metavar=metavar, help=f"{words} (default %(default)g)",
        )  # fmt: skip
    agent = p.add_argument_group("agent mode (text streamed in over a WebSocket)")
    field_flag = functools.partial(_field_flag, agent)
    field_flag(
        "protocol",
        choices=PROTOCOLS,
        help="websocket: one /v1/audio/speech/stream session per request, text in pieces",
    )
    field_flag(
        "text_pace",
        type=float,
        metavar="RATE",
        help="pieces (words) per second the text is sent at; 0 sends it whole "
        "(default %(default)g)",
    )
    field_flag(
        "text_pace_unit",
        choices=TEXT_PACE_UNITS,
        help="tokens: RATE is an LLM's tokens/s (a token is ~0.75 words)",
    )
    field_flag(
        "text_pace_jitter",
        type=float,
        metavar="J",
        help="each gap times a seeded uniform 1 +- J (0 <= J < 1)",
    )
    field_flag(
        "text_trace", metavar="FILE", help="recorded piece offsets (s), one a line; replace RATE"
    )
    field_flag(
        "split_granularity",
        choices=SPLIT_GRANULARITIES,
        help="the server's unit of synthesis (session.config)",
    )
    p.add_argument("--out-dir", required=True, help="records.jsonl and summary.json go here")
    p.add_argument(
        "--progress-interval", type=float, default=DEFAULT_INTERVAL_S, metavar="S",
        help="seconds between progress reports on stderr (a bar on a terminal)",
    )  # fmt: skip
    return p


def _expected_sample_rate(args: argparse.Namespace) -> int | None:
    """--expected-sample-rate, else the rate of the --deploy name's model."""
    if args.expected_sample_rate is not None or not args.deploy:
        return args.expected_sample_rate
    from thetalker.lifecycle.deploy import UnknownDeployError, resolve

    try:
        return resolve(args.deploy).sample_rate
    except UnknownDeployError as exc:
        raise OptionsError(f"--deploy: {exc}") from None


def _speaker(args: argparse.Namespace) -> str | None:
    """--speaker, else the speaker the --deploy name's model documents (if any)."""
    if args.speaker or not args.deploy:
        return args.speaker
    from thetalker.lifecycle.deploy import UnknownDeployError, resolve

    try:
        return resolve(args.deploy).speaker
    except UnknownDeployError as exc:
        raise OptionsError(f"--deploy: {exc}") from None


def require_speaker(opts: BenchOptions) -> None:
    """A CustomVoice run without an uploaded voice needs a speaker: no speaker is common to
    every server (the local server's `joe` is its own)."""
    if opts.task_type == "CustomVoice" and not (opts.speaker or opts.voice or opts.register_voice):
        raise OptionsError(
            f"--speaker: a CustomVoice run needs a speaker (or --deploy NAME whose model "
            f"documents one); {VOICES_LIST_HINT}"
        )


def refuse_sse_without_streaming(deploy_name: str | None, opts: BenchOptions) -> None:
    """A model served without streaming (OmniVoice on 0.30.0) answers SSE with one audio
    body: every request would fail as a content_type error, so refuse before sending."""
    if not deploy_name or opts.stream_format != "sse":
        return
    from thetalker.lifecycle.deploy import UnknownDeployError, resolve, sse_refusal

    try:
        refusal = sse_refusal(resolve(deploy_name), "--stream-format")
    except UnknownDeployError as exc:
        raise OptionsError(f"--deploy: {exc}") from None
    if refusal:
        raise OptionsError(refusal)


# BenchOptions fields whose flag has the same name (--max-new-tokens -> max_new_tokens).
_SAME_NAMES = (
    "model", "task_type", "voice", "ref_audio", "ref_text", "instructions", "max_new_tokens",
    "stream_format", "response_format", "sample_rate", "concurrency", "request_rate",
    "requests", "warmup", "seed", "save_audio_count", "workers", "max_error_rate",
    "register_voice", "api_key_env", "server",
)  # fmt: skip

# The agent mode's flags (thetalker.client.websocket), named as their fields.
_SAME_NAMES += (
    "protocol", "text_pace", "text_pace_unit", "text_pace_jitter", "text_trace",
    "split_granularity",
)  # fmt: skip


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    return BenchOptions(
        **{name: getattr(args, name) for name in _SAME_NAMES},
        base_url=args.base_url or f"http://{args.host}:{args.port}",
        speaker=_speaker(args),
        language=args.language or None,
        expected_sample_rate=_expected_sample_rate(args),
        timeout_s=args.timeout,
        save_audio_dir=args.save_audio,
        threshold_s=args.threshold,
        onset=OnsetSettings(**{name: getattr(args, f"onset_{name}") for name, *_ in _ONSET_FLAGS}),
        check_sample_rate=args.sample_rate is not None and not args.trust_sample_rate,
    )


def exit_status(summary: dict[str, Any], max_error_rate: float) -> int:
    """1 when nothing succeeded or the scored error rate is above the limit, else 0: the
    workflow's rule for a point too (thetalker.pipeline.verdicts)."""
    return 0 if point_failure(summary, max_error_rate) is None else 1


def progress_reporter(stream: Any, interval_s: float = DEFAULT_INTERVAL_S) -> ProgressReporter:
    """A bar rewritten in place on a terminal, else one line per report."""
    if stream.isatty():
        return TtyReporter(stream, prefix=f"{PROG}: ", interval_s=interval_s)

    def emit(line: str) -> None:
        print(f"{PROG}: {line}", file=stream, flush=True)

    return LineReporter(emit, interval_s)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.progress_interval > 0:
        parser.error(f"--progress-interval: must be > 0 (got {args.progress_interval})")
    try:
        prompts = load_prompts(args.texts_jsonl)
        opts = options_from_args(args)
        validate_options(opts)
        require_speaker(opts)
        refuse_sse_without_streaming(args.deploy, opts)
    except (PromptError, OptionsError) as exc:
        parser.error(str(exc))
    progress = progress_reporter(sys.stderr, args.progress_interval)
    try:
        summary = run_benchmark(opts, prompts, Path(args.out_dir), progress)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted; finished requests are in {args.out_dir}", file=sys.stderr)
        return 130
    except asyncio.CancelledError:  # SIGTERM: cancelled as Ctrl-C cancels it (run_benchmark)
        print(f"\n{PROG}: terminated; finished requests are in {args.out_dir}", file=sys.stderr)
        return 143
    except (SampleRateError, RequestRefusedError) as exc:  # refused for every stream: exit 2
        print(f"{PROG}: error: {redact_url(str(exc))}", file=sys.stderr)
        return 2
    except BenchError as exc:
        print(f"{PROG}: {redact_url(str(exc))}", file=sys.stderr)
        return 1
    print(f"{PROG}: {format_point_end(summary)}", file=sys.stderr)
    return exit_status(summary, opts.max_error_rate)


if __name__ == "__main__":
    sys.exit(main())
