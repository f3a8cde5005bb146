"""The one probe for the Slurm tests: a cluster that answers and a node that takes jobs.

Started by `.ci/slurm-up.sh` (docs/cluster.md). Without one the test skips with the reason,
or fails with it under CI (tests/support/tiers.py).
"""

from __future__ import annotations

import shutil
import subprocess

from tests.support.tiers import unavailable

__all__ = ["USABLE_STATES", "TOOLS", "cluster_or_skip"]

# States in which the node takes our jobs (mixed/allocated: busy, our jobs queue behind).
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
TOOLS = ("sinfo", "sbatch", "squeue", "scontrol", "scancel")


def cluster_or_skip() -> None:
    """Return when Slurm can run our jobs; else skip (fail under CI) naming why."""
    for tool in TOOLS:
        if shutil.which(tool) is None:
            unavailable(f"Slurm: {tool} not found (no Slurm client; .ci/slurm-up.sh starts one)")
    try:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30, check=False
        )
    except subprocess.TimeoutExpired:
        unavailable("Slurm: sinfo did not answer in 30 s")
    if done.returncode != 0:
        unavailable(f"Slurm: sinfo failed ({done.stderr.strip() or done.returncode})")
    states = {s.strip().rstrip("*~#") for s in done.stdout.split()}
    if not states & USABLE_STATES:
        unavailable(f"Slurm: no node takes jobs (sinfo states: {sorted(states)})")
