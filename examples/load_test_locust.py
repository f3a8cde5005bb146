"""Open-loop load on a speech server with locust: arrivals at a rate, not users waiting.

    locust -f examples/load_test_locust.py --headless -u 1 -r 1 -t 60s \
        --host http://127.0.0.1:8091 --arrival-rate 4 --arrival-seed 42 --csv results/locust
    locust -f examples/load_test_locust.py --headless -u 1 -r 1 -t 60s --port 8091 --voice joe

The server: locust's `--host` (a base URL), or `--base-url` (the other examples' name,
overrides `--host`), with `--port` replacing the port (default http://127.0.0.1:8091). The
voice: `--voice NAME` (an uploaded or built-in voice, sent as "voice") or `--speaker NAME`
(default joe, the embedded server's); `--task-type` (default CustomVoice).

A closed-loop user sends its next request only after the last one finished, so a slow
server gets fewer requests and looks better than it is. Here each locust user is an arrival
process instead: it draws exponential gaps (a Poisson process) from a seeded generator and
starts every request in a greenlet of its own without waiting for it, so requests keep
arriving at `--arrival-rate` per second (all users together) however slow the answers are.
`--max-in-flight` bounds the open requests per user; an arrival beyond it is recorded as a
failure ("dropped"), never delayed.

Two rows per request name in locust's statistics, from custom events:
  TTFA   time to the first audio byte of the stream
  TOTAL  time to the end of the stream (response length = audio bytes)
A failed request (HTTP error, empty or broken stream) is a TOTAL failure.

The run is reproducible for a given seed and user count: user k draws from
Random("<seed>:<k>") both its gaps and its prompts (from `--prompts-file`).
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import gevent
import requests
from gevent.pool import Pool
from locust import User, constant, events, task
from requests.adapters import HTTPAdapter

from thetalker.data.prompts import Prompt, load_prompts

__all__ = ["OpenLoopSpeaker", "server_url"]

DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent / "prompts/seed_tts_eval_en_100.jsonl"
REQUEST_NAME = "/v1/audio/speech"
DEFAULT_BASE_URL = "http://127.0.0.1:8091"
_user_numbers = itertools.count()


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group = parser.add_argument_group("open-loop speech load (examples/load_test_locust.py)")
    group.add_argument("--arrival-rate", type=float, default=1.0, help="requests/s, all users")
    group.add_argument("--arrival-seed", type=int, default=42, help="seeds gaps and prompts")
    group.add_argument("--prompts-file", default=str(DEFAULT_PROMPTS), help="prompts JSONL")
    group.add_argument("--base-url", default="", help="server base URL (overrides --host)")
    group.add_argument("--port", type=int, default=None, help="server port (replaces the URL's)")
    group.add_argument("--speaker", default="joe", help="preset voice (Qwen3-TTS: ryan)")
    group.add_argument("--voice", default="", help="an uploaded voice NAME (sent as voice)")
    group.add_argument("--task-type", default="CustomVoice", help="request task_type")
    group.add_argument("--model-name", default="", help='sent as "model" when set')
    group.add_argument("--max-in-flight", type=int, default=256, help="open requests per user")
    group.add_argument("--request-timeout", type=float, default=120.0, help="seconds")
    group.add_argument("--drain-timeout", type=float, default=10.0, help="wait at stop, s")


def server_url(base: str | None, port: int | None) -> str:
    """`http://host:port` from a base URL or a bare host, `--port` replacing the port."""
    url = (base or DEFAULT_BASE_URL).rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if port is not None:
        parts = urlsplit(url)
        url = urlunsplit((parts.scheme, f"{parts.hostname}:{port}", parts.path, "", ""))
    return url


class OpenLoopSpeaker(User):
    """One Poisson arrival process; its requests run in their own greenlets."""

    wait_time = constant(0)  # the task paces itself: it sleeps until the next arrival

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        if opts.arrival_rate <= 0:
            raise ValueError(f"--arrival-rate must be positive, got {opts.arrival_rate}")
        users = max(1, int(getattr(opts, "num_users", 1) or 1))
        number = next(_user_numbers)
        self.rate = opts.arrival_rate / users
        self.rng = random.Random(f"{opts.arrival_seed}:{number}")
        self.prompts: list[Prompt] = load_prompts(opts.prompts_file)
        self.pool = Pool(opts.max_in_flight)
        self.http = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=opts.max_in_flight)
        self.http.mount("http://", adapter)
        self.http.mount("https://", adapter)
        self.url = server_url(opts.base_url or self.host, opts.port) + REQUEST_NAME
        self.next_arrival = time.monotonic()

    @task
    def arrive(self) -> None:
        # Scheduled on absolute times, so time spent spawning never slows the rate.
        self.next_arrival += self.rng.expovariate(self.rate)
        gevent.sleep(max(0.0, self.next_arrival - time.monotonic()))
        prompt = self.rng.choice(self.prompts)
        if self.pool.full():
            self._fire("TOTAL", 0.0, 0, RuntimeError("dropped: --max-in-flight reached"))
            return
        self.pool.spawn(self._speak, prompt)

    def on_stop(self) -> None:
        opts = self.environment.parsed_options
        self.pool.join(timeout=opts.drain_timeout)  # let answers in flight finish
        self.pool.kill(block=True, timeout=5)
        self.http.close()

    def _body(self, prompt: Prompt) -> dict[str, Any]:
        opts = self.environment.parsed_options
        body: dict[str, Any] = {
            "input": prompt.text,
            "task_type": opts.task_type,
            "language": "English",
            "stream": True,
            "stream_format": "audio",
            "response_format": "pcm",
        }
        if opts.voice:
            body["voice"] = opts.voice
        else:
            body["speaker"] = opts.speaker
        if opts.model_name:
            body["model"] = opts.model_name
        return body

    def _speak(self, prompt: Prompt) -> None:
        timeout = self.environment.parsed_options.request_timeout
        t0 = time.perf_counter()
        first_s: float | None = None
        nbytes = 0
        try:
            with self.http.post(
                self.url, json=self._body(prompt), stream=True, timeout=(10.0, timeout)
            ) as response:
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
                for piece in response.iter_content(chunk_size=None):
                    if piece:
                        if first_s is None:
                            first_s = time.perf_counter() - t0
                        nbytes += len(piece)
            total_s = time.perf_counter() - t0
            if first_s is None:
                raise RuntimeError("the response carried no audio")
            if nbytes % 2:
                raise RuntimeError("the stream ended with half a sample")
        except Exception as exc:  # every failure is a record, never a crash of the user
            self._fire("TOTAL", time.perf_counter() - t0, nbytes, exc)
            return
        self._fire("TTFA", first_s, 0)
        self._fire("TOTAL", total_s, nbytes)

    def _fire(
        self, kind: str, seconds: float, length: int, exception: BaseException | None = None
    ) -> None:
        self.environment.events.request.fire(
            request_type=kind,
            name=REQUEST_NAME,
            response_time=seconds * 1000.0,
            response_length=length,
            exception=exception,
            context={},
        )
