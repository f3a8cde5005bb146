"""The deploy-key probe (thetalker.lifecycle.deploy_reads) on the tier's real build, vllm-omni
0.30.0: its loader reads every key of the tier's deploy file, and a key it does not know is
named (so the empty answer is the build's, not a probe that sees nothing). 0.28.0's answer is
tested in tests/engine/builds/."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.engine.conftest import DEPLOY, ENGINE_ENV
from thetalker.lifecycle.deploy_reads import deploy_reads


def test_0_30_reads_every_key_of_the_tiny_deploy_file(engine_tier: Path) -> None:
    found = deploy_reads(engine_tier, DEPLOY, ENGINE_ENV)
    assert found["reason"] is None
    assert found["unread"] == []


def test_0_30_names_the_keys_it_drops(engine_tier: Path, tmp_path: Path) -> None:
    deploy = yaml.safe_load(DEPLOY.read_text())
    deploy["no_such_setting"] = 1
    deploy["stages"][1]["no_such_engine_arg"] = 2
    deploy["stages"][1]["block_size"] = 16  # an engine argument: kept by the build's filter
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(deploy))
    found = deploy_reads(engine_tier, path, ENGINE_ENV)
    assert found["unread"] == ["no_such_setting", "stages[1].no_such_engine_arg"]
