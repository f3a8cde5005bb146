"""The server's counters, rendered as Prometheus text (exposition format 0.0.4).

Four families, prefix `thetalker:` (vllm-omni uses `vllm_omni:`): requests by HTTP status,
requests in flight, audio seconds produced, and a histogram of the time from a request's
arrival to its first audio chunk written. The scheduler's gauges (active and waiting streams,
pieces and sentences queued, busy workers) are read at render time.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

from thetalker.server.scheduler import SchedulerStats

__all__ = ["PREFIX", "FIRST_CHUNK_BUCKETS_S", "ServerMetrics"]

PREFIX = "thetalker:"
FIRST_CHUNK_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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

    def observe_first_chunk(self, seconds: float) -> None:
        self.first_chunk_counts[bisect.bisect_left(FIRST_CHUNK_BUCKETS_S, seconds)] += 1
        self.first_chunk_sum_s += seconds

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
        return "\n".join(lines) + "\n"
