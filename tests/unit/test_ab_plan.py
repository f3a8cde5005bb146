"""The A/B's plan without a server (docs/ab.md): the order the arms run in, the chain a rerun
resumes along, each arm's job, and the pairs refused before any server starts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import validate

from tests.support.paths import REPO
from thetalker.pipeline.ab_plan import ab_runs, arm_job, check_ab, previous_slot, slot_order
from thetalker.pipeline.config_checks import check_config, check_inputs
from thetalker.pipeline.job import ConfigError

SCHEMA = str(REPO / "config" / "schema.yaml")
VARIANT = "deploy/variants/piper-joe-one-stream.yaml"


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """config/ab-local.yaml, validated (defaults filled), paths from the repository."""
    monkeypatch.chdir(REPO)
    data = yaml.safe_load((REPO / "config" / "ab-local.yaml").read_text())
    validate(data, SCHEMA)
    return data


def with_pairs(config: dict[str, Any], **pairs: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["ab"]["pairs"] = pairs
    validate(out, SCHEMA)
    return out


def test_the_arms_alternate_so_that_drift_falls_on_both():
    assert slot_order(1) == [(1, "a"), (1, "b")]
    assert slot_order(2) == [(1, "a"), (1, "b"), (2, "b"), (2, "a")]  # A B B A
    assert slot_order(3)[4:] == [(3, "a"), (3, "b")]


def test_each_arm_waits_for_the_one_before_it():
    order = slot_order(3)
    assert previous_slot(3, *order[0]) is None
    assert [previous_slot(3, *slot) for slot in order[1:]] == order[:-1]


def test_the_shipped_config_passes_every_check(config):
    check_config(config)
    check_inputs(config)
    runs = ab_runs(config)
    assert [(r.pair, r.model) for r in runs] == [("one-stream", "piper-joe"), ("same", "piper-joe")]


def test_an_arm_serves_its_own_deploy_file_the_grid_once_and_keeps_its_audio(config):
    run = ab_runs(config)[0]
    a, b = arm_job(config, run, "a"), arm_job(config, run, "b")
    assert a.deploy_file == "deploy/piper-joe.yaml" and b.deploy_file == VARIANT
    assert a.deploy_sha256 != b.deploy_sha256 and b.deploy_sha256 is not None
    assert a.capacity is None and b.capacity is None and a.repeats == b.repeats == 1
    assert a.save_audio and b.save_audio
    # Everything measured is the same: only the deploy file differs.
    da, db = a.to_dict(), b.to_dict()
    assert {k for k in da if da[k] != db.get(k)} == {"deploy_file", "deploy_sha256"}


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        ({"system": "nope"}, "ab.pairs.p.b: unknown system 'nope' (systems: local"),
        (
            {"system": "local", "deploy": "deploy/variants/missing.yaml"},
            "ab.pairs.p.b.deploy: no such file deploy/variants/missing.yaml",
        ),
    ],
)
def test_a_pair_that_cannot_run_is_refused_naming_its_field(config, arm, message):
    bad = with_pairs(config, p={"a": "local", "b": arm})
    with pytest.raises(ConfigError, match="^config field " + message.replace("(", r"\(")):
        check_ab(bad)


def test_a_deploy_file_for_a_system_that_serves_none_is_refused(config):
    bad = with_pairs(config, p={"a": "local", "b": {"system": "plain", "deploy": VARIANT}})
    bad["systems"]["plain"] = {**bad["systems"]["local"], "use_deploy_file": False}
    with pytest.raises(ConfigError, match="ab.pairs.p.b.deploy: system 'plain' serves no deploy"):
        check_ab(bad)


def test_arms_that_would_measure_different_things_are_refused(config):
    bad = with_pairs(config, p={"a": "local", "b": "agent"})
    bad["systems"]["agent"] = {**copy.deepcopy(bad["systems"]["local"]), "protocol": "websocket"}
    validate(bad, SCHEMA)
    with pytest.raises(ConfigError) as err:
        check_ab(bad)
    message = str(err.value)
    assert message.startswith("config field ab.pairs.p: on piper-joe the arms differ in agent")
    assert message.endswith("an A/B compares servers, not measurements")
    assert "\n" not in message


def test_a_model_not_run_by_both_arms_is_refused(config):
    bad = with_pairs(config, p={"a": "local", "b": "other", "models": ["piper-joe"]})
    bad["systems"]["other"] = {**copy.deepcopy(bad["systems"]["local"]), "models": ["second"]}
    bad["models"]["second"] = copy.deepcopy(bad["models"]["piper-joe"])
    with pytest.raises(ConfigError, match="ab.pairs.p.models: 'piper-joe' is not run by both"):
        check_ab(bad)


def test_no_pairs_plan_nothing(config):
    assert ab_runs(with_pairs(config)) == []
    check_ab(with_pairs(config))
    assert Path(VARIANT).is_file()


def test_a_pair_may_run_its_own_number_of_rounds(config):
    one = with_pairs(
        config, p={"a": "local", "b": "local", "rounds": 5}, q={"a": "local", "b": "local"}
    )
    assert [(r.pair, r.rounds) for r in ab_runs(one)] == [("p", 5), ("q", 4)]  # ab.rounds


def test_the_plan_counts_a_server_start_for_every_arm(config):
    from thetalker.pipeline.ab_cost import estimate_ab, format_ab_plan

    rows = estimate_ab(config)
    assert [(e.pair, e.rounds, e.arms) for e in rows] == [("one-stream", 4, 8), ("same", 4, 8)]
    assert all(e.hours > 0 and not e.gpu for e in rows)
    one_round = estimate_ab(with_pairs(config, p={"a": "local", "b": "local", "rounds": 1}))
    assert one_round[0].arms == 2 and one_round[0].hours < rows[0].hours
    assert "| one-stream | piper-joe | 4 | 8 |" in format_ab_plan(rows)
    assert format_ab_plan([]) == ""
