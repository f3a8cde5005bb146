"""`--workers K` (the scored streams spread over processes), `--save-audio-count N` and the
progress line, against the real scripted server on loopback.

Worker processes are spawned, so each run pays their start-up (a second or two here); the
tests keep runs small. Timelines are checked by causality on the system-wide clock, not
against the schedule with a tolerance (tests/support/causal.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.causal import causal_faults, run_origins
from tests.support.paths import REPO
from tests.support.processes import pipe_write_blocked
from tests.support.scripted_server import Script, ScriptedServer
from thetalker.cli.bench import main as bench_main
from thetalker.client import (
    BenchOptions,
    OptionsError,
    arun_benchmark,
    run_benchmark,
    validate_options,
)
from thetalker.client.options import effective_workers
from thetalker.client.progress import Progress
from thetalker.client.schedule import arrival_offsets
from thetalker.client.workers import max_overlap, split_items
from thetalker.data.prompts import Prompt
from thetalker.data.record_reads import read_json, read_records


def _prompts(n: int) -> list[Prompt]:
    return [Prompt(f"s{i}", f"sentence {i}") for i in range(n)]


def _run(srv: ScriptedServer, out: Path, **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    defaults: dict[str, Any] = {"requests": 8, "warmup": 0, "sample_rate": 24000, "seed": 5}
    opts = BenchOptions(base_url=srv.base_url, **{**defaults, **kw})
    summary = run_benchmark(opts, _prompts(8), out)
    return summary, sorted(read_records(out / "records.jsonl"), key=lambda r: r["request_index"])


def _assert_timelines_follow_the_server(
    srv: ScriptedServer, records: list[dict[str, Any]], t_origin: float
):
    """Each record's reads never before the server wrote them (perf_counter is system-wide:
    the workers' stamps and the server's share one clock). A text sent more than once has
    several logs: one of them is the record's."""
    for rec in (r for r in records if not r["warmup"]):
        logs = srv.logs_for(rec["text"])
        assert any(not causal_faults(rec, log, t_origin) for log in logs), rec["text"]


