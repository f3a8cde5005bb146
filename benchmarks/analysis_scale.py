"""The analysis side at scale: each table rule's command on synthetic records, beside the
floor of decoding the same files.

Synthesises records of the current schema (`tests/support/synthetic_records.py`: reads in
server chunks, odd-byte reads, steady/bursty/gappy streams, ~5% failures, open-loop points
with dropped arrivals, an agent-mode system of WebSocket sessions):

- one point of `--point-n` requests x `--reads` reads, timed with `report.points`;
- a matrix of systems x models x points (`--matrix-n` requests each; the published config
  is 32 bench jobs x 8 points x ~300 requests, about 80,000 records), timed with every
  table rule's command as the workflow runs it: points, server table, agent table, tables,
  by-rate, capacity, and `thetalker-compare` of the matrix against a copy of itself.

Each command runs as a child process; its wall time and peak RSS (`os.wait4`'s
`ru_maxrss`) are taken. The floor is a child that decodes the same files line by line with
msgspec (the fastest JSON decoder the project depends on), untyped, keeping nothing:
what reading the records costs at the least. Figures only: no test asserts them.

    python benchmarks/analysis_scale.py                       # 100,000 x 100 and 80,000
    python benchmarks/analysis_scale.py --point-n 20000 --matrix-n 100   # quicker
    python benchmarks/analysis_scale.py --write-readme --note "machine shared"
    # each command with main's code just before this checkout's, on the same inputs
    git worktree add --detach /tmp/main-code main
    python benchmarks/analysis_scale.py --baseline /tmp/main-code --jobs 2 --workdir /tmp/s
    python benchmarks/analysis_scale.py --baseline /tmp/main-code --workdir /tmp/s \
        --skip-point --only points agent_table compare     # a few, inputs kept from before
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The synthesis runs in a child process and this one imports nothing heavy: a child's peak
# RSS (ru_maxrss) starts from its parent's RSS at the fork, so a big parent inflates them.
GENERATE = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.support.synthetic_records import templates, write_matrix, write_point
kind, out = sys.argv[2], Path(sys.argv[3])
if kind == "point":
    n, reads = int(sys.argv[4]), int(sys.argv[5])
    write_point(out, templates(400, reads), n, concurrency=64)
else:
    systems, models = sys.argv[4].split(","), sys.argv[5].split(",")
    grid, n, reads = [int(c) for c in sys.argv[6].split(",")], int(sys.argv[7]), int(sys.argv[8])
    write_matrix(out, systems, models, grid, n, reads, agent_system=systems[-1])
"""

README = ROOT / "benchmarks" / "README.md"
BEGIN, END = "<!-- analysis_scale:begin -->", "<!-- analysis_scale:end -->"

FLOOR = """
import sys, msgspec
decode = msgspec.json.decode
n = 0
for path in sys.argv[1:]:
    with open(path, "rb") as fh:
        for line in fh:
            decode(line)
            n += 1
print(n, "records decoded")
"""


CODE = ROOT  # the thetalker the commands run (--code: e.g. main's checkout, the baseline)


