"""The server's counters, rendered as Prometheus text (exposition format 0.0.4).

Prefix `thetalker:`. Its own families: requests by HTTP status, requests in flight, audio
seconds produced, and a histogram of the time from a request's arrival to its first audio
chunk written. The scheduler's gauges (active and waiting streams, pieces and sentences
queued, busy workers) are read at render time.

Beside them, vllm-omni 0.30.0's families (`vllm_omni/metrics/definitions.py`), same stems,
same meanings, so `thetalker.pipeline.server_metrics` reads both servers alike:
`audio_ttfp_s` (arrival to first audio chunk), `audio_underrun_s` and
`audio_continuity_ok_total{threshold_ms}` (the player-deficit math of
`thetalker.metrics.stream.compute_continuity_stats` on the chunks' production times, as
vllm-omni's serving layer does), `speech_stream_completed_total`,
`speech_stream_aborted_total{reason}` (closed, cancelled, error), `request_queue_wait_s`
(arrival to the scheduler's first piece on a worker: its queue, exactly),
`stage_gen_time_s{stage="0"}` (first piece on a worker to the last piece done),
`e2e_request_latency_s`, `requests_success_total{finished_reason}`,
`requests_failed_total{reason}`, and the gauges `num_requests_running` (streams admitted)
and `num_requests_waiting` (streams waiting for admission). The buckets are finer than
vllm-omni's (this server answers in tens of milliseconds); a reader states the resolution
from the buckets it finds.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from thetalker.server.scheduler import SchedulerStats

__all__ = ["PREFIX", "FIRST_CHUNK_BUCKETS_S", "LATENCY_BUCKETS_S", "Histogram", "ServerMetrics"]

PREFIX = "thetalker:"
FIRST_CHUNK_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Finer than vllm-omni's SECONDS_BUCKETS (this server answers in tenths of a second), to
# its 300 s top.
LATENCY_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75,
    1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
CONTINUITY_THRESHOLD_MS = 100  # vllm-omni's AUDIO_CONTINUITY_DEFAULT_THRESHOLD_S
AUDIO_LABELS = 'stage="0",replica="0"'


@dataclass
class Histogram:
    """One unlabelled-or-fixed-label histogram: counts per bucket, sum."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def render(self, name: str, help_text: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound:g}"}} {cumulative}')
        cumulative += self.counts[-1]
        tail = f"{{{labels}}}" if labels else ""
        return lines + [
            f'{name}_bucket{{{labels}{sep}le="+Inf"}} {cumulative}',
            f"{name}_sum{tail} {self.total:.6f}",
            f"{name}_count{tail} {cumulative}",
        ]


def _counter(name: str, help_text: str, values: Mapping[str, int], label: str) -> list[str]:
    # The 0.0.4 text format names a counter's family with its _total (as prometheus_client).
    lines = [f"# HELP {name}_total {help_text}", f"# TYPE {name}_total counter"]
    for key in sorted(values):
        lines.append(f'{name}_total{{{label}="{key}"}} {values[key]}')
    return lines


