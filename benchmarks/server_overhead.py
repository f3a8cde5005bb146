"""What the HTTP server costs: aggregate RTFx through `thetalker-serve-local` vs Piper in-process.

One run, same prompts, same session settings (the deploy file's workers, threads per worker and
synthesis values) on both sides:

- in-process: a pool of `workers` Piper sessions driven by `c` threads (each takes a free
  session, synthesizes a prompt sentence by sentence, puts it back);
- server: the local server started with that deploy file, measured with `thetalker.client`
  (closed loop, `c` streams, raw PCM streaming, warmup of `c` requests).

RTFx = seconds of audio produced / wall seconds. Goal (issue 3): the server keeps at least 90%
of in-process throughput at concurrency 2. Nothing is asserted; the table is printed.

    python benchmarks/server_overhead.py [--deploy-config deploy/piper-joe.yaml]
        [--concurrency 1 2 4] [--requests 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import Prompt
from thetalker.server.engine import EngineSettings, load_piper_voice, piper_syn_config
from thetalker.server.settings import engine_settings

__all__ = ["PROMPTS", "in_process_rtfx", "server_rtfx", "main"]

ROOT = Path(__file__).resolve().parents[1]

# Two sentences each, about 4 to 6 s of audio: the server streams them as two chunks.
PROMPTS = [
    "The morning train was late again. Nobody on the platform seemed surprised.",
    "She opened the window to let the cold air in. The room smelled of rain.",
    "Please remember to water the plants on Friday. They dry out quickly in summer.",
    "The museum closes at six on weekdays. On Sundays it stays open until eight.",
    "He wrote the letter twice before sending it. The second version was shorter.",
    "Our team finished the project a week early. Everyone went home before noon.",
    "The river rose after three days of storms. Several roads near the bridge were closed.",
    "A small bakery opened at the corner last month. Its bread sells out by ten.",
]


def prompts_for(n: int) -> list[Prompt]:
    return [Prompt(f"p{i}", PROMPTS[i % len(PROMPTS)]) for i in range(n)]


def in_process_rtfx(settings: EngineSettings, concurrency: int, texts: Sequence[str]) -> float:
    """Aggregate RTFx of `concurrency` threads sharing `settings.workers` Piper sessions."""
    voices: queue.Queue[Any] = queue.Queue()
    for _ in range(settings.workers):
        voices.put(load_piper_voice(settings.threads_per_worker))
    synthesis = settings.effective_synthesis()

    def one(text: str) -> int:
        voice = voices.get()
        try:
            config = piper_syn_config(voice, synthesis)
            return sum(len(c.audio_int16_bytes) for c in voice.synthesize(text, syn_config=config))
        finally:
            voices.put(voice)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, texts[:concurrency]))  # warmup, as the client does
        t0 = time.perf_counter()
        nbytes = sum(pool.map(one, texts))
        wall = time.perf_counter() - t0
    return nbytes / (2 * 22050) / wall


@contextmanager
def local_server(deploy_config: Path) -> Iterator[str]:
    """The local server on a free port; yields its base URL and stops it (SIGTERM) after."""
    log_path = Path(tempfile.mkdtemp(prefix="tt-overhead-")) / "server.log"
    cmd = [sys.executable, "-m", "thetalker.server", "--port", "0"]
    cmd += ["--deploy-config", str(deploy_config)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            text = log_path.read_text(errors="replace")
            match = re.search(r"Serving on (http://\S+)", text)
            if match and "Application startup complete." in text:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{text[-2000:]}")
            time.sleep(0.05)
        yield match.group(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_rtfx(base_url: str, concurrency: int, prompts: Sequence[Prompt]) -> dict[str, Any]:
    """The client's summary of one load point against the server."""
    opts = BenchOptions(
        base_url=base_url,
        concurrency=concurrency,
        requests=len(prompts),
        warmup=concurrency,
        sample_rate=22050,
        timeout_s=300,
    )
    with tempfile.TemporaryDirectory(prefix="tt-overhead-run-") as out:
        return run_benchmark(opts, prompts, out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deploy-config", type=Path, default=ROOT / "deploy" / "piper-joe.yaml")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--requests", type=int, default=16, help="scored requests per point")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)

    settings = engine_settings(args.deploy_config)
    prompts = prompts_for(args.requests)
    texts = [p.text for p in prompts]
    rows = []
    with local_server(args.deploy_config) as base_url:
        for c in args.concurrency:
            summary = server_rtfx(base_url, c, prompts)
            local = in_process_rtfx(settings, c, texts)
            ttfa = (summary.get("ttfa_s") or {}).get("p50")
            rows.append(
                {
                    "concurrency": c,
                    "in_process_rtfx": round(local, 2),
                    "server_rtfx": round(summary["rtfx"], 2),
                    "server_pct": round(100 * summary["rtfx"] / local, 1),
                    "server_ttfa_p50_s": None if ttfa is None else round(ttfa, 3),
                    "errors": summary["n_scored"] - summary["n_ok"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    print(
        f"\nworkers {settings.workers}, threads/worker {settings.threads_per_worker}, "
        f"{args.requests} requests per point, deploy {args.deploy_config.name}\n"
    )
    print("| concurrency | in-process RTFx | server RTFx | server / in-process | TTFA p50 (s) |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['concurrency']} | {r['in_process_rtfx']} | {r['server_rtfx']} | "
            f"{r['server_pct']}% | {r['server_ttfa_p50_s']} |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
