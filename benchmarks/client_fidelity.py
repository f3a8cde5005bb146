"""How exactly does the client record a stream's timeline? Figures, not assertions.

A scripted server (tests/support/scripted_server.py, its own process, TCP_NODELAY, uvloop) sends
each stream as chunks on an exact schedule and logs each chunk's real send time
(`perf_counter`, system-wide). Per concurrency level the same load is received twice in
one run: by a bare timestamp loop (aiohttp, one clock read per chunk end, no bookkeeping:
the floor) and by `thetalker.client.arun_benchmark`. For each, the error of measured
arrival deltas against the server's send deltas (p50, p99, max, ms) and the client's
CPU seconds per stream (its own process plus the helper processes it started and reaped:
the record writer, workers). With `--workers K` the client is also run with K worker
processes (a third row per level).

A shared machine makes one run a single draw of noise: `--repeats R` receives each level R
times, bare and client interleaved (the order alternating from round to round), and reports
the median and the range of each figure over the rounds, and of the per-round ratio, and the
ratio of the p99s of every chunk of every round pooled; each with a 95% interval from
resampling rounds. The per-round median is the robust one (a round in which the host stalls
one side moves it little; it can move the pooled p99 a lot).
`--waves W` sends W times as many streams as are in flight, so a closed loop sends
replacement requests while the first wave's last chunks arrive.

    python benchmarks/client_fidelity.py                 # 1, 64, 256 streams
    python benchmarks/client_fidelity.py --levels 1 64 256 1024 --workers 2 --write-readme
    python benchmarks/client_fidelity.py --loop asyncio  # the default event loop
    python benchmarks/client_fidelity.py --levels 1 64 256 1024 --waves 2 --repeats 5 \\
        --write-readme --note "shared, other processes busy"
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# The record writer's fork server imports thetalker by its environment, not this sys.path:
# the same tree for both, from any working directory.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

from thetalker.client import BenchOptions, arun_benchmark  # noqa: E402
from thetalker.data.prompts import Prompt  # noqa: E402
from thetalker.data.record_reads import read_records  # noqa: E402

__all__ = ["main"]

# 12 chunks of 0.1 s of 24 kHz audio, 0.1 s apart: a real-time stream of 1.2 s.
CHUNKS = ",".join(["0:4800"] + ["0.1:4800"] * 11)
README = REPO / "benchmarks" / "README.md"
BEGIN, END = "<!-- client_fidelity:begin -->", "<!-- client_fidelity:end -->"


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def _run(loop: str, coro: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=_loop_factory(loop)) as runner:
        return runner.run(coro)


async def _bare_loop(base_url: str, texts: list[str], n: int) -> dict[str, list[float]]:
    """The floor: N streams at once, a clock read at each server chunk's end, nothing else."""
    arrivals: dict[str, list[float]] = {}
    connector = aiohttp.TCPConnector(limit=n)  # the pool queues the rest: n in flight
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(text: str) -> None:
            stamps: list[float] = []
            arrivals[text] = stamps
            body = {
                "input": text,
                "stream": True,
                "stream_format": "audio",
                "response_format": "pcm",
            }
            async with session.post(f"{base_url}/v1/audio/speech", json=body) as resp:
                last = 0.0
                async for data, end in resp.content.iter_chunks():
                    if data:
                        last = time.perf_counter()
                    if end and last:  # an end flag may come alone, after the data
                        stamps.append(last)
                        last = 0.0

        await asyncio.gather(*(one(t) for t in texts))
    return arrivals


def _server_log(base_url: str, clear: bool = True) -> dict[str, list[float]]:
    async def fetch() -> Any:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base_url}/_log") as resp:
                data = await resp.json()
            if clear:
                async with session.delete(f"{base_url}/_log"):
                    pass
            return data

    return {r["input"]: r["send_times"] for r in asyncio.run(fetch())}


