"""Former name of `thetalker.serve_and_sweep` (the workflow's serve-and-sweep job), kept so
`python -m thetalker.bench` keeps working; "bench" alone now means `thetalker-bench`, one load
point. New code imports `thetalker.serve_and_sweep` and `thetalker.job`."""

from __future__ import annotations

import sys

from thetalker.job import JOB_FIELDS, BenchJob, BenchJobError
from thetalker.serve_and_sweep import bench_options, main, run_job, server_spec

__all__ = [
    "BenchJob",
    "BenchJobError",
    "JOB_FIELDS",
    "bench_options",
    "main",
    "run_job",
    "server_spec",
]

if __name__ == "__main__":
    sys.exit(main(prog="python -m thetalker.bench"))
