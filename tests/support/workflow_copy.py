"""A temporary copy of the Snakemake workflow, and Snakemake run in it.

The workflow tests (speed, quality, reliability, report, bad input) each run Snakemake on a
copy under `tmp_path`, so runs never share a `results/` or a `.snakemake/` folder. Deploy
files and the reference clip are copied, not linked, so a test may edit them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.paths import REPO

__all__ = ["REPO", "STANDINS", "WORKFLOW_PARTS", "SNAKEMAKE", "copy_workflow", "smk_env", "smk"]


STANDINS = REPO / "tests" / "standins"
WORKFLOW_PARTS = (
    "Snakefile",
    "rules",
    "scripts",
    "config",
    "report",
    "envs",
    "profiles",
    "prompts",
    "reference",
    "deploy",  # a link to thetalker/deploy_configs: copytree copies what it points to
)
SNAKEMAKE = shutil.which("snakemake") or "snakemake"


def copy_workflow(dest: Path) -> Path:
    """The workflow's files under `dest` (created when missing)."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / part)
    return dest


def smk_env(standins: bool = True, **extra: str) -> dict[str, str]:
    """This environment, the stand-ins (vllm-omni, nvidia-smi, MPS control) first on PATH."""
    env = {**os.environ, **extra}
    if standins:
        env["PATH"] = f"{STANDINS}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def smk(
    workdir: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`snakemake ARGS` in `workdir`, output captured; `env` defaults to `smk_env()`."""
    return subprocess.run(
        [SNAKEMAKE, *args],
        cwd=workdir,
        env=smk_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