def test_two_workers_send_what_one_sends(
    scripted_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    scripted_server.default = Script(chunks=((0, 4800), (0.15, 4800), (0.15, 4800)))
    origins = run_origins(monkeypatch)
    s1, one = _run(scripted_server, tmp_path / "k1", concurrency=4, warmup=2)
    scripted_server.requests.clear()
    s2, two = _run(scripted_server, tmp_path / "k2", concurrency=4, warmup=2, workers=2)
    # the same requests: indices, prompts, warmup flags
    key = [(r["request_index"], r["sample_id"], r["warmup"]) for r in one]
    assert [(r["request_index"], r["sample_id"], r["warmup"]) for r in two] == key
    assert all(r["ok"] for r in two) and s2["n_ok"] == s2["n_scored"] == 8
    assert s2["n_warmup"] == 2 and s2["options"]["workers"] == 2
    # the warmup ran (in the parent) before the first scored request
    warm_end = max(r["t_submit_s"] + r["wall_s"] for r in two if r["warmup"])
    assert min(r["t_submit_s"] for r in two if not r["warmup"]) >= warm_end
    # closed loop 4 = 2 + 2 streams; never more at once
    assert s2["max_in_flight"] == 4 and s1["max_in_flight"] == 4
    # each record's chunks arrive on the server's schedule
    _assert_timelines_follow_the_server(scripted_server, two, origins[-1])
    assert all(r["ttfa_s"] > 0 for r in two)
    # 8 scored requests the server holds >= 0.3 s each, 4 at a time: two waves at least, in
    # one process or two (how much longer is a benchmark: benchmarks/client_fidelity.py)
    assert s1["window_s"] >= 0.6 and s2["window_s"] >= 0.6


def test_open_loop_schedule_is_shared_across_workers(
    scripted_server: ScriptedServer, tmp_path: Path
):
    scripted_server.default = Script(chunks=((0, 4800), (0.4, 4800)))
    summary, records = _run(
        scripted_server, tmp_path, request_rate=20.0, seed=7, requests=8, workers=2
    )
    offsets = arrival_offsets(8, 20.0, 7)
    rng = random.Random("thetalker.arrivals:7")  # as the one-process open loop draws it
    expected = [0.0]
    for _ in range(7):
        expected.append(expected[-1] + rng.expovariate(20.0))
    assert offsets == expected
    # scheduled send = t_submit - lag; on one clock it is start + offset for every record
    starts = [
        r["t_submit_s"] - r["schedule_lag_s"] - o for r, o in zip(records, offsets, strict=True)
    ]
    assert max(starts) - min(starts) < 1e-6
    assert all(r["schedule_lag_s"] >= 0 for r in records)  # late on a busy machine, never early
    assert all(r["ok"] for r in records) and summary["concurrency"] is None
    assert summary["max_in_flight"] > 1


def test_split_keeps_the_order_and_spreads_the_streams():
    items = [(i, Prompt(f"s{i}", "t"), False) for i in range(7)]
    opts = BenchOptions(concurrency=5, requests=7, workers=2)
    a, b = split_items(items, opts, 2)
    assert (a.concurrency, b.concurrency) == (3, 2)
    assert [i for i, _, _ in a.items] == [0, 2, 4, 6] and [i for i, _, _ in b.items] == [1, 3, 5]
    assert a.offsets is None and b.offsets is None
    # open loop: each worker gets its slots of the one schedule
    rated = split_items(items, BenchOptions(request_rate=4.0, requests=7, seed=3), 2)
    whole = arrival_offsets(7, 4.0, 3)
    assert rated[0].offsets == tuple(whole[0::2]) and rated[1].offsets == tuple(whole[1::2])
    # never more workers than streams (closed loop) or requests
    assert effective_workers(BenchOptions(concurrency=2, requests=9, workers=8)) == 2
    assert effective_workers(BenchOptions(request_rate=5.0, requests=3, workers=8)) == 3
    assert effective_workers(BenchOptions(concurrency=64, requests=9)) == 1


def testmax_overlap():
    assert max_overlap([]) == 0
    assert max_overlap([(0, 1), (1, 2)]) == 1  # touching is not overlapping
    assert max_overlap([(0, 3), (1, 2), (1.5, 4), (5, 6)]) == 3


def test_save_audio_count_keeps_the_first_n_scored(scripted_server: ScriptedServer, tmp_path: Path):
    out = tmp_path / "run"
    _, records = _run(
        scripted_server, out, warmup=1, requests=5, save_audio_dir=str(out / "audio"),
        save_audio_count=2,
    )  # fmt: skip
    saved = [r["request_index"] for r in records if r["audio_path"]]
    assert saved == [1, 2]  # indices 1.. are scored; the warmup (0) is never saved
    assert sorted(p.name for p in (out / "audio").iterdir()) == [
        f"{r['request_index']:05d}_{r['sample_id']}.wav" for r in records[1:3]
    ]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"workers": 0}, "workers"),
        ({"save_audio_count": 3}, "save_audio_count"),
        ({"save_audio_count": -1, "save_audio_dir": "x"}, "save_audio_count"),
    ],
)
def test_bad_new_options_name_the_field(changes: dict[str, Any], field: str):
    with pytest.raises(OptionsError, match=f"^option field {field}: "):
        validate_options(BenchOptions(**changes))


def test_cli_rejects_a_count_without_a_dir(tmp_path: Path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"sample_id": "a", "text": "x"}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        bench_main(["--texts-jsonl", str(prompts), "--out-dir", str(tmp_path / "o"),
                    "--save-audio-count", "3"])  # fmt: skip
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "save_audio_count: needs save_audio_dir" in err and err.count("\n") == 1


