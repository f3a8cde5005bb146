"""Synthetic records of the current schema, for the scale benchmark and the golden tables.

Each record is built the way the client builds one: a timeline of reads (some ending
mid-frame), grouped into server chunks, arriving with a seeded mix of steady streaming,
bursts and gaps; its figures are `thetalker.metrics.request_metrics` of that timeline and
of a PCM signal with a seeded silent lead-in. Some requests fail (a truncated stream keeps
its partial timeline; an HTTP error has none), some are dropped open-loop arrivals, and an
agent-mode point (`protocol: websocket`) has sessions with text pieces and server events.

`templates` builds a few hundred distinct records (the expensive part); `write_point`
cycles them with new indices and send times into a point of any size, as a user's long
run would look: `benchmarks/analysis_scale.py` and `tests/unit/test_analysis_golden.py`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from thetalker.data.records import SCHEMA_VERSION, Record, error_info
from thetalker.metrics import request_metrics
from thetalker.metrics.agent import agent_figures

__all__ = ["templates", "write_point", "write_matrix", "SAMPLE_RATE"]

SAMPLE_RATE = 24000
_FRAME = 2


def _pcm(rng: random.Random, n_bytes: int) -> np.ndarray:
    """A silent lead-in (sometimes the whole stream: inaudible), then a tone."""
    n = n_bytes // _FRAME
    pcm = np.zeros(n, dtype=np.int16)
    if rng.random() < 0.03:
        return pcm
    lead = min(n, int(rng.uniform(0.0, 0.3) * SAMPLE_RATE))
    t = np.arange(n - lead) / SAMPLE_RATE
    pcm[lead:] = (8000 * np.sin(2 * np.pi * 220.0 * t)).astype(np.int16)
    return pcm


def _reads(rng: random.Random, n_reads: int) -> tuple[list[float], list[int]]:
    """Read arrivals (s from send) and sizes: steady, bursty or gappy streaming."""
    style = rng.choice(("steady", "steady", "bursty", "gappy"))
    t = rng.uniform(0.05, 0.9)  # first audio
    arrivals, sizes = [], []
    for _ in range(n_reads):
        size = rng.choice((960, 1920, 3840, 4800)) + (1 if rng.random() < 0.05 else 0)
        arrivals.append(t)
        sizes.append(size)
        audio = size / (SAMPLE_RATE * _FRAME)
        if style == "steady":
            t += audio * rng.uniform(0.3, 0.9)
        elif style == "bursty":
            t += 0.0005 if rng.random() < 0.7 else audio * rng.uniform(1.0, 3.0)
        else:
            t += audio * rng.uniform(0.2, 0.8) + (
                rng.uniform(0.05, 0.6) if rng.random() < 0.04 else 0
            )
    if sum(sizes) % _FRAME:  # the stream itself is whole frames (odd reads pair up)
        sizes[-1] += 1
    return arrivals, sizes


def _chunks(rng: random.Random, arrivals: list[float], sizes: list[int]):
    """Server chunks: runs of 1-6 reads, each arriving with its last read."""
    chunk_t, chunk_b, i = [], [], 0
    while i < len(arrivals):
        k = min(len(arrivals) - i, rng.randint(1, 6))
        chunk_t.append(arrivals[i + k - 1])
        chunk_b.append(sum(sizes[i : i + k]))
        i += k
    return chunk_t, chunk_b


def _http_record(rng: random.Random, index: int, n_reads: int) -> dict[str, Any]:
    text = " ".join(rng.choice(("hello", "there", "the", "quick", "voice")) for _ in range(12))
    fate = rng.random()
    arrivals, sizes = _reads(rng, n_reads)
    error = None
    ok = True
    status: int | None = 200
    if fate < 0.02:  # refused before any audio
        arrivals, sizes, ok, status = [], [], False, 503
        error = error_info("http_status", "HTTP 503: busy", 503)
    elif fate < 0.05:  # cut short: keeps what came
        cut = rng.randint(1, max(1, n_reads // 2))
        arrivals, sizes, ok = arrivals[:cut], sizes[:cut], False
        if sum(sizes) % _FRAME:
            sizes[-1] += 1
        error = error_info("truncated", "connection closed mid-stream")
    chunk_t, chunk_b = _chunks(rng, arrivals, sizes)
    pcm = _pcm(rng, sum(sizes))
    figures = request_metrics(
        chunk_t, chunk_b, pcm, SAMPLE_RATE, read_arrival_s=arrivals, read_bytes=sizes
    )
    wall = (arrivals[-1] if arrivals else 0.0) + rng.uniform(0.001, 0.05)
    sent = rng.uniform(0.0005, 0.004)
    ttfa = figures["ttfa_s"]
    record = Record(
        request_index=index,
        sample_id=f"s{index:04d}",
        text=text,
        text_chars=len(text),
        warmup=False,
        ok=ok,
        error=error,
        http_status=status,
        t_submit_s=0.0,
        schedule_lag_s=None,
        t_connect_s=0.0 if index % 7 else 0.002,
        connection_reused=bool(index % 7),
        connect_s=sent / 2,
        request_sent_s=sent,
        ttfa_from_sent_s=None if ttfa is None else ttfa - sent,
        wall_s=wall,
        chunk_arrival_s=chunk_t,
        chunk_bytes=chunk_b,
        read_arrival_s=arrivals,
        read_bytes=sizes,
        sample_rate=SAMPLE_RATE,
        **{**figures, "continuity_ok": bool(figures["continuity_ok"] and ok)},
    )
    return record.to_json()


def _ws_record(rng: random.Random, index: int, n_frames: int) -> dict[str, Any]:
    words = [rng.choice(("Hello", "there.", "The", "quick", "voice.")) for _ in range(10)]
    pieces = [words[0]] + [" " + w for w in words[1:]]
    text = "".join(pieces)
    piece_t = [round(0.01 + 0.05 * k, 6) for k in range(len(pieces))]
    done_t = piece_t[-1] + 0.001
    arrivals, sizes = _reads(rng, n_frames)
    sizes = [s - s % _FRAME or _FRAME for s in sizes]
    arrivals = [a + 0.1 for a in arrivals]
    units = [(0, "Hello there."), (n_frames // 2, "The quick voice.")]
    pcm = _pcm(rng, sum(sizes))
    figures = request_metrics(arrivals, sizes, pcm, SAMPLE_RATE)
    agent = agent_figures(piece_t, pieces, done_t, arrivals, sizes, units, SAMPLE_RATE)
    events = [
        {"type": "audio.start", "t_s": arrivals[f] - 0.001, "frames_before": f, "sentence_index": k}
        for k, (f, _) in enumerate(units)
    ] + [{"type": "session.done", "t_s": arrivals[-1] + 0.01, "frames_before": n_frames}]
    record = Record(
        request_index=index,
        sample_id=f"w{index:04d}",
        text=text,
        text_chars=len(text),
        warmup=False,
        ok=True,
        error=None,
        http_status=101,
        t_submit_s=0.0,
        t_connect_s=0.003,
        connect_s=0.003,
        request_sent_s=0.003,
        ttfa_from_sent_s=figures["ttfa_s"] - 0.003,
        wall_s=arrivals[-1] + 0.01,
        chunk_arrival_s=arrivals,
        chunk_bytes=sizes,
        sample_rate=SAMPLE_RATE,
        protocol="websocket",
        split_granularity="sentence",
        t_open_s=0.003,
        text_piece_s=piece_t,
        text_pieces=pieces,
        t_input_done_s=done_t,
        server_events=events,
        **figures,
        **agent,
    )
    return record.to_json()


def templates(n: int, reads: int, seed: int = 0, websocket: bool = False) -> list[dict]:
    """`n` distinct records of about `reads` reads each (frames, for websocket)."""
    rng = random.Random(f"thetalker.synthetic:{seed}:{websocket}")
    build = _ws_record if websocket else _http_record
    return [build(rng, i, max(1, int(reads * rng.uniform(0.7, 1.3)))) for i in range(n)]


def write_point(
    path: Path,
    records: Sequence[dict],
    n: int,
    warmup: int = 2,
    concurrency: int = 8,
    seed: int = 0,
    rate: float | None = None,
) -> Path:
    """A point of `warmup + n` records cycled from `records`: new indices, send times that
    keep `concurrency` streams in flight (or Poisson arrivals at `rate`, with a few dropped),
    lines in finishing order as the client writes them."""
    rng = random.Random(f"thetalker.synthetic.point:{seed}")
    path.parent.mkdir(parents=True, exist_ok=True)
    free = [0.0] * concurrency
    t_next = 0.0
    out = []
    for i in range(warmup + n):
        base = records[(i * 7 + seed) % len(records)]
        rec = dict(base, request_index=i, warmup=i < warmup)
        if rate is None:
            slot = min(range(concurrency), key=free.__getitem__)
            t = free[slot] + 0.001
            free[slot] = t + float(rec["wall_s"])
        else:
            t_next += rng.expovariate(rate)
            t = t_next
            rec["schedule_lag_s"] = rng.uniform(0.0, 0.002)
            if rng.random() < 0.01 and i >= warmup:
                rec = _dropped(rec)
        rec["t_submit_s"] = t
        out.append((t + float(rec["wall_s"]), rec))
    out.sort(key=lambda pair: pair[0])
    with path.open("w", encoding="utf-8") as fh:
        for _, rec in out:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return path


def _dropped(rec: dict) -> dict:
    empty = request_metrics([], [], b"", SAMPLE_RATE)
    return dict(
        rec,
        ok=False,
        error=error_info("dropped", "max_in_flight reached"),
        http_status=None,
        t_connect_s=None,
        connect_s=None,
        request_sent_s=None,
        ttfa_from_sent_s=None,
        wall_s=0.0,
        chunk_arrival_s=[],
        chunk_bytes=[],
        read_arrival_s=None,
        read_bytes=None,
        schedule_lag_s=None,
        **empty,
    )


def write_summary(
    point_dir: Path, concurrency: int | None, rate: float | None = None, protocol: str = "http"
) -> None:
    """The few summary.json fields `thetalker-compare` reads beside the records (which it
    checks against them: the protocol is the records')."""
    (point_dir / "summary.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "concurrency": concurrency,
                "request_rate": rate,
                "sample_rate": SAMPLE_RATE,
                "options": {"model": "synthetic", "protocol": protocol},
            }
        )
    )


