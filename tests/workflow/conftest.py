"""The workflow tier's expensive things, each done once per test session and shared."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.processes import processes_in
from tests.support.workflow_copy import (
    copy_workflow,
    smk,
    smk_env,
    smk_offline,
    tiny_quality_config,
    write_config,
)


@pytest.fixture(scope="session")
def quality_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(workflow copy, config path) after one real `snakemake --cores 2` of every target of
    the embedded default with tiny counts, quality stage included (the quality and report
    tests read it)."""
    workdir = copy_workflow(tmp_path_factory.mktemp("quality") / "wf")
    config = write_config(workdir, "tiny.yaml", tiny_quality_config())
    result = smk_offline(workdir, "--cores", "2", "--configfile", config)
    leftovers = processes_in(workdir)
    assert not leftovers, f"processes left running in the workflow copy: {leftovers}"
    assert result.returncode == 0, result.stderr[-4000:]
    return workdir, config


@pytest.fixture(scope="session")
def published_dry_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    """`snakemake -n --configfile config/published.yaml` on a copy, once for every test that
    reads the published plan (serving jobs, quality jobs, the agent mode)."""
    workdir = copy_workflow(tmp_path_factory.mktemp("published") / "wf")
    env = smk_env(HF_HUB_OFFLINE="1")
    result = smk(workdir, "-n", "--configfile", "config/published.yaml", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result
