"""The server's own view of one point: `/metrics` read just before and just after the
scored requests, and its gauges sampled in between, written as `server_metrics.json`.

The clock is the records' own: times are seconds from the run's origin (`perf_counter`,
as `t_submit_s`), so a gauge sample lines up with the requests in flight at that moment.
The before-scrape is taken after the warmup and the sample-rate probe, the after-scrape
once the last scored request has ended, so the deltas count the scored requests only.

A server kind whose backend (`thetalker.backends`) declares no `metrics_path` (Nari, an
external API) is not asked; a server that answers none (404, refused, not Prometheus text,
or none of the families `families.PREFIXES` names: SGLang-Omni today) is written down
alike: `{"available": false, "reason": ...}`, no server metrics, never an error.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from thetalker.pipeline.server_metrics.families import (
    Snapshot,
    counter_deltas,
    histogram_deltas,
    parse_metrics,
)
from thetalker.util.http_get import GetError, http_get

__all__ = [
    "FILE_NAME",
    "VERSION",
    "GAUGE_INTERVAL_S",
    "ScrapeError",
    "scrape",
    "PointScrape",
    "unavailable",
]

FILE_NAME = "server_metrics.json"
VERSION = 1
GAUGE_INTERVAL_S = 1.0  # one small GET per second: cheap beside the load it watches
TIMEOUT_S = 5.0  # a whole answer, not each read: a trickling server cannot hold the job
# vLLM's page is some hundreds of KiB; past this it is not a page TheTalker reads.
MAX_PAGE_BYTES = 16 << 20
# The after-scrape waits (at most this long) until the stream counters stop moving: a
# server may count a stream's end just after its last byte left.
SETTLE_S = 2.0
SETTLE_STEP_S = 0.1


class ScrapeError(Exception):
    """`/metrics` gave nothing TheTalker reads; the message is the reason."""


def scrape(base_url: str, timeout_s: float = TIMEOUT_S, path: str = "/metrics") -> Snapshot:
    """GET {base_url}{path} and parse it; ScrapeError (one line) when there is none. The
    GET is bounded by total time and by `MAX_PAGE_BYTES`, and follows no redirect
    (thetalker.util.http_get)."""
    url = base_url.rstrip("/") + path
    try:
        answer = http_get(url, timeout_s, MAX_PAGE_BYTES)
    except GetError as exc:
        raise ScrapeError(f"GET /metrics failed: {exc}") from None
    if answer.status != 200:
        what = " (a redirect, not followed)" if answer.redirect else ""
        raise ScrapeError(f"GET /metrics answered HTTP {answer.status}{what}")
    text = answer.body.decode("utf-8", "replace")
    try:
        snapshot = parse_metrics(text)
    except Exception as exc:  # whatever the parser refuses: not metrics we can read
        raise ScrapeError(f"/metrics is not Prometheus text: {exc}") from None
    if not snapshot.families:
        raise ScrapeError("/metrics has no vllm_omni:, vllm:omni_ or thetalker: families")
    return snapshot


def unavailable(reason: str) -> dict[str, Any]:
    """What a point without server metrics records."""
    return {"version": VERSION, "available": False, "reason": reason}


def _stream_ends(snapshot: Snapshot) -> float:
    total = 0.0
    for stem in ("speech_stream_completed", "speech_stream_aborted"):
        found = snapshot.of(stem)
        total += sum(s.value for s in found[1]) if found else 0.0
    return total


def _gauges(snapshot: Snapshot) -> dict[str, dict[tuple, float]]:
    return {
        stem: {s.labels: s.value for s in samples}
        for stem, (kind, samples) in snapshot.families.items()
        if kind == "gauge"
    }


class PointScrape:
    """Scrape around one point's scored requests: `begin(t_origin)` before the first,
    `end()` after the last, `result()` the JSON of `server_metrics.json`.

    Never raises for the server's sake: a server without metrics, or one that stops
    answering, is written down as such."""

    def __init__(
        self,
        base_url: str,
        interval_s: float = GAUGE_INTERVAL_S,
        timeout_s: float = TIMEOUT_S,
        settle_s: float = SETTLE_S,
        path: str | None = "/metrics",
    ) -> None:
        self.base_url = base_url
        self.path = path  # None: the server kind exports none (thetalker.backends)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.settle_s = settle_s
        self._origin = 0.0
        self._before: Snapshot | None = None
        self._after: Snapshot | None = None
        self._t_before: float | None = None
        self._t_after: float | None = None
        self._reason: str | None = None
        self._gauges: dict[str, dict[tuple, list[list[float]]]] = {}
        self._errors = 0
        self._notes: set[str] = set()  # what the pages held that is not read (Snapshot.notes)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _now(self) -> float:
        return time.perf_counter() - self._origin

    def _sample(self, snapshot: Snapshot, t: float) -> None:
        with self._lock:
            self._notes.update(snapshot.notes)
            for stem, values in _gauges(snapshot).items():
                per_stem = self._gauges.setdefault(stem, {})
                for labels, value in values.items():
                    per_stem.setdefault(labels, []).append([round(t, 6), value])

    def begin(self, t_origin: float) -> None:
        """The before-scrape (on the run's clock `t_origin`), then gauges every interval."""
        self._origin = t_origin
        if self.path is None:
            self._reason = "the server kind exports no /metrics"
            return
        try:
            self._t_before = self._now()
            self._before = scrape(self.base_url, self.timeout_s, self.path)
        except ScrapeError as exc:
            self._reason = str(exc)
            return
        self._sample(self._before, self._t_before)
        self._thread = threading.Thread(target=self._loop, name="server-metrics", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            t = self._now()
            try:
                snapshot = scrape(self.base_url, self.timeout_s, self.path or "")
            except ScrapeError:
                self._errors += 1
                continue
            self._sample(snapshot, t)

    def end(self) -> None:
        """The after-scrape, once the stream counters have settled."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s)
        if self._before is None or self._after is not None:
            return
        deadline = time.monotonic() + self.settle_s
        last: Snapshot | None = None
        while True:
            try:
                t, snapshot = self._now(), scrape(self.base_url, self.timeout_s, self.path or "")
            except ScrapeError as exc:
                if last is None:
                    self._reason = f"after the point: {exc}"
                    return
                break
            if last is not None and _stream_ends(snapshot) == _stream_ends(last):
                break
            last, self._t_after = snapshot, t
            if time.monotonic() >= deadline:
                break
            time.sleep(SETTLE_STEP_S)
        self._after = last
        assert self._t_after is not None
        self._sample(last, self._t_after)

    def result(self) -> dict[str, Any]:
        """server_metrics.json: deltas of counters and histograms, gauge series."""
        if self._before is None or self._after is None:
            return unavailable(self._reason or "the point's scored requests never ran")
        counters, reset_c = counter_deltas(self._before, self._after)
        histograms, reset_h = histogram_deltas(self._before, self._after)
        with self._lock:
            gauges = {
                stem: [{"labels": dict(k), "series": series} for k, series in rows.items()]
                for stem, rows in sorted(self._gauges.items())
            }
        return {
            "version": VERSION,
            "available": True,
            "prefix": self._after.prefix,
            "clock": "seconds from the run's origin, as the records' t_submit_s",
            "t_before_s": round(self._t_before or 0.0, 6),
            "t_after_s": round(self._t_after or 0.0, 6),
            "gauge_interval_s": self.interval_s,
            "scrape_errors": self._errors,
            # Families whose deltas are void for the point (thetalker.pipeline.server_metrics.
            # families): a reset, or left out of a scrape, with why.
            "resets": sorted({*reset_c, *reset_h}),
            "void": {**self._before.void, **self._after.void},
            "notes": sorted(self._notes),
            "counters": counters,
            "histograms": histograms,
            "gauges": gauges,
        }

    def note(self, command: Any) -> dict[str, Any]:
        """What provenance.json says of it: whether the server had metrics, why not, and
        whether a vllm-omni command line asked for the stats (`--log-stats`)."""
        data = self.result()
        argv = [str(a) for a in command or []]
        return {
            "file": FILE_NAME,
            "available": data["available"],
            "reason": data.get("reason"),
            "prefix": data.get("prefix"),
            # vllm-omni's own switch; other servers have none (null).
            "log_stats": ("--log-stats" in argv) if "--omni" in argv else None,
            "gauge_interval_s": self.interval_s,
        }

    def write(self, point_dir: Path) -> dict[str, Any]:
        """Write server_metrics.json. What a server exports never fails the job: a value
        JSON cannot hold (or anything else the server's page leads to) writes the file as
        unavailable, with the reason."""
        from thetalker.data.record_writes import write_json

        try:
            data = self.result()
            write_json(Path(point_dir) / FILE_NAME, data)
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
            data = unavailable(f"the server's metrics could not be written: {exc}")
            write_json(Path(point_dir) / FILE_NAME, data)
        return data