def write_matrix(
    root: Path,
    systems: Sequence[str],
    models: Sequence[str],
    concurrency: Sequence[int],
    n: int,
    reads: int,
    agent_system: str | None = None,
    rates: Sequence[float] = (),
    seed: int = 0,
) -> list[Path]:
    """A results folder: `root/runs/{system}/{model}/{c<N>|r<R>}/records.jsonl` with a
    summary.json, server_metrics.json (none available) and each job's search.json;
    `agent_system`'s points are agent-mode sessions. Returns the records files."""
    http = templates(300, reads, seed)
    ws = templates(100, max(4, reads // 4), seed, websocket=True) if agent_system else []
    files = []
    for s, system in enumerate(systems):
        for m, model in enumerate(models):
            run = root / "runs" / system / model
            loads = [(c, None) for c in concurrency] + [(None, r) for r in rates]
            for k, (c, r) in enumerate(loads):
                label = f"c{c}" if c is not None else f"r{r:g}"
                point = run / label
                pool = ws if system == agent_system else http
                path = write_point(
                    point / "records.jsonl",
                    pool,
                    n,
                    concurrency=c or 8,
                    seed=seed + 1000 * s + 100 * m + k,
                    rate=r,
                )
                write_summary(point, c, r, pool[0].get("protocol", "http"))
                (point / "server_metrics.json").write_text(
                    json.dumps({"version": 1, "available": False, "reason": "synthetic run"})
                )
                files.append(path)
            (run / "search.json").write_text(
                json.dumps(
                    {
                        "version": 1,
                        "system": system,
                        "model": model,
                        "refine": False,
                        "capacity_search": None,
                        "points": [],
                        "capacity": {},
                    }
                )
            )
    return files
