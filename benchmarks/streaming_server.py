"""What streaming in pieces costs and where the knee falls: figures, not assertions.

1. In-process, one Piper session (1 thread), the same prompts both ways: RTFx of whole-sentence
   synthesis against piece-wise synthesis with the deploy file's plan (the cost of the split:
   one model call per piece), and the time to the first piece against the time to the first
   whole sentence (what first audio becomes).
2. Through the server (`thetalker-serve-local` with the deploy file), closed loop with
   `thetalker.client` at each concurrency: continuity, first audio, and the per-stream
   real-time margin: audio a stream received after its first chunk divided by the time it took
   to arrive (above 1: the stream stays ahead of its player; below 1 it stretches). The knee is
   the first concurrency whose median margin falls under 1.

    python -m benchmarks.streaming_server [--deploy-config deploy/piper-joe.yaml]
        [--concurrency 1 2 4 8 16 32] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.server_overhead import PROMPTS, local_server
from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import Prompt
from thetalker.data.record_reads import read_records
from thetalker.metrics import summarize_point
from thetalker.server.engine import PiperBackend
from thetalker.server.pieces import ChunkPlan, split_sentences
from thetalker.server.settings import engine_settings

__all__ = ["in_process", "stream_margins", "through_server", "main"]

ROOT = Path(__file__).resolve().parents[1]
RATE = 22050


def in_process(plan: ChunkPlan, texts: Sequence[str], repeats: int = 2) -> dict[str, float]:
    """RTFx whole vs pieces, and first-piece vs first-sentence latency (medians, seconds)."""
    settings = engine_settings(ROOT / "deploy" / "piper-joe.yaml")
    backend = PiperBackend(settings)
    voice = backend.load_worker()

    def one(p: ChunkPlan, text: str) -> tuple[float, float, float]:
        """(audio s, wall s, first-audio s) of one prompt under plan `p`."""
        audio, first = 0.0, None
        t0 = time.perf_counter()
        for k, sentence in enumerate(split_sentences(text)):
            for piece in backend.split(voice, sentence, p, k == 0):
                audio += len(backend.render(voice, piece, 1.0, 0)) / (2 * RATE)
                if first is None:
                    first = time.perf_counter() - t0
        return audio, time.perf_counter() - t0, first or 0.0

    totals = {"whole": [0.0, 0.0], "pieces": [0.0, 0.0]}
    firsts: dict[str, list[float]] = {"whole": [], "pieces": []}
    # Interleaved, prompt by prompt, so a change in the machine's load hits both alike.
    for _ in range(repeats):
        for text in texts:
            for name, p in (("whole", ChunkPlan()), ("pieces", plan)):
                audio, wall, first = one(p, text)
                totals[name][0] += audio
                totals[name][1] += wall
                firsts[name].append(first)
    return {
        "rtfx_whole": totals["whole"][0] / totals["whole"][1],
        "rtfx_pieces": totals["pieces"][0] / totals["pieces"][1],
        "audio_s_whole": totals["whole"][0] / repeats,
        "audio_s_pieces": totals["pieces"][0] / repeats,
        "first_whole_s": statistics.median(firsts["whole"]),
        "first_piece_s": statistics.median(firsts["pieces"]),
    }


def stream_margins(records: Sequence[dict[str, Any]]) -> list[float]:
    """Per stream: audio after the first chunk / time it took to arrive (streams of 2+ chunks)."""
    margins = []
    for r in records:
        arrivals, sizes = r.get("chunk_arrival_s") or [], r.get("chunk_bytes") or []
        if not r.get("ok") or len(arrivals) < 2:
            continue
        span = arrivals[-1] - arrivals[0]
        if span > 0:
            margins.append(sum(sizes[1:]) / (2 * RATE) / span)
    return margins


def through_server(base_url: str, concurrency: int, n: int) -> dict[str, Any]:
    prompts = [Prompt(f"p{i}", PROMPTS[i % len(PROMPTS)]) for i in range(n)]
    opts = BenchOptions(
        base_url=base_url,
        concurrency=concurrency,
        requests=n,
        warmup=1,
        sample_rate=RATE,
        timeout_s=300,
    )
    with tempfile.TemporaryDirectory(prefix="tt-streaming-") as out:
        run_benchmark(opts, prompts, out)
        records = [r for r in read_records(Path(out) / "records.jsonl") if not r["warmup"]]
    summary = summarize_point(records, concurrency)
    margins = stream_margins(records)
    return {
        "concurrency": concurrency,
        "continuity_pct": summary["continuity_pct"],
        "ttfa_p50_s": summary["ttfa_s"]["p50"],
        "margin_p50": statistics.median(margins) if margins else None,
        "margin_min": min(margins) if margins else None,
        "chunks_per_stream": statistics.median(len(r["chunk_bytes"]) for r in records),
        "rtfx": summary["rtfx"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploy-config", type=Path, default=ROOT / "deploy" / "piper-joe.yaml")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=2, help="in-process passes over prompts")
    parser.add_argument("--in-process-only", action="store_true", help="skip the server part")
    args = parser.parse_args(argv)
    settings = engine_settings(args.deploy_config)
    load_before = os.getloadavg()[0]
    local = in_process(settings.chunks, PROMPTS, args.repeats)
    print(
        f"in-process, 1 session: RTFx whole {local['rtfx_whole']:.2f}, "
        f"pieces {local['rtfx_pieces']:.2f} "
        f"({local['rtfx_pieces'] / local['rtfx_whole']:.0%}); first audio "
        f"{local['first_whole_s']:.3f} s whole sentence, {local['first_piece_s']:.3f} s first "
        f"piece; audio {local['audio_s_whole']:.1f} s whole, {local['audio_s_pieces']:.1f} s "
        "in pieces"
    )
    rows: list[dict[str, Any]] = []
    if args.in_process_only:
        return 0
    with local_server(args.deploy_config) as base_url:
        print(
            "| concurrency | continuity % | TTFA p50 (s) | margin p50 | margin min "
            "| chunks | RTFx |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for c in args.concurrency:
            row = through_server(base_url, c, max(2 * c, 4))
            rows.append(row)
            print(
                f"| {c} | {row['continuity_pct']:.0f} | {row['ttfa_p50_s']:.3f} | "
                f"{row['margin_p50']:.2f} | {row['margin_min']:.2f} | "
                f"{row['chunks_per_stream']:.0f} | {row['rtfx']:.1f} |"
            )
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    if args.json is not None:
        args.json.write_text(json.dumps({"in_process": local, "server": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
