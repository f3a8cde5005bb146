"""The golden analysis: a small results folder of synthetic records and every table the
analysis commands build from it, as the code of its day built them.

`tests/data/analysis_golden/` holds both (made by `python -m tests.support.analysis_golden
--write`, run with the code whose figures are the reference: main before issue 40's
rework); `tests/unit/test_analysis_golden.py` rebuilds the tables from the same records with
today's code and asks for every figure, to the last digit written. The records are stored,
not regenerated, so no platform difference in numpy's sine can move them.

Points: closed loop with failures (c1, c4), a repeated point (two rounds), open loop with
dropped arrivals (r2), every request failed, one scored request, records of schema /1
(no reads, no audibility fields), a point measured by two onset rules, and an agent-mode
system of WebSocket sessions; run B of the comparison is run A one step slower.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from tests.support.synthetic_records import templates, write_point, write_summary

__all__ = ["GOLDEN", "build_records", "build_tables", "normalise"]

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "analysis_golden"
SETTINGS = json.dumps(
    {
        "models": ["m0"],
        "systems": ["sysA", "sysB", "sysOld", "agent"],
        "headline": 4,
        "ratio": ["sysA", "sysB"],
        "gpu_hour_usd": 2.0,
        "min_continuity_pct": 50.0,
        "ttfa_slo_s": None,
        "grid": [1, 2, 4, 8],
        "slo": {"min_continuity_pct": 50.0},
    }
)
_V2_ONLY = ("read_arrival_s", "read_bytes", "connect_s", "request_sent_s", "ttfa_from_sent_s")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _rewrite(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))


def _job(run: Path, system: str) -> None:
    manifest = {
        "version": 1,
        "system": system,
        "model": "m0",
        "refine": False,
        "capacity_search": None,
        "points": [],
        "capacity": {},
    }
    (run / "search.json").write_text(json.dumps(manifest))


def _point(run: Path, label: str, pool: list[dict], n: int, seed: int, **kw) -> Path:
    c = int(label[1:]) if label.startswith("c") else None
    rate = float(label[1:]) if label.startswith("r") else None
    path = write_point(run / label / "records.jsonl", pool, n, seed=seed, rate=rate, **kw)
    write_summary(path.parent, c, rate, pool[0].get("protocol", "http"))
    (path.parent / "server_metrics.json").write_text(
        json.dumps({"version": 1, "available": False, "reason": "synthetic run"})
    )
    return path


def build_records(root: Path) -> None:
    """Run A under `root/a` (run B, `slower_run`, is made from it where it is needed)."""
    http = templates(60, 12, seed=1)
    ws = templates(20, 8, seed=2, websocket=True)
    a = root / "a" / "runs"
    run = a / "sysA" / "m0"
    _point(run, "c1", http, 30, 1, concurrency=1)
    _point(run, "c4", http, 30, 2, concurrency=4)
    first = _point(run, "c8", http, 25, 10, concurrency=8)  # moved to round1/, round2/
    for k in (1, 2):
        (run / "c8" / f"round{k}").mkdir()
        for name in ("summary.json", "server_metrics.json"):
            shutil.copy(first.with_name(name), run / "c8" / f"round{k}" / name)
        again = [dict(r, t_submit_s=r["t_submit_s"] * (1 + 0.05 * k)) for r in _lines(first)]
        _rewrite(run / "c8" / f"round{k}" / "records.jsonl", again)
    for name in ("records.jsonl", "summary.json", "server_metrics.json"):
        first.with_name(name).unlink()
    _point(run, "r2", http, 30, 3)
    _job(run, "sysA")
    run = a / "sysB" / "m0"
    _point(run, "c1", http, 30, 4, concurrency=1)
    _point(run, "c4", http, 30, 5, concurrency=4)
    failed = [r for r in templates(200, 16, seed=3) if not r["ok"]]
    _point(run, "c8", failed, 6, 6, concurrency=8)
    _point(run, "c2", http, 1, 7, concurrency=2)
    _job(run, "sysB")
    run = a / "sysOld" / "m0"
    path = _point(run, "c1", http, 30, 8, concurrency=1)
    old = []
    for r in _lines(path):  # schema /1: no reads, no audibility fields
        for key in (*_V2_ONLY, "audible", "audible_onset_rule"):
            r.pop(key, None)
        if r["leading_silence_s"] is None:
            r["leading_silence_s"] = 0.0
        old.append(r)
    _rewrite(path, old)
    path = _point(run, "c4", http, 30, 9, concurrency=4)
    mixed = _lines(path)
    for r in mixed[::3]:
        r["audible_onset_rule"] = "abs-30dBFS/20ms/10ms/2"
    _rewrite(path, mixed)
    _job(run, "sysOld")
    run = a / "agent" / "m0"
    _point(run, "c1", ws, 20, 10, concurrency=1)
    _point(run, "c4", ws, 24, 11, concurrency=4)
    _job(run, "agent")


def slower_run(a: Path, b: Path) -> None:
    """Run B of the comparison: run A's records one step slower (a 10% longer window, 10 ms
    more to first audio and to the end)."""
    shutil.copytree(a, b)
    for path in b.rglob("records.jsonl"):
        slower = []
        for r in _lines(path):
            r["t_submit_s"] *= 1.1
            r["wall_s"] += 0.01
            for key in ("ttfa_s", "ttfa_audible_s"):
                if r.get(key) is not None:
                    r[key] += 0.01
            slower.append(r)
        _rewrite(path, slower)


def _quiet(main, argv: list[str]) -> int:
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        return main(argv)


def build_tables(root: Path, out: Path) -> None:
    """Every table of the analysis commands over `root/a` (compare: A against `slower_run`
    of A) in `out`."""
    from thetalker.cli import compare
    from thetalker.report import agent, by_rate, capacity, points, server, tables

    out.mkdir(parents=True, exist_ok=True)
    runs = root / "a" / "runs"
    files = sorted(str(p) for p in runs.rglob("records.jsonl"))
    metrics = [str(Path(f).with_name("server_metrics.json")) for f in files]
    points_csv = str(out / "points.csv")
    assert _quiet(points.main, ["--out", points_csv, "--", *files]) == 0
    assert (
        _quiet(
            server.main,
            [
                "--server-metrics",
                *metrics,
                "--table",
                str(out / "server.md"),
                "--figure",
                str(out / "server.png"),
            ],
        )
        == 0
    )
    agent_files = [f for f in files if "/agent/" in f]
    assert _quiet(agent.main, ["--records", *agent_files, "--table", str(out / "agent.md")]) == 0
    assert (
        _quiet(
            tables.main,
            [
                "--points",
                points_csv,
                "--settings",
                SETTINGS,
                "--throughput",
                str(out / "throughput.md"),
                "--continuity",
                str(out / "continuity.md"),
                "--ttfa",
                str(out / "ttfa.md"),
                "--cost",
                str(out / "cost.md"),
            ],
        )
        == 0
    )
    for name, module in (("by_rate", by_rate), ("capacity", capacity)):
        argv = ["--points", points_csv, "--settings", SETTINGS, "--table", str(out / f"{name}.md")]
        if module is capacity:  # as rules/report.smk runs it: server.csv for "limited by"
            argv += ["--server-table", str(out / "server.csv")]
        assert _quiet(module.main, argv) == 0
    with tempfile.TemporaryDirectory() as tmp:
        b = Path(tmp) / "b"
        slower_run(root / "a", b)
        assert (
            _quiet(compare.main, [str(root / "a"), str(b), "--csv", str(out / "compare.csv")]) == 0
        )
    (out / "server.png").unlink()


def normalise(path: Path, root: Path) -> str:
    """A table's text with the records' folder written as `ROOT` (it moves between runs)."""
    return path.read_text().replace(str(root), "ROOT")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"(re)write {GOLDEN}")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_help()
        return 2
    if GOLDEN.exists():
        shutil.rmtree(GOLDEN)
    (GOLDEN / "records").mkdir(parents=True)
    build_records(GOLDEN / "records")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        build_tables(GOLDEN / "records", out)
        expected = GOLDEN / "expected"
        expected.mkdir()
        for path in sorted(out.iterdir()):
            (expected / path.name).write_text(normalise(path, GOLDEN / "records"))
    rows = list(csv.DictReader((GOLDEN / "expected" / "points.csv").open()))
    print(f"{GOLDEN}: {len(rows)} points, expected tables: {len(list(expected.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