def run_child(
    argv: list[str], log: Path, code: Path | None = None
) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MB, exit status) of one command, run with `code`'s thetalker.
    CPU is the command's own and its children's (user + system): on a shared machine its
    wall time moves with the other work, its CPU time far less."""
    env = dict(os.environ, PYTHONPATH=str(code or CODE))
    with log.open("w") as out:
        t0 = time.perf_counter()
        # Run from the checkout itself: `python -m` puts the working folder first on the path.
        where = code or CODE
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=where)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, proc.returncode


def settings_json(systems: list[str], models: list[str], grid: list[int]) -> str:
    """The report settings (thetalker.report.settings.ReportSettings' JSON) of the matrix."""
    return json.dumps(
        {
            "models": models,
            "systems": systems,
            "headline": grid[-1],
            "ratio": [systems[0], systems[1]],
            "gpu_hour_usd": 2.0,
            "min_continuity_pct": 95.0,
            "ttfa_slo_s": None,
            "grid": grid,
            "slo": {"min_continuity_pct": 95.0},
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def py(*args: str) -> list[str]:
    return [sys.executable, *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--point-n", type=int, default=100_000, help="requests of the point")
    parser.add_argument("--reads", type=int, default=100, help="reads per request (mean)")
    parser.add_argument("--systems", type=int, default=4)
    parser.add_argument("--models", type=int, default=8, help="systems x models = bench jobs")
    parser.add_argument("--grid", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64, 128])
    parser.add_argument("--matrix-n", type=int, default=312, help="requests per matrix point")
    parser.add_argument("--matrix-reads", type=int, default=40, help="reads per matrix request")
    parser.add_argument("--skip-point", action="store_true")
    parser.add_argument("--skip-matrix", action="store_true")
    parser.add_argument("--workdir", type=Path, help="keep the files here (default: a temp dir)")
    parser.add_argument(
        "--jobs", type=int, default=1, help="points' and agent's --jobs, as the rules' threads"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout (e.g. main's) whose code runs each command too, just before this one",
    )
    parser.add_argument("--only", nargs="*", help="the matrix commands to time (default: all)")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout whose code runs")
    parser.add_argument("--write-readme", action="store_true")
    parser.add_argument("--note", default="", help="conditions, written with the table")
    args = parser.parse_args(argv)
    global CODE
    CODE = args.code.resolve()

    work = (args.workdir or Path(tempfile.mkdtemp(prefix="thetalker-scale-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    jobs = ["--jobs", str(args.jobs)] if args.jobs > 1 else []
    load_before = os.getloadavg()[0]

    def measure(what: str, label: str, argv: list[str], floor: Row | None) -> Row:
        """Run one command (after the same with --baseline's code); its Row."""
        if floor is not None and args.only and label not in args.only:
            return Row(what, label, 0.0, 0.0, 0.0, 0)  # not asked for (outputs kept from before)
        if args.baseline is not None and floor is not None:  # the same command, main's code
            base = [a for a in argv if a not in jobs]
            got = run_child(base, work / f"{label}.base.log", args.baseline.resolve())
            rows.append(Row(what, f"{label} (baseline)", *got, floor))
            print(rows[-1].line(), flush=True)
        rows.append(Row(what, label, *run_child(argv, work / f"{label}.log"), floor))
        print(rows[-1].line(), flush=True)
        return rows[-1]

    if not args.skip_point:
        point = work / "point" / "runs" / "synthetic" / "m" / "c64" / "records.jsonl"
        if not point.is_file():
            t0 = time.perf_counter()
            gen = [str(ROOT), "point", str(point), str(args.point_n), str(args.reads)]
            subprocess.run(py("-c", GENERATE, *gen), check=True)
            print(f"wrote {point} in {time.perf_counter() - t0:.0f} s", flush=True)
        size = point.stat().st_size / 1e6
        what = f"point {args.point_n:,} x {args.reads} ({size:.0f} MB)"
        floor = measure(what, "floor", py("-c", FLOOR, str(point)), None)
        measure(
            what,
            "points",
            py(
                "-m",
                "thetalker.report.points",
                *jobs,
                "--out",
                str(work / "point_points.csv"),
                "--",
                str(point),
            ),
            floor,
        )

    if not args.skip_matrix:
        systems = [f"sys{k}" for k in range(args.systems)]
        models = [f"model{k}" for k in range(args.models)]
        matrix = work / "matrix"
        if not (matrix / "runs").is_dir():
            t0 = time.perf_counter()
            grid = ",".join(map(str, args.grid))
            gen = [str(ROOT), "matrix", str(matrix), ",".join(systems), ",".join(models), grid]
            gen += [str(args.matrix_n), str(args.matrix_reads)]
            subprocess.run(py("-c", GENERATE, *gen), check=True)
            print(f"wrote the matrix in {time.perf_counter() - t0:.0f} s", flush=True)
        files = sorted(str(p) for p in (matrix / "runs").rglob("records.jsonl"))
        agent = [f for f in files if f"/{systems[-1]}/" in f]
        copy = work / "matrix_b"
        if not copy.is_dir():
            shutil.copytree(matrix, copy)
        n_records = sum(Path(f).read_bytes().count(b"\n") for f in files)
        size = sum(Path(f).stat().st_size for f in files) / 1e6
        what = f"matrix {len(files)} points, {n_records:,} records ({size:.0f} MB)"
        floor = measure(what, "floor", py("-c", FLOOR, *files), None)
        out = work / "out"
        out.mkdir(exist_ok=True)
        settings = settings_json(systems, models, args.grid)
        points_csv = str(out / "points.csv")
        stage = measure(
            what,
            "points",
            py("-m", "thetalker.report.points", *jobs, "--out", points_csv, "--", *files),
            floor,
        )
        metrics = [str(Path(f).with_name("server_metrics.json")) for f in files]
        stage += measure(
            what,
            "server_table",
            py(
                "-m",
                "thetalker.report.server",
                "--server-metrics",
                *metrics,
                "--table",
                str(out / "server.md"),
                "--figure",
                str(out / "server.png"),
            ),
            floor,
        )
        stage += measure(
            what,
            "agent_table",
            py(
                "-m",
                "thetalker.report.agent",
                *jobs,
                "--records",
                *agent,
                "--table",
                str(out / "agent.md"),
                "--figure",
                str(out / "agent.png"),
            ),
            floor,
        )
        for rule, module in (("tables", None), ("by_rate", "by_rate"), ("capacity", "capacity")):
            if module is None:
                argv2 = py(
                    "-m",
                    "thetalker.report.tables",
                    "--points",
                    points_csv,
                    "--settings",
                    settings,
                    "--throughput",
                    str(out / "throughput.md"),
                    "--continuity",
                    str(out / "continuity.md"),
                    "--ttfa",
                    str(out / "ttfa.md"),
                    "--cost",
                    str(out / "cost.md"),
                )
            else:
                argv2 = py(
                    "-m",
                    f"thetalker.report.{module}",
                    "--points",
                    points_csv,
                    "--settings",
                    settings,
                    "--table",
                    str(out / f"{rule}.md"),
                    "--figure",
                    str(out / f"{rule}.png"),
                )
            stage += measure(what, rule, argv2, floor)
        peak = max(r.mb for r in rows if r.what == what and "baseline" not in r.label)
        rows.append(Row(what, "table stage", stage.wall, stage.cpu, peak, 0, floor))
        print(rows[-1].line(), flush=True)
        measure(
            what,
            "compare",
            py(
                "-m",
                "thetalker.cli.compare",
                str(matrix),
                str(copy),
                "--csv",
                str(out / "compare.csv"),
            ),
            floor,
        )

    table = render(rows)
    print(table)
    if args.write_readme:
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        head = (
            f"Last run: {when}, {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; load average {load_before:.1f} before, "
            f"{os.getloadavg()[0]:.1f} after" + (f"; {args.note}" if args.note else "") + "."
        )
        text = README.read_text()
        block = f"{BEGIN}\n{head}\n\n{table}\n{END}"
        if BEGIN in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
        else:
            text += "\n" + block + "\n"
        README.write_text(text)
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r.rc == 0 for r in rows) else 1


@dataclass
class Row:
    what: str
    label: str
    wall: float
    cpu: float
    mb: float
    rc: int
    floor: Row | None = None  # the floor row of the same input

    def __add__(self, other: Row) -> Row:  # a stage: the commands' times summed
        return Row(self.what, "stage", self.wall + other.wall, self.cpu + other.cpu, 0.0, 0)

    def ratios(self) -> tuple[str, str]:
        if self.floor is None:
            return "", ""
        return f"{self.wall / self.floor.wall:.1f}x", f"{self.cpu / self.floor.cpu:.1f}x"

    def line(self) -> str:
        times = f"{self.wall:8.2f} s {self.cpu:8.2f} s CPU {self.mb:6.0f} MB"
        return f"{self.what:>24} {self.label:<24} {times} rc={self.rc}"


def render(rows: list[Row]) -> str:
    lines = [
        "| input | command | wall s | CPU s | peak MB | wall x floor | CPU x floor | exit |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        xw, xc = r.ratios()
        lines.append(
            f"| {r.what} | {r.label} | {r.wall:.2f} | {r.cpu:.2f} | {r.mb:.0f} | {xw} | {xc} "
            f"| {r.rc} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
