"""What a server answers is never taken on trust (issue 36, the fourth red team): real HTTP
servers on loopback that redirect a credentialed request to another origin, trickle bytes
on a GET, or export a `/metrics` page that would count wrong in silence (a counter reset,
NaN and Inf, a series twice, two prefixes, a label holding `|` and a newline, buckets that
are not cumulative, a page larger than any real one)."""

from __future__ import annotations

import importlib
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.paths import REPO
from tests.support.records import make_record, write_point
from tests.support.scripted_server import Script, ScriptedServer
from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import Prompt
from thetalker.data.records import read_json, read_records
from thetalker.lifecycle.readiness import health_ok
from thetalker.pipeline.provenance import collect_provenance, write_provenance
from thetalker.pipeline.server_metrics import PointScrape, ScrapeError, scrape
from thetalker.report.server import server_rows, server_table

SECRET = "sk-redteam-4-do-not-leak"


class _Server:
    """A ThreadingHTTPServer on loopback answering GET and POST with `answer(handler)`;
    every request it saw is kept (`seen`: method, path, headers)."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                outer.seen.append((self.command, self.path, dict(self.headers)))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                answer(self)

            do_GET = do_POST = _any

            def log_message(self, *args: Any) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], _Server]]:
    started: list[_Server] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> _Server:
        started.append(_Server(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def _redirect_to(target: str, status: int = 302) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Location", target + h.path)
        h.send_header("Content-Length", "0")
        h.end_headers()

    return answer


def _json(h: BaseHTTPRequestHandler) -> None:
    body = b'{"version": "elsewhere"}'
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


# -- a credential never follows a redirect to another origin --------------------------------


def test_a_redirect_on_version_or_models_never_carries_the_key_to_another_origin(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_EXTERNAL_KEY", SECRET)
    elsewhere = servers(_json)
    server = servers(_redirect_to(elsewhere.base_url))
    handle = SimpleNamespace(base_url=server.base_url, api_key_env="MY_EXTERNAL_KEY")
    data = collect_provenance(server=handle, http_timeout_s=5)
    # The key went to the server it belongs to, and nowhere else.
    assert [h.get("Authorization") for _, _, h in server.seen] == [f"Bearer {SECRET}"] * 2
    assert elsewhere.seen == []
    for key in ("version", "models"):
        answer = data["server"][key]
        assert answer["status"] == 302 and answer["redirect"] == elsewhere.base_url
        assert answer["error"] == f"HTTP 302: a redirect to {elsewhere.base_url}, not followed"
        assert "body" not in answer
    assert data["server"]["server_version"] is None


def test_the_speech_request_records_a_redirect_and_follows_none(
    servers: Any,
    scripted_server: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("THETALKER_API_KEY", SECRET)
    scripted_server.default = Script(chunks=((0.0, 4800),))
    server = servers(_redirect_to(scripted_server.base_url, 307))
    opts = BenchOptions(
        base_url=server.base_url, requests=2, warmup=0, sample_rate=24000, concurrency=1
    )
    summary = run_benchmark(opts, [Prompt("a", "Hello."), Prompt("b", "There.")], tmp_path)
    records = list(read_records(tmp_path / "records.jsonl"))
    assert scripted_server.requests == []  # the other origin heard nothing
    assert [r["ok"] for r in records] == [False, False]
    for record in records:
        assert record["error"]["type"] == "http_status"
        assert record["error"]["message"] == (
            f"HTTP 307: a redirect to {scripted_server.base_url}, not followed"
        )
    assert summary["n_failed"] == 2


def test_the_agent_handshake_records_a_redirect_and_follows_none(
    servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # aiohttp's ws_connect takes no allow_redirects: it followed a 302 to the other origin
    # (dropping Authorization there, aiohttp's rule) and the record said only "HTTP 200".
    monkeypatch.setenv("THETALKER_API_KEY", SECRET)
    elsewhere = servers(_json)
    server = servers(_redirect_to(elsewhere.base_url))
    opts = BenchOptions(
        base_url=server.base_url,
        protocol="websocket",
        speaker="ok",
        sample_rate=24000,
        requests=2,
        warmup=0,
        concurrency=1,
        timeout_s=20.0,
    )
    summary = run_benchmark(opts, [Prompt("a", "Hello there.")], tmp_path)
    records = list(read_records(tmp_path / "records.jsonl"))
    assert elsewhere.seen == []  # the other origin heard nothing
    assert [h.get("Authorization") for _, _, h in server.seen] == [f"Bearer {SECRET}"] * 2
    assert [(r["ok"], r["http_status"]) for r in records] == [(False, 302)] * 2
    for record in records:
        assert record["error"]["type"] == "http_status"
        assert record["error"]["message"] == (
            "the WebSocket handshake was refused: "
            f"HTTP 302: a redirect to {elsewhere.base_url}, not followed"
        )
    assert summary["n_failed"] == 2


@pytest.mark.parametrize("target", ["http://elsewhere:99999", "http://[::1", "http://x:port"])
def test_a_redirect_to_no_readable_url_is_still_the_answer(
    servers: Any, scripted_server: ScriptedServer, tmp_path: Path, target: str
) -> None:
    # The Location is the server's to write: one no URL parser reads (a port out of range,
    # a broken IPv6 host) raised ValueError from the redirect's note, and provenance, the
    # speech request and the probe failed with a traceback instead of recording the answer.
    server = servers(_redirect_to(target))
    note = "HTTP 302: a redirect to an address that is no URL, not followed"
    data = collect_provenance(server=SimpleNamespace(base_url=server.base_url), http_timeout_s=5)
    for key in ("version", "models"):
        answer = data["server"][key]
        assert answer["status"] == 302 and answer["redirect"] is None
        assert answer["error"] == note
    opts = BenchOptions(base_url=server.base_url, requests=1, warmup=0, sample_rate=24000)
    run_benchmark(opts, [Prompt("a", "Hello.")], tmp_path)
    (record,) = read_records(tmp_path / "records.jsonl")
    assert record["error"]["type"] == "http_status" and record["error"]["message"] == note


def test_nan_in_a_version_answer_never_keeps_provenance_from_being_written(
    servers: Any, tmp_path: Path
) -> None:
    def answer(h: BaseHTTPRequestHandler) -> None:
        body = b'{"version": NaN, "max_model_len": Infinity, "data": [-Infinity]}'
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    server = servers(answer)
    write_provenance(tmp_path / "provenance.json", base_url=server.base_url, http_timeout_s=5)
    data = read_json(tmp_path / "provenance.json")  # standard JSON, written whole
    assert data["server"]["version"]["body"] == {
        "version": None,
        "max_model_len": None,
        "data": [None],
    }
    assert data["server"]["server_version"] is None


# -- every GET bounded by total time ------------------------------------------------------


class _Trickle:
    """A raw loopback server that answers any request with a status line, then one header
    byte every 0.2 s for a minute: each read returns in time, the answer never ends."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                for _ in range(300):
                    if self.stop.wait(0.2):
                        return
                    conn.sendall(b"a")
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


