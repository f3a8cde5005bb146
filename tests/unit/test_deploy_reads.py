"""thetalker.lifecycle.deploy_reads: the probe's logic against a stand-in vllm-omni loader
(the real builds' loaders are tested in tests/engine/test_deploy_reads.py and
tests/engine/builds/), its report read back, and the unserved figures of a point's
server_metrics.json."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from thetalker.lifecycle.deploy_reads import (
    NEVER_OBSERVED,
    NOT_EXPORTED,
    NOTHING_IN_POINT,
    deploy_reads,
    unread_deploy_keys,
    unread_from_report,
    unserved_figures,
)

# A stand-in of vllm-omni's deploy loader, shaped as 0.28.0's and 0.30.0's: the top level read
# by name (READ_TOP), a stage's unreserved keys copied into typed fields or engine_extras, and
# the engine arguments filtered by a dataclass. JSON is YAML, so the stand-in needs no yaml.
STAGE_CONFIG = """
import dataclasses, json
from dataclasses import dataclass, field
from typing import Any

READ_TOP = {read_top}
RESERVED = {{"stage_id", "engine_extras", "default_sampling_params"}}

@dataclass
class StageDeployConfig:
    stage_id: int
    max_num_seqs: int | None = None
    default_sampling_params: dict | None = None
    engine_extras: dict = field(default_factory=dict)

@dataclass
class DeployConfig:
    stages: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)

def resolve_deploy_yaml(path):
    with open(path) as fh:
        return json.load(fh)

def _parse_stage(data):
    flat = {{k: v for k, v in data.items() if k not in RESERVED}}
    kwargs = {{"stage_id": data["stage_id"]}}
    if "max_num_seqs" in flat:
        kwargs["max_num_seqs"] = flat.pop("max_num_seqs")
    kwargs["default_sampling_params"] = data.get("default_sampling_params")
    kwargs["engine_extras"] = flat
    return StageDeployConfig(**kwargs)

def load_deploy_config(path):
    raw = resolve_deploy_yaml(path)
    if {iterate}:
        dict(raw.items())
    stages = [_parse_stage(s) for s in raw.get("stages", [])]
    return DeployConfig(stages, {{k: raw.get(k) for k in READ_TOP}})
"""
ARG_UTILS = """
from dataclasses import dataclass

@dataclass
class OmniEngineArgs:
    block_size: int = 16
    enforce_eager: bool = False
"""
UTILS = """
from dataclasses import fields

