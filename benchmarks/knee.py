"""Where the default configuration's knee falls on this machine: continuity and first audio
against load for the fair (`local`) and fifo (`local-stock`) systems.

The figures the knee test once asserted (fair: 100% at 1 stream, under 95% at the top of the
grid; fifo: 95% or more at the top, first audio p50 more than 3x that at 1 stream) depend on
the CPU and on what else runs on it, so they are printed here, never asserted.
tests/workflow/test_workflow_knee.py asserts the shape that holds on any machine.

    python benchmarks/knee.py                  # runs the default config on a temporary copy
    python benchmarks/knee.py --results DIR    # reads DIR/runs/... of a finished run
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from thetalker.data.record_reads import read_records
from thetalker.metrics import summarize_point

REPO = Path(__file__).resolve().parents[1]
PARTS = ("Snakefile", "rules", "scripts", "config", "report", "envs", "profiles", "prompts",
         "reference", "deploy")  # fmt: skip
SYSTEMS = ("local", "local-stock")
TARGETS = ("results/tables/continuity.md", "results/tables/ttfa.md")


def run_default(dest: Path) -> Path:
    """`snakemake --cores 2` of the speed tables on a copy of the workflow; its results/."""
    for part in PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part)
        else:
            shutil.copy2(src, dest / part)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "snakemake", "--cores", "2", *TARGETS]
    subprocess.run(cmd, cwd=dest, env=env, check=True, stdout=subprocess.DEVNULL)
    return dest / "results"


def table(results: Path) -> list[str]:
    rows = ["| system | streams | continuity % | TTFA p50 s | TTFA p50 / at 1 stream |",
            "|---|---:|---:|---:|---:|"]  # fmt: skip
    for system in SYSTEMS:
        points = sorted(
            (int(p.name[1:]), p) for p in (results / "runs" / system / "piper-joe").glob("c*")
        )
        base = None
        for c, path in points:
            recs = [r for r in read_records(path / "records.jsonl") if not r.get("warmup")]
            s = summarize_point(recs, c)
            p50 = s["ttfa_s"]["p50"]
            base = p50 if base is None else base
            ratio = f"{p50 / base:.1f}x" if p50 and base else "n/a"
            rows.append(f"| {system} | {c} | {s['continuity_pct']:.1f} | {p50:.3f} | {ratio} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, help="results/ of a finished default run")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        results = args.results or run_default(Path(tmp))
        rows = table(results)
    print(
        f"{date.today()}, {platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