def test_progress_reports_reach_the_parent_from_the_workers(
    scripted_server: ScriptedServer, tmp_path: Path
):
    scripted_server.default = Script(chunks=((0, 4800), (0.3, 4800)))
    opts = BenchOptions(
        base_url=scripted_server.base_url, requests=6, warmup=0, sample_rate=24000,
        concurrency=2, workers=2,
    )  # fmt: skip
    reports: list[Progress] = []

    class Collect:  # a reporter: called with each Progress, as often as interval_s says
        interval_s = 0.1

        def __call__(self, p: Progress) -> None:
            reports.append(p)

    run_benchmark(opts, _prompts(6), tmp_path, Collect())
    assert reports[-1] == Progress("c2", 6, 6, 0, reports[-1].elapsed_s, 0.0)
    assert [r.done for r in reports] == sorted(r.done for r in reports)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stopping_the_parent_stops_every_worker(
    scripted_server: ScriptedServer, tmp_path: Path, sig: signal.Signals, code: int
):
    # "sentence 3" stalls for 30 s; the others finish at once.
    scripted_server.script_for = lambda body: (
        Script(chunks=((0, 4800), (30.0, 4800))) if body["input"].endswith("3") else None
    )
    prompts = tmp_path / "p.jsonl"
    lines = [f'{{"sample_id": "s{i}", "text": "sentence {i}"}}' for i in range(4)]
    prompts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "thetalker.cli.bench", "--base-url", scripted_server.base_url,
           "--texts-jsonl", str(prompts), "--requests", "4", "--warmup", "1", "--seed", "1",
           "--concurrency", "4", "--workers", "2", "--sample-rate", "24000",
           "--speaker", "scripted", "--out-dir", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
    workers: list[psutil.Process] = []
    try:
        for _ in range(600):  # until the stalled request has its first chunk out
            time.sleep(0.05)
            slow = scripted_server.logs_for("sentence 3")
            done = sum(r.finished for r in scripted_server.requests)
            if slow and slow[-1].send_times and done >= 4:  # warmup + the 3 quick ones
                break
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert len(workers) >= 2  # the two workers (and multiprocessing's tracker)
        time.sleep(0.2)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for child in workers:  # never leave one behind, even when the test fails
            if child.is_running():
                child.kill()
    assert proc.returncode == code, err
    _, alive = psutil.wait_procs(workers, timeout=5)
    assert not alive, f"worker processes left running: {[p.pid for p in alive]}"
    records = {r["text"]: r for r in read_records(out / "records.jsonl") if not r["warmup"]}
    assert len(records) == 4
    assert records["sentence 3"]["error"]["type"] == "cancelled"
    assert records["sentence 3"]["chunk_bytes"] == [4800]
    assert all(r["ok"] for t, r in records.items() if t != "sentence 3")
    summary = read_json(out / "summary.json")
    assert summary["complete"] is False and summary["n_scored"] == 4


