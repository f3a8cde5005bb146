"""A temporary copy of the Snakemake workflow, and Snakemake run in it.

The workflow tests (speed, quality, reliability, report, bad input) each run Snakemake on a
copy under `tmp_path`, so runs never share a `results/` or a `.snakemake/` folder. Deploy
files and the reference clip are copied, not linked, so a test may edit them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.processes import cmdline, processes_in, run_in_group

__all__ = [
    "REPO",
    "STANDINS",
    "WORKFLOW_PARTS",
    "SNAKEMAKE",
    "POINT",
    "SERVER_LOG",
    "copy_workflow",
    "tiny_config",
    "write_config",
    "smk_env",
    "smk",
    "smk_offline",
    "tiny_quality_config",
    "start_snakemake",
    "planned_jobs",
    "bench_jobs",
    "rules_of",
    "server_pids_in",
    "finished_lines",
    "wait_for",
    "serving_with_records",
]


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
# The one point of tiny_config().
POINT = Path("results/runs/local/piper-joe/c1")
SERVER_LOG = Path("results/logs/local/piper-joe/server.log")


def tiny_config(requests: int = 2, **changes: object) -> dict:
    """The embedded default with one system, one point: the smallest real run."""
    config = {
        "prompts": "prompts/seed_tts_eval_en_100.jsonl",
        "seed": 42,
        "warmup": 0,
        "concurrency": [1],
        "requests": {1: requests},
        "request_timeout_s": 60,
        "health_timeout_s": 120,
        "max_error_rate": 0.0,
        "report": {"headline_concurrency": 1, "ratio": ["local", "local"]},
        "systems": {"local": {"launcher": "local", "use_deploy_file": True}},
        "models": {
            "piper-joe": {
                "model_id": "piper-joe",
                "deploy": "piper-joe",
                "sample_rate": 22050,
                "voice": {"speaker": "joe"},
            }
        },
    }
    config.update(changes)
    return config


def copy_workflow(dest: Path, config: dict | None = None) -> Path:
    """The workflow's files under `dest` (created when missing); `config`, when given, is
    written as `tiny.yaml` there."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in WORKFLOW_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / part)
    if config is not None:
        (dest / "tiny.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def server_pids_in(directory: Path) -> list[int]:
    """PIDs of local servers (`python -m thetalker.server`) started inside `directory`."""
    return [pid for pid in processes_in(directory) if "thetalker.server" in cmdline(pid)]


def finished_lines(path: Path) -> list[dict]:
    """Every line of a records file, each parsed (a torn line fails the test)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def smk_env(standins: bool = True, **extra: str) -> dict[str, str]:
    """This environment, the stand-ins (vllm-omni, nvidia-smi, MPS control) first on PATH."""
    env = {**os.environ, **extra}
    if standins:
        env["PATH"] = f"{STANDINS}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def smk(
    workdir: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`snakemake ARGS` in `workdir`, output captured; `env` defaults to `smk_env()`. On a
    timeout (its own or the test's) Snakemake, its jobs and their servers are all stopped."""
    env = smk_env() if env is None else env
    return run_in_group([SNAKEMAKE, *args], cwd=workdir, env=env, timeout=timeout)


def write_config(workdir: Path, name: str, config: dict) -> str:
    """`config` as YAML at `workdir/configs/name`; returns the path Snakemake is given."""
    path = workdir / "configs" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return f"configs/{name}"


def planned_jobs(output: str) -> list[tuple[str, dict[str, str], str]]:
    """(rule, wildcards, reason) of each job a `-n` run lists."""
    jobs = []
    blocks = re.split(r"^(?:local)?rule (\w+):\n", output, flags=re.M)
    for rule, body in zip(blocks[1::2], blocks[2::2], strict=True):
        wildcards = {}
        match = re.search(r"^\s+wildcards: (.*)$", body, re.M)
        if match:
            wildcards = dict(kv.split("=", 1) for kv in match.group(1).split(", "))
        reason = re.search(r"^\s+reason: (.*)$", body, re.M)
        jobs.append((rule, wildcards, reason.group(1) if reason else ""))
    return jobs


def bench_jobs(output: str) -> set[tuple[str, str]]:
    """(system, model) of each bench job a `-n` run lists."""
    return {(w["system"], w["model"]) for rule, w, _ in planned_jobs(output) if rule == "bench"}


def rules_of(output: str) -> set[str]:
    return {rule for rule, _, _ in planned_jobs(output)}


def smk_offline(workdir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`snakemake ARGS` with no stand-ins on PATH and the hub off: Whisper must come from the
    bundled folder (the quality runs)."""
    return smk(workdir, *args, timeout=timeout, env=smk_env(standins=False, HF_HUB_OFFLINE="1"))


def tiny_quality_config() -> dict:
    """config/config.yaml (its quality section included) with the smallest counts."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    # No request-rate points: a grid of c1 and c2 alone.
    config.update(warmup=1, concurrency=[1, 2], requests={1: 2, 2: 3}, max_error_rate=0.0)
    config.update(request_rates=[])
    config["quality"].update(requests=4, n_resamples=2000)
    return config


def start_snakemake(cmd: list[str], cwd: Path) -> subprocess.Popen[str]:
    # Its own session: a signal to the group is what Ctrl-C in a terminal (SIGINT) or a
    # supervisor stopping a unit (SIGTERM) delivers: Snakemake and its jobs get it at once.
    return subprocess.Popen(
        cmd,
        cwd=cwd,
        env=smk_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def serving_with_records(
    workdir: Path, at_least: int, proc: subprocess.Popen[str]
) -> Callable[[], bool]:
    def ready() -> bool:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"exited with {proc.returncode} before serving:\n{out[-3000:]}")
        return bool(server_pids_in(workdir)) and (
            len(finished_lines(workdir / POINT / "records.jsonl")) >= at_least
        )

    return ready