def _finishes(call: Callable[[], Any], bound_s: float = 30.0) -> Any:
    """`call()`'s result, run on a thread; fails the test if it is still running after
    `bound_s` (a hang, not a figure: the trickle lasts a minute)."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(call()), daemon=True)
    thread.start()
    thread.join(bound_s)
    assert not thread.is_alive(), f"still waiting after {bound_s} s"
    return out[0]


def test_a_trickling_server_cannot_hold_any_get() -> None:
    trickle = _Trickle()
    try:
        data = _finishes(lambda: collect_provenance(base_url=trickle.base_url, http_timeout_s=1))
        for key in ("version", "models"):
            assert data["server"][key]["error"] == "timed out: no whole answer within 1 s"

        def scraped() -> str:
            try:
                scrape(trickle.base_url, timeout_s=1)
            except ScrapeError as exc:
                return str(exc)
            return "answered"

        assert _finishes(scraped) == "GET /metrics failed: timed out: no whole answer within 1 s"
        assert _finishes(lambda: health_ok(trickle.base_url)) is False
    finally:
        trickle.close()


# -- /metrics taken on trust --------------------------------------------------------------

LABELS = 'model_name="m",replica="0",stage="1"'


def _page(
    completed: int, ttfp: tuple[int, int, int] = (0, 0, 0), extra: str = "", twice: str = ""
) -> str:
    """vllm-omni's families as it exports them; `twice`: a line repeated in the histogram."""
    a, b, inf = ttfp
    return f"""# TYPE vllm_omni:speech_stream_completed_total counter
vllm_omni:speech_stream_completed_total{{model_name="m"}} {completed}
# TYPE vllm_omni:audio_ttfp_s histogram
vllm_omni:audio_ttfp_s_bucket{{le="0.1",{LABELS}}} {a}
vllm_omni:audio_ttfp_s_bucket{{le="0.5",{LABELS}}} {b}
vllm_omni:audio_ttfp_s_bucket{{le="+Inf",{LABELS}}} {inf}
vllm_omni:audio_ttfp_s_count{{{LABELS}}} {inf}
vllm_omni:audio_ttfp_s_sum{{{LABELS}}} {0.2 * inf}
{twice}# TYPE vllm_omni:num_requests_running gauge
vllm_omni:num_requests_running{{model_name="m"}} 1
{extra}"""