def filter_dataclass_kwargs(cls, kwargs):
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in kwargs.items() if k in names}
"""

DEPLOY = {
    "async_chunk": True,
    "model_runner": "v1",
    "stages": [
        {
            "stage_id": 0,
            "max_num_seqs": 4,
            "enforce_eager": True,
            "not_an_arg": 1,
            "default_sampling_params": {"unjudged_nested": 1},
        },
        {"stage_id": 1, "block_size": 32},
    ],
}


def _standin(tmp_path: Path, read_top: list[str], iterate: bool = False) -> Path:
    """A serving env whose python imports the stand-in `vllm_omni`."""
    root = tmp_path / "site"
    files = {
        "vllm_omni/config/stage_config.py": STAGE_CONFIG.format(
            read_top=repr(read_top), iterate=iterate
        ),
        "vllm_omni/engine/arg_utils.py": ARG_UTILS,
        "vllm_omni/entrypoints/utils.py": UTILS,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        for package in path.parents:
            if package == root:
                break
            (package / "__init__.py").touch()
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    return root


@pytest.fixture
def deploy_file(tmp_path: Path) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(json.dumps(DEPLOY))
    return path


def test_keys_the_loader_does_not_read_are_named_with_dotted_paths(tmp_path, deploy_file):
    site = _standin(tmp_path, ["async_chunk"])  # a build without model_runner
    env = {"PYTHONPATH": str(site)}
    found = deploy_reads(tmp_path / "venv", deploy_file, env)
    assert found["reason"] is None
    # max_num_seqs: a typed field; enforce_eager, block_size: kept by the engine-args filter;
    # default_sampling_params: read by name (its contents are not judged).
    assert found["unread"] == ["model_runner", "stages[0].not_an_arg"]
    assert len(found["deploy_sha256"]) == 64
    assert unread_deploy_keys(tmp_path / "venv", deploy_file, env) == found["unread"]


def test_a_build_that_reads_every_top_level_key_leaves_only_the_stage_key(tmp_path, deploy_file):
    site = _standin(tmp_path, ["async_chunk", "model_runner"])
    unread = unread_deploy_keys(tmp_path / "venv", deploy_file, {"PYTHONPATH": str(site)})
    assert unread == ["stages[0].not_an_arg"]


def test_a_loader_that_iterates_the_top_level_gives_none_with_the_reason(tmp_path, deploy_file):
    site = _standin(tmp_path, ["async_chunk"], iterate=True)
    found = deploy_reads(tmp_path / "venv", deploy_file, {"PYTHONPATH": str(site)})
    assert found["unread"] is None
    assert "iterates the whole top level" in found["reason"]


def test_a_vllm_omni_that_does_not_import_gives_none_with_the_reason(tmp_path, deploy_file):
    site = _standin(tmp_path, ["async_chunk"])
    (site / "vllm_omni" / "__init__.py").write_text("raise ImportError('no engine here')\n")
    found = deploy_reads(tmp_path / "venv", deploy_file, {"PYTHONPATH": str(site)})
    assert found["unread"] is None
    assert "vllm_omni.config.stage_config does not import" in found["reason"]


def test_a_missing_interpreter_or_deploy_file_gives_none_with_the_reason(tmp_path, deploy_file):
    found = deploy_reads(tmp_path / "no-venv", deploy_file)
    assert found["unread"] is None and "the probe did not run" in found["reason"]
    found = deploy_reads(tmp_path / "no-venv", tmp_path / "absent.yaml")
    assert found["unread"] is None and "absent.yaml" in found["reason"]


def test_a_report_is_read_back_in_file_order():
    report = {"keys": ["a", "b", "stages[0].c"], "read": ["b"]}
    assert unread_from_report(report) == ["a", "stages[0].c"]
    assert unread_from_report({"unknown": "why"}) is None


def _point(**families) -> dict:
    return {"available": True, "counters": {}, "histograms": {}, "void": {}, "resets": [],
            **families}  # fmt: skip


def _histogram(count: float) -> list[dict]:
    buckets = [["0.1", count], ["+Inf", count]]
    return [{"labels": {"model_name": "m"}, "buckets": buckets, "sum": 0.0, "count": count}]


def test_each_unserved_figure_says_why():
    # As a real 0.28.0 point: two histograms registered but never observed (no rows), the
    # stream counter not exported; and a row observed before the point, nothing in it.
    point = _point(histograms={"audio_ttfp_s": [], "audio_underrun_s": _histogram(0.0)})
    assert unserved_figures(point) == {
        "audio_ttfp_s": NEVER_OBSERVED,
        "audio_underrun_s": NOTHING_IN_POINT,
        "speech_stream_completed": NOT_EXPORTED,
    }


def test_observed_figures_are_served_and_continuity_ok_is_not_judged():
    point = _point(
        histograms={"audio_ttfp_s": _histogram(3.0), "audio_underrun_s": _histogram(3.0)},
        counters={
            "speech_stream_completed": [{"labels": {}, "value": 3.0}],
            # counts continuous streams only: none continuous is no sign of a figure unserved
            "audio_continuity_ok": [],
        },
    )
    assert unserved_figures(point) == {}


def test_a_point_without_metrics_or_with_a_voided_figure_says_nothing():
    assert unserved_figures({"available": False, "reason": "404"}) is None
    assert unserved_figures(_point(resets=["audio_ttfp_s"])) is None
    assert unserved_figures(_point(void={"audio_underrun_s": "exported twice"})) is None