def test_many_streams_build_records_in_a_writer_process(
    scripted_server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # With many streams the records are built in a process of their own: same records.
    scripted_server.default = Script(chunks=((0, 4800), (0.1, 2400)))
    out = tmp_path / "run"
    origins = run_origins(monkeypatch)
    summary, records = _run(
        scripted_server, out, concurrency=32, requests=40, warmup=1,
        save_audio_dir=str(out / "audio"), save_audio_count=3,
    )  # fmt: skip
    assert [r["request_index"] for r in records] == list(range(41))
    assert all(r["ok"] and r["chunk_bytes"] == [4800, 2400] for r in records)
    assert summary["n_ok"] == 40 and summary["max_in_flight"] == 32
    assert [r["audio_path"] for r in records if r["audio_path"]] == [
        f"audio/{r['request_index']:05d}_{r['sample_id']}.wav" for r in records[1:4]
    ]
    _assert_timelines_follow_the_server(scripted_server, records, origins[0])


async def test_cancel_with_the_writer_process_keeps_every_record(
    scripted_server: ScriptedServer, tmp_path: Path
):
    scripted_server.add_script("slow", Script(chunks=((0, 4800), (30.0, 4800))))
    opts = BenchOptions(
        base_url=scripted_server.base_url, requests=3, warmup=0, sample_rate=24000,
        concurrency=32, timeout_s=60,
    )  # fmt: skip
    prompts = [Prompt("a", "quick"), Prompt("b", "slow 1"), Prompt("c", "slow 2")]
    task = asyncio.create_task(arun_benchmark(opts, prompts, tmp_path))
    for _ in range(300):
        await asyncio.sleep(0.02)
        logs = scripted_server.requests
        if len(logs) == 3 and all(r.send_times for r in logs) and any(r.finished for r in logs):
            break
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    records = {r["sample_id"]: r for r in read_records(tmp_path / "records.jsonl")}
    assert records["a"]["ok"] is True
    assert [records[s]["error"]["type"] for s in ("b", "c")] == ["cancelled", "cancelled"]
    assert read_json(tmp_path / "summary.json")["complete"] is False


async def test_a_sigterm_to_the_writer_and_its_fork_server_costs_no_record(
    scripted_server: ScriptedServer, tmp_path: Path
):
    # What a SIGTERM to a bench job's process group does to the writer's side (the bench
    # process itself stops on it, tested in the workflow): neither the writer nor the fork
    # server that forked it may end with records still to write.
    scripted_server.add_script("slow", Script(chunks=((0, 4800), (1.0, 4800))))
    opts = BenchOptions(
        base_url=scripted_server.base_url, requests=4, warmup=0, sample_rate=24000,
        concurrency=1, timeout_s=60,
    )  # fmt: skip
    prompts = [Prompt("a", "quick"), Prompt("b", "slow 1"), Prompt("c", "quick 2"),
               Prompt("d", "quick 3")]  # fmt: skip
    task = asyncio.create_task(arun_benchmark(opts, prompts, tmp_path))
    for _ in range(1500):
        await asyncio.sleep(0.02)
        if any(r.body.get("input") == "slow 1" for r in scripted_server.requests):
            break
    else:
        pytest.fail("the slow request was never sent")
    children = psutil.Process().children(recursive=True)
    writers = [p for p in children if "forkserver" in " ".join(p.cmdline())]
    assert len(writers) == 2, [p.cmdline() for p in children]  # the server and its writer
    for proc in writers:
        proc.send_signal(signal.SIGTERM)
    summary = await task
    assert summary["n_ok"] == 4 and summary["complete"] is True
    records = read_records(tmp_path / "records.jsonl")
    assert sorted(r["sample_id"] for r in records) == ["a", "b", "c", "d"]


def test_workers_of_a_sigkilled_parent_end_though_their_results_pipe_is_full(
    scripted_server: ScriptedServer, tmp_path: Path
):
    # A child never waits on its parent without a deadline. A worker's records go to the
    # parent through a multiprocessing queue whose feeder thread is joined at the worker's
    # exit: with the parent SIGKILLed and the pipe full, that join would wait for ever. The
    # parent is stopped until a worker's feeder blocks on the full pipe, then killed.
    scripted_server.default = Script(chunks=((0, 4800),))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"sample_id": "a", "text": "hello"}\n', encoding="utf-8")
    cmd = [sys.executable, "-m", "thetalker.cli.bench", "--base-url", scripted_server.base_url,
           "--texts-jsonl", str(prompts), "--requests", "100000", "--warmup", "0",
           "--concurrency", "4", "--workers", "2", "--sample-rate", "24000",
           "--trust-sample-rate", "--speaker", "scripted",
           "--out-dir", str(tmp_path / "o")]  # fmt: skip
    parent = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.DEVNULL)
    family: list[psutil.Process] = []
    try:
        end = time.monotonic() + 60
        while len(scripted_server.requests) < 50 and time.monotonic() < end:
            time.sleep(0.05)  # the workers run (bounded)
        family = psutil.Process(parent.pid).children(recursive=True)
        workers = [p for p in family if "spawn_main" in " ".join(p.cmdline())]
        assert len(workers) == 2, [p.cmdline() for p in family]
        psutil.Process(parent.pid).suspend()
        end = time.monotonic() + 60  # records pile up until a worker's feeder blocks
        while not any(pipe_write_blocked(w.pid) for w in workers) and time.monotonic() < end:
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        _gone, alive = psutil.wait_procs(family, timeout=60)  # a hang, not a speed
        assert alive == [], [p.cmdline() for p in alive]
    finally:
        parent.kill()
        for proc in family:
            with contextlib.suppress(psutil.Error):
                proc.kill()