class _MetricsServer:
    """A /metrics page the test changes between the scrapes."""

    def __init__(self, servers: Any, page: str) -> None:
        self.page = page
        self.server = servers(self._answer)
        self.base_url = self.server.base_url

    def _answer(self, h: BaseHTTPRequestHandler) -> None:
        body = self.page.encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; version=0.0.4")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


def _point(tmp_path: Path, metrics: _MetricsServer, after_page: str, sent: int) -> str:
    """One point's scrape (before, `after_page`, after) written beside `sent` ok records in
    a run's point folder, and server.md for it."""
    point_dir = write_point(tmp_path, "s", "m", 1, [make_record(i) for i in range(sent)]).parent
    scraper = PointScrape(metrics.base_url, interval_s=60.0, settle_s=0.0)
    scraper.begin(time.perf_counter())
    metrics.page = after_page
    scraper.end()
    scraper.write(point_dir)
    return server_table(server_rows([point_dir / "server_metrics.json"]))


def test_a_counter_reset_voids_its_family_for_the_point_and_the_table_says_so(
    servers: Any, tmp_path: Path
) -> None:
    metrics = _MetricsServer(servers, _page(6, (2, 4, 6)))
    # The server restarted mid-point: its totals start again (4 streams, 2 first packets).
    table = _point(tmp_path, metrics, _page(4, (1, 2, 2)), sent=10)
    data = read_json(tmp_path / "runs/s/m/c1/server_metrics.json")
    assert data["resets"] == ["audio_ttfp_s", "speech_stream_completed"]
    assert "speech_stream_completed" not in data["counters"]
    assert "audio_ttfp_s" not in data["histograms"]
    line = table.splitlines()[2]
    assert "lost" not in line and "4 / 10" not in line
    assert "n/a (void, see Left out)" in line
    assert "audio_ttfp_s: reset during the point" in line
    assert "speech_stream_completed: reset during the point" in line


def test_nan_and_inf_in_metrics_never_fail_the_point(servers: Any, tmp_path: Path) -> None:
    nan = """# TYPE vllm_omni:workers_busy gauge
vllm_omni:workers_busy{model_name="m"} NaN
vllm_omni:workers_busy{model_name="x"} 2
# TYPE vllm_omni:requests_success_total counter
vllm_omni:requests_success_total{model_name="m"} +Inf
"""
    metrics = _MetricsServer(servers, _page(0, extra=nan))
    table = _point(tmp_path, metrics, _page(3, (1, 2, 3), extra=nan), sent=3)
    data = read_json(tmp_path / "runs/s/m/c1/server_metrics.json")  # standard JSON: written
    assert data["available"] is True
    assert data["counters"]["speech_stream_completed"][0]["value"] == 3
    (busy,) = data["gauges"]["workers_busy"]
    assert busy["labels"] == {"model_name": "x"}
    assert "workers_busy: 1 non-finite sample(s) dropped" in data["notes"]
    assert data["void"] == {"requests_success": "a counter value inf is no finite number"}
    assert "3 / 3" in table.splitlines()[2]


