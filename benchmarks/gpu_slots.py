"""Wall time of the published-shaped run on a simulated 4-GPU node, one GPU at a time against
all four at once (issue 24). Printed, never asserted: tests/workflow/test_workflow_gpus.py
checks the facts (four jobs at once on four GPUs), this measures what they buy.

    python benchmarks/gpu_slots.py [--startup-s 3]

Each stand-in server "loads" for --startup-s seconds (a real server loads for minutes), so
the gain comes from starting the four servers side by side, as on a real node.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.workflow_copy import SNAKEMAKE, copy_workflow, smk_env  # noqa: E402


def run(gpus: int, startup_s: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        work = copy_workflow(Path(tmp) / "wf")
        shutil.copytree(REPO / "tests" / "configs", work / "configs")
        env = smk_env(
            STANDIN_GPUS="4",
            STANDIN_STARTUP_S=str(startup_s),
            STANDIN_GPU_STATE=str(Path(tmp) / "state"),
            THETALKER_GPU_SLOTS_DIR=str(Path(tmp) / "slots"),
        )
        env.pop("CUDA_VISIBLE_DEVICES", None)
        cmd = [SNAKEMAKE, "results/points.csv", "--configfile", "configs/gpu4.yaml"]
        cmd += ["--cores", "4", "--resources", f"gpu={gpus}"]
        start = time.monotonic()
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        took = time.monotonic() - start
        if done.returncode != 0:
            sys.exit(done.stderr[-3000:])
        return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--startup-s", type=float, default=3.0)
    args = parser.parse_args()
    one = run(1, args.startup_s)
    four = run(4, args.startup_s)
    print(f"gpu=1: {one:.1f} s   gpu=4: {four:.1f} s   ratio {four / one:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