def _errors_ms(measured: dict[str, list[float]], sent: dict[str, list[float]]) -> np.ndarray:
    """|measured delta - sent delta| over every chunk of every stream, deltas from chunk 0."""
    out: list[float] = []
    for text, arr in measured.items():
        ref = sent.get(text)
        if not ref or len(ref) != len(arr):
            raise SystemExit(f"{text}: {len(arr)} chunks measured, server sent {len(ref or [])}")
        out.extend(abs((a - arr[0]) - (s - ref[0])) for a, s in zip(arr, ref, strict=True))
    return np.asarray(out) * 1000.0


class RoundLost(RuntimeError):
    """A round whose client requests failed: no timeline to compare; the run goes on."""


def _cpu_s() -> float:
    """This process's CPU plus that of its reaped children (writer process, workers; the
    scripted server is reaped only at the end, so it is not counted)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _stats(err_ms: np.ndarray, cpu_s: float, n: int) -> dict[str, Any]:
    return {
        "p50_ms": float(np.percentile(err_ms, 50)),
        "p99_ms": float(np.percentile(err_ms, 99)),
        "max_ms": float(err_ms.max()),
        "cpu_ms_per_stream": 1000.0 * cpu_s / n,
        ERRORS: err_ms,  # every chunk's error, for the pooled figures over rounds
    }


ERRORS = "errors_ms"
BOOTSTRAP_RESAMPLES = 2000


def median_interval(values: list[float], seed: int = 0) -> tuple[float, float]:
    """A 95% interval of the median of `values` (the per-round ratios) from resampling them:
    a round the host stalled moves the median little and its interval some."""
    if len(values) < 3:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = np.median(rng.choice(values, (BOOTSTRAP_RESAMPLES, len(values))), axis=1)
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return float(lo), float(hi)


def pooled_ratio(
    rounds: list[dict[str, dict]], who: str, seed: int = 0
) -> tuple[float, float, float]:
    """p99 of `who`'s chunk errors pooled over every round against the bare loop's pooled
    p99, with a 95% interval from resampling whole rounds (the same rounds for both: a
    round's machine state falls on both alike). One round's p99 rests on its ~1% worst
    chunks; pooling R rounds puts R times as many behind the figure."""

    def ratio(picked: list[int]) -> float:
        mine = np.concatenate([rounds[i][who][ERRORS] for i in picked])
        bare = np.concatenate([rounds[i]["bare"][ERRORS] for i in picked])
        floor = float(np.percentile(bare, 99))
        return float(np.percentile(mine, 99)) / floor if floor else float("nan")

    everything = list(range(len(rounds)))
    point = ratio(everything)
    if len(rounds) < 3:
        return point, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = [ratio(list(rng.integers(0, len(rounds), len(rounds))))
             for _ in range(BOOTSTRAP_RESAMPLES)]  # fmt: skip
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return point, float(lo), float(hi)


def _measure_client(
    base_url: str, n: int, total: int, loop: str, out: Path, workers: int, tag: str = ""
) -> dict[str, float]:
    prompts = [Prompt(f"c{i}", f"client-{n}-{workers}-{tag}-{i}") for i in range(total)]
    opts = BenchOptions(
        base_url=base_url, concurrency=n, requests=total, warmup=0, sample_rate=24000,
        speaker=None, language=None, timeout_s=120.0, workers=workers,
    )  # fmt: skip
    cpu0 = _cpu_s()
    _run(loop, arun_benchmark(opts, prompts, out))
    client_cpu = _cpu_s() - cpu0
    records = {r["text"]: r for r in read_records(out / "records.jsonl")}
    failed = [t for t, r in records.items() if not r["ok"]]
    if failed:
        raise RoundLost(
            f"{len(failed)} of {total} client requests failed, e.g. {records[failed[0]]['error']}"
        )
    client = {t: r["chunk_arrival_s"] for t, r in records.items()}
    return _stats(_errors_ms(client, _server_log(base_url)), client_cpu, total)


def _measure_bare(base_url: str, n: int, total: int, loop: str, tag: str) -> dict[str, float]:
    texts = [f"bare-{n}-{tag}-{i}" for i in range(total)]
    cpu0 = _cpu_s()
    bare = _run(loop, _bare_loop(base_url, texts, n))
    bare_cpu = _cpu_s() - cpu0
    return _stats(_errors_ms(bare, _server_log(base_url)), bare_cpu, total)


def measure_level(
    base_url: str,
    n: int,
    loop: str,
    workdir: Path,
    min_streams: int,
    workers: int = 0,
    waves: int = 1,
    round_index: int = 0,
) -> dict[str, dict]:
    """n streams in flight, `waves` x n in all and at least `min_streams` (a single stream
    is one sample). `workers` > 1: also the client spread over that many processes. Odd
    rounds run the client first, so drift in the machine's load falls on both alike."""
    total = max(n * waves, min_streams)
    tag = f"r{round_index}"
    out = workdir / f"c{n}{tag}"
    runs: list[tuple[str, Callable[[], dict[str, float]]]] = [
        ("bare", lambda: _measure_bare(base_url, n, total, loop, tag)),
        ("client", lambda: _measure_client(base_url, n, total, loop, out, 1, tag)),
    ]
    if round_index % 2:
        runs.reverse()
    measured = {who: measure() for who, measure in runs}
    result = {"bare": measured["bare"], "client": measured["client"]}
    if workers > 1 and n >= workers:
        out_w = workdir / f"c{n}w{workers}{tag}"
        result[f"client {workers}w"] = _measure_client(
            base_url, n, total, loop, out_w, workers, tag
        )
    return result


def _summarise(rounds: list[dict[str, dict]]) -> dict[str, dict]:
    """Per who: the median and range of each figure over the rounds, and of the per-round
    ratio of its p99 to the bare loop's."""
    out: dict[str, dict] = {}
    for who in rounds[0]:
        figures: dict[str, Any] = {}
        for key in rounds[0][who]:
            if key == ERRORS:
                continue
            values = [r[who][key] for r in rounds]
            figures[key] = float(np.median(values))
            figures[f"{key}_range"] = (float(min(values)), float(max(values)))
        ratios = [r[who]["p99_ms"] / r["bare"]["p99_ms"] for r in rounds if r["bare"]["p99_ms"]]
        figures["ratio"] = float(np.median(ratios)) if ratios else float("nan")
        figures["ratio_range"] = (min(ratios), max(ratios)) if ratios else (np.nan, np.nan)
        figures["ratio_interval"] = median_interval(ratios)
        figures["rounds"] = len(rounds)
        figures["pooled"] = pooled_ratio(rounds, who)
        out[who] = figures
    return out


def _repeats_table(
    summaries: dict[int, dict[str, dict]], loop: str, waves: int, min_streams: int
) -> str:
    lines = [
        "| streams | in all | loop | who | rounds | p50 ms | p99 ms median [range] | "
        "max ms median | CPU ms/stream | p99 / bare p99, per round: median [range] | "
        "its median's 95% interval | pooled p99 / bare pooled p99 [95% interval] |",
        "|---:|---:|---|---|---:|---:|---|---:|---:|---|---|---|",
    ]
    for n, res in summaries.items():
        for who, s in res.items():
            lo, hi = s["p99_ms_range"]
            rlo, rhi = s["ratio_range"]
            lines.append(
                f"| {n} | {max(n * waves, min_streams)} | {loop} | {who} | {s['rounds']} | "
                f"{s['p50_ms']:.2f} | "
                f"{s['p99_ms']:.2f} [{lo:.2f}-{hi:.2f}] | {s['max_ms']:.2f} | "
                f"{s['cpu_ms_per_stream']:.2f} | {s['ratio']:.2f}x [{rlo:.2f}-{rhi:.2f}] | "
                f"{_interval_cell(s['ratio_interval'])} | {_pooled_cell(s['pooled'])} |"
            )
    return "\n".join(lines)


def _interval_cell(interval: tuple[float, float]) -> str:
    lo, hi = interval
    return "" if np.isnan(lo) else f"{lo:.2f}-{hi:.2f}x"


def _pooled_cell(pooled: tuple[float, float, float]) -> str:
    point, lo, hi = pooled
    return f"{point:.2f}x" + ("" if np.isnan(lo) else f" [{lo:.2f}-{hi:.2f}]")


def _without_errors(data: dict) -> dict:
    """The figures for --json, every chunk's error left out (they are the bulk)."""
    if isinstance(data, dict):
        return {k: _without_errors(v) for k, v in data.items() if k != ERRORS}
    if isinstance(data, list):
        return [_without_errors(v) for v in data]  # type: ignore[return-value]
    return data


def _table(results: dict[int, dict[str, dict]], loop: str) -> str:
    lines = [
        "| streams | loop | who | p50 ms | p99 ms | max ms | CPU ms/stream | p99 vs bare |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for n, res in results.items():
        for who, s in res.items():
            ratio = s["p99_ms"] / res["bare"]["p99_ms"] if res["bare"]["p99_ms"] else float("nan")
            lines.append(
                f"| {n} | {loop} | {who} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | "
                f"{s['max_ms']:.2f} | {s['cpu_ms_per_stream']:.2f} | {ratio:.2f}x |"
            )
    return "\n".join(lines)


def _start_server() -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "tests.support.scripted_server", "--port", "0", "--uvloop",
           "--chunks", CHUNKS]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.match(r"PORT (\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"scripted server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{match.group(1)}"


def _write_readme(table: str, loop: str, levels: list[int], load: str, note: str) -> None:
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"{BEGIN}\nLast run: {when}, {machine}, event loop {loop}, "
        f"levels {', '.join(map(str, levels))}; server and client on the same cores; "
        f"machine: {note} (load average {load}).\n\n{table}\n{END}"
    )
    text = README.read_text(encoding="utf-8") if README.exists() else ""
    if BEGIN in text and END in text:
        text = re.sub(
            re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S
        )
    else:
        text += "\n" + section + "\n"
    README.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--min-streams", type=int, default=8, help="streams per level, at least")
    parser.add_argument("--workers", type=int, default=0, help="also the client with K workers")
    parser.add_argument("--waves", type=int, default=1, help="streams in all = waves x level")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds per level")
    parser.add_argument(
        "--note", default="shared with other work", help="the machine's state, for the README"
    )
    parser.add_argument("--write-readme", action="store_true", help="keep the table in README")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    proc, base_url = _start_server()
    results: dict[int, dict[str, dict]] = {}
    rounds: dict[int, list[dict[str, dict]]] = {}
    failed: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in args.levels:
                done = []
                for r in range(args.repeats):
                    try:
                        done.append(
                            measure_level(
                                base_url,
                                n,
                                args.loop,
                                Path(tmp),
                                args.min_streams,
                                args.workers,
                                args.waves,
                                r,
                            )
                        )
                    except (aiohttp.ClientError, OSError, RoundLost) as exc:  # a round lost
                        failed.append(f"{n} streams, round {r + 1}: {type(exc).__name__}: {exc}")
                        print(f"warning: {failed[-1]}", file=sys.stderr)
                if done:
                    rounds[n], results[n] = done, done[0]
                print(f"{n} streams done", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(10)
    if args.repeats > 1:
        summaries = {n: _summarise(r) for n, r in rounds.items()}
        table = _repeats_table(summaries, args.loop, args.waves, args.min_streams)
    else:
        table = _table(results, args.loop)
    if failed:
        table += "\n\nRounds lost: " + "; ".join(failed) + "."
    print(table)
    if args.json:
        data = results if args.repeats == 1 else rounds
        Path(args.json).write_text(json.dumps(_without_errors(data), indent=2), encoding="utf-8")
    if args.write_readme:
        load = f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
        _write_readme(table, args.loop, args.levels, load, args.note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