def test_a_series_twice_or_two_prefixes_are_not_counted_twice(servers: Any, tmp_path: Path) -> None:
    twice = f"vllm_omni:audio_ttfp_s_count{{{LABELS}}} 3\n"
    other_prefix = """# TYPE thetalker:speech_stream_completed_total counter
thetalker:speech_stream_completed_total{model_name="m"} 3
"""
    metrics = _MetricsServer(servers, _page(0) + other_prefix)
    table = _point(tmp_path, metrics, _page(3, (1, 2, 3), twice=twice) + other_prefix, sent=3)
    data = read_json(tmp_path / "runs/s/m/c1/server_metrics.json")
    assert data["prefix"] == "vllm_omni:"
    assert data["counters"]["speech_stream_completed"] == [
        {"labels": {"model_name": "m"}, "value": 3.0}
    ]
    assert "appears twice" in data["void"]["audio_ttfp_s"]
    assert any("'thetalker:' left out" in note for note in data["notes"])
    line = table.splitlines()[2]
    assert "3 / 3" in line and "audio_ttfp_s: the series _count" in line


def test_non_cumulative_buckets_give_no_quantile_and_the_table_says_so(
    servers: Any, tmp_path: Path
) -> None:
    metrics = _MetricsServer(servers, _page(0))
    table = _point(tmp_path, metrics, _page(3, (3, 1, 3)), sent=3)
    line = table.splitlines()[2]
    assert "audio_ttfp_s: its buckets are not cumulative" in line
    rows = server_rows([tmp_path / "runs/s/m/c1/server_metrics.json"])
    assert rows[0]["server_ttfp_p50_s"] is None


def test_a_label_with_a_pipe_and_a_newline_keeps_server_md_one_row_a_point(
    servers: Any, tmp_path: Path
) -> None:
    stage = 'stage="a|b\\nc"'
    gen = f"""# TYPE vllm_omni:stage_gen_time_s histogram
vllm_omni:stage_gen_time_s_bucket{{le="1",{stage}}} COUNT
vllm_omni:stage_gen_time_s_bucket{{le="+Inf",{stage}}} COUNT
vllm_omni:stage_gen_time_s_count{{{stage}}} COUNT
vllm_omni:stage_gen_time_s_sum{{{stage}}} COUNT
# TYPE vllm_omni:audio_continuity_ok_total counter
vllm_omni:audio_continuity_ok_total{{threshold_ms="x|y"}} COUNT
"""
    metrics = _MetricsServer(servers, _page(0, extra=gen.replace("COUNT", "0")))
    table = _point(tmp_path, metrics, _page(3, (1, 2, 3), extra=gen.replace("COUNT", "3")), 3)
    head, _, row = table.splitlines()[:3]
    assert row.count(" | ") == head.count(" | ")  # no cell broke the row
    assert "a\\|b c: 1.000" in row


def test_a_metrics_page_past_its_bound_is_no_metrics(
    servers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = importlib.import_module("thetalker.pipeline.server_metrics.scrape")
    monkeypatch.setattr(module, "MAX_PAGE_BYTES", 4096)
    metrics = _MetricsServer(servers, _page(0) + "# padding\n" * 1000)
    with pytest.raises(ScrapeError, match="answer larger than 4096 bytes"):
        scrape(metrics.base_url, timeout_s=5)


# -- SIGTERM stops a run as Ctrl-C does, an external server's bench job too -----------------


def test_sigterm_to_an_external_systems_bench_job_keeps_records_and_a_summary(
    scripted_server: ScriptedServer, tmp_path: Path
) -> None:
    """An external server has no launcher guard to turn SIGTERM into an exit: the run is
    cancelled as Ctrl-C cancels it (in-flight requests `cancelled`, summary.json written),
    and the job exits 143 with one line, not a traceback."""
    from tests.support.bench_jobs import job

    scripted_server.default = Script(chunks=((0, 4800), (60.0, 4800)))  # each one stalls
    spec = job(
        tmp_path,
        launcher="external",
        server="vllm-omni",
        base_url=scripted_server.base_url,
        model_id="scripted-model",
        sample_rate=24000,
        concurrency=(4,),
        requests={4: 8},
        capacity=None,
    )
    records = tmp_path / "run" / "c4" / "records.jsonl"
    cmd = [sys.executable, "-m", "thetalker.pipeline.serve_and_sweep", "--job", spec.to_json()]
    cmd += ["--records", str(records), "--server-log", str(tmp_path / "server.log")]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while sum(bool(log.send_times) for log in scripted_server.requests) < 4:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the requests never started"
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "terminated; finished requests are in" in err
    kept = list(read_records(records))
    assert len(kept) == 4 and {r["error"]["type"] for r in kept} == {"cancelled"}
    assert read_json(records.parent / "summary.json")["complete"] is False