@dataclass
class ServerMetrics:
    """Plain counters, updated from the event loop only (no locks needed)."""

    requests_by_status: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    cancelled: int = 0
    audio_seconds: float = 0.0
    first_chunk_counts: list[int] = field(
        default_factory=lambda: [0] * (len(FIRST_CHUNK_BUCKETS_S) + 1)
    )
    first_chunk_sum_s: float = 0.0
    # vllm-omni's families (module docstring).
    ttfp: Histogram = field(default_factory=Histogram)
    underrun: Histogram = field(default_factory=Histogram)
    queue_wait: Histogram = field(default_factory=Histogram)
    gen_time: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    continuity_ok: int = 0
    streams_completed: int = 0
    streams_aborted: Counter[str] = field(default_factory=Counter)
    finished: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)

    def observe_first_chunk(self, seconds: float) -> None:
        self.first_chunk_counts[bisect.bisect_left(FIRST_CHUNK_BUCKETS_S, seconds)] += 1
        self.first_chunk_sum_s += seconds
        self.ttfp.observe(seconds)

    # The scheduler's observer (Scheduler.observer).
    def observe_queue_wait(self, seconds: float) -> None:
        self.queue_wait.observe(seconds)

    def observe_generation(self, seconds: float) -> None:
        self.gen_time.observe(seconds)

    def stream_completed(
        self, produced_s: Sequence[float], nbytes: Sequence[int], sample_rate: int
    ) -> None:
        """A stream that ended normally: its underrun and continuity from when each chunk
        was produced (seconds from the request's arrival) and its size."""
        from thetalker.metrics.stream import compute_continuity_stats

        self.streams_completed += 1
        if produced_s:
            stats = compute_continuity_stats(
                produced_s, nbytes, sample_rate, threshold_s=CONTINUITY_THRESHOLD_MS / 1e3
            )
            self.underrun.observe(stats.max_underrun_s)
            self.continuity_ok += int(stats.is_continuous)

    def stream_aborted(self, reason: str) -> None:
        self.streams_aborted[reason] += 1

    def request_finished(self, seconds: float, ok: bool, reason: str) -> None:
        """A request's end: e2e latency and its finish (`stop`, `abort`) or failure reason."""
        if ok:
            self.e2e.observe(seconds)
            self.finished[reason] += 1
        else:
            self.failed[reason] += 1

    def render(self, stats: SchedulerStats | None = None, workers: int = 0) -> str:
        stats = stats or SchedulerStats(0, 0, 0, 0, 0)
        p = PREFIX
        lines = [
            f"# HELP {p}requests_total Speech requests finished, by HTTP status.",
            f"# TYPE {p}requests_total counter",
        ]
        for status in sorted(self.requests_by_status):
            lines.append(
                f'{p}requests_total{{status="{status}"}} {self.requests_by_status[status]}'
            )
        lines += [
            f"# HELP {p}requests_cancelled_total Streams whose client left before the end.",
            f"# TYPE {p}requests_cancelled_total counter",
            f"{p}requests_cancelled_total {self.cancelled}",
            f"# HELP {p}requests_in_flight Speech requests being served or queued.",
            f"# TYPE {p}requests_in_flight gauge",
            f"{p}requests_in_flight {self.in_flight}",
            f"# HELP {p}streams_active Streams admitted to the scheduler.",
            f"# TYPE {p}streams_active gauge",
            f"{p}streams_active {stats.active}",
            f"# HELP {p}requests_waiting Streams waiting for admission (max_active_streams).",
            f"# TYPE {p}requests_waiting gauge",
            f"{p}requests_waiting {stats.waiting}",
            f"# HELP {p}pieces_queued Pieces cut from sentences and not yet synthesized.",
            f"# TYPE {p}pieces_queued gauge",
            f"{p}pieces_queued {stats.pieces_queued}",
            f"# HELP {p}sentences_queued Sentences of active or waiting streams not yet cut.",
            f"# TYPE {p}sentences_queued gauge",
            f"{p}sentences_queued {stats.sentences_queued}",
            f"# HELP {p}workers_busy Synthesis workers in use.",
            f"# TYPE {p}workers_busy gauge",
            f"{p}workers_busy {stats.workers_busy}",
            f"# HELP {p}workers Synthesis workers in the pool.",
            f"# TYPE {p}workers gauge",
            f"{p}workers {workers}",
            f"# HELP {p}audio_seconds_total Seconds of audio sent.",
            f"# TYPE {p}audio_seconds_total counter",
            f"{p}audio_seconds_total {self.audio_seconds:.6f}",
            f"# HELP {p}first_chunk_latency_seconds Request arrival to first audio chunk.",
            f"# TYPE {p}first_chunk_latency_seconds histogram",
        ]
        cumulative = 0
        for bound, count in zip(FIRST_CHUNK_BUCKETS_S, self.first_chunk_counts, strict=False):
            cumulative += count
            lines.append(f'{p}first_chunk_latency_seconds_bucket{{le="{bound:g}"}} {cumulative}')
        cumulative += self.first_chunk_counts[-1]
        lines += [
            f'{p}first_chunk_latency_seconds_bucket{{le="+Inf"}} {cumulative}',
            f"{p}first_chunk_latency_seconds_sum {self.first_chunk_sum_s:.6f}",
            f"{p}first_chunk_latency_seconds_count {cumulative}",
        ]
        lines += self._omni_families(stats)
        return "\n".join(lines) + "\n"

    def _omni_families(self, stats: SchedulerStats) -> list[str]:
        p, audio = PREFIX, AUDIO_LABELS
        lines = self.ttfp.render(
            f"{p}audio_ttfp_s", "Time from request arrival to first audio packet.", audio
        )
        lines += self.underrun.render(
            f"{p}audio_underrun_s", "Per-request worst-case player deficit in seconds.", audio
        )
        lines += [
            f"# HELP {p}audio_continuity_ok_total Requests whose worst underrun stayed below "
            "the threshold.",
            f"# TYPE {p}audio_continuity_ok_total counter",
            f'{p}audio_continuity_ok_total{{{audio},threshold_ms="{CONTINUITY_THRESHOLD_MS}"}} '
            f"{self.continuity_ok}",
            f"# HELP {p}speech_stream_completed_total Speech streams that completed normally.",
            f"# TYPE {p}speech_stream_completed_total counter",
            f"{p}speech_stream_completed_total {self.streams_completed}",
        ]
        lines += _counter(
            f"{p}speech_stream_aborted",
            "Speech streams ended before normal completion.",
            self.streams_aborted,
            "reason",
        )
        lines += self.queue_wait.render(
            f"{p}request_queue_wait_s", "Arrival to the scheduler's first piece on a worker."
        )
        lines += self.gen_time.render(
            f"{p}stage_gen_time_s",
            "Per-stage generation time: first piece on a worker to the last piece done.",
            'stage="0",stage_type="piper"',
        )
        lines += self.e2e.render(
            f"{p}e2e_request_latency_s", "Arrival to complete response, finished requests."
        )
        finished, failed = "Requests finished, by reason.", "Requests failed, by reason."
        lines += _counter(f"{p}requests_success", finished, self.finished, "finished_reason")
        lines += _counter(f"{p}requests_failed", failed, self.failed, "reason")
        lines += [
            f"# HELP {p}num_requests_running Streams admitted to the scheduler.",
            f"# TYPE {p}num_requests_running gauge",
            f"{p}num_requests_running {stats.active}",
            f"# HELP {p}num_requests_waiting Streams waiting for admission.",
            f"# TYPE {p}num_requests_waiting gauge",
            f"{p}num_requests_waiting {stats.waiting}",
        ]
        return lines
