"""The settings search's parts without a server (docs/settings.md): the settings a config's
knobs make, the checks that refuse a knob before any server starts, the screen's choice,
the plan's estimate, and the verdicts on constructed records: a setting made worse on
purpose never wins, two identical settings are not distinguishable, a clearly better one is."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import validate

from tests.support.paths import REPO
from thetalker.pipeline.capacity import ServiceLevel
from thetalker.pipeline.config_checks import bench_job
from thetalker.pipeline.job import ConfigError
from thetalker.pipeline.settings_checks import check_settings
from thetalker.pipeline.settings_grid import STOCK, search_job, settings_of
from thetalker.pipeline.settings_plan import estimate_settings, format_settings_plan
from thetalker.pipeline.settings_screen import select
from thetalker.report.settings_rank import SettingResult, compare, envelope, rank

SCHEMA = str(REPO / "config" / "schema.yaml")


@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """config/settings-local.yaml, validated (defaults filled), paths from the repository."""
    monkeypatch.chdir(REPO)
    data = yaml.safe_load((REPO / "config" / "settings-local.yaml").read_text())
    validate(data, SCHEMA)
    return data


def knobs(config: dict[str, Any], **changes: list[Any]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["systems"]["local"]["settings"] = dict(changes)
    return out


def test_the_stock_setting_comes_first_and_is_added_when_the_list_leaves_it_out(config):
    found = settings_of(knobs(config, workers=[1, 3]), "local", "piper-joe")
    assert [s.label for s in found] == [STOCK, "workers=1", "workers=3"]
    assert found[0].values == {"workers": 2}  # deploy/piper-joe.yaml's own value
    assert len({s.sha256 for s in found}) == 3
    assert all(s.filename == f"deploy-{s.sha256[:12]}.yaml" for s in found)
    served = yaml.safe_load(found[1].text)
    assert served["workers"] == 1 and served["scheduling_policy"] == "round_robin"


def test_the_same_value_twice_is_one_setting(config):
    found = settings_of(knobs(config, workers=[2, 1, 1]), "local", "piper-joe")
    assert [s.label for s in found] == [STOCK, "workers=1"]


def test_a_settings_bench_job_carries_its_file_and_no_service_level(config):
    setting = settings_of(config, "local", "piper-joe")[1]
    job = search_job(bench_job(config, "local", "piper-joe"), config, setting, "x/deploy.yaml")
    assert job.deploy_file == "x/deploy.yaml" and job.deploy_sha256 == setting.sha256
    assert job.capacity is not None and job.capacity["slo"] is None
    other = copy.deepcopy(config)
    other["capacity"]["slo"] = {"max_audible_p95_s": 3.0}
    validate(other, SCHEMA)
    again = search_job(bench_job(other, "local", "piper-joe"), other, setting, "x/deploy.yaml")
    assert again == job


def test_flags_and_variables_make_argument_sets_with_the_server_default_as_stock(config):
    cfg = copy.deepcopy(config)
    cfg["systems"]["local"]["use_deploy_file"] = False
    cfg["systems"]["local"]["settings"] = {"--max-running": [8, 16], "env.THREADS": ["2"]}
    found = settings_of(cfg, "local", "piper-joe")
    assert found[0].label == STOCK and found[0].kind == "args"
    args = yaml.safe_load(found[-1].text)
    assert args == {"extra_args": ["--max-running", "16"], "env": {"THREADS": "2"}}


@pytest.mark.parametrize(
    ("settings", "search", "words"),
    [
        ({"workerz": [1, 2]}, {}, "systems.local.settings.workerz: the deploy file has no"),
        ({"synthesis.speed": [1.0]}, {}, "no 'speed' (knob path synthesis.speed)"),
        ({"workers": ["two"]}, {}, "settings.workers: value 'two' is a str, the stock value 2"),
        ({"scheduling_policy": [3]}, {}, "settings.scheduling_policy: value 3 is a int"),
        ({"workers": [0]}, {}, "setting workers=0:"),
        ({"workers": [1, 3, 4]}, {"max_settings": 3}, "4 settings (workers 3, the stock"),
        ({"workers": [1]}, {"budget_hours": 0.001}, "over settings_search.budget_hours"),
    ],
)
def test_a_bad_knob_is_refused_in_one_line_naming_it(config, settings, search, words):
    cfg = knobs(config, **settings)
    cfg["settings_search"].update(search)
    with pytest.raises(ConfigError) as info:
        check_settings(cfg, bench_job)
    message = str(info.value)
    assert words in message and "\n" not in message
    assert message.startswith("config field systems.local.settings")


def test_the_shipped_settings_config_passes_its_checks(config):
    check_settings(config, bench_job)


def test_the_engine_settings_config_passes_its_checks(monkeypatch):
    """config/settings-engine-cpu.yaml (the search on vllm-omni's real engine, run by the
    engine tier): its knobs are paths of the engine's deploy file, four settings with the
    stock one first, each a full search, its level first audio and failures."""
    monkeypatch.chdir(REPO)
    data = yaml.safe_load((REPO / "config" / "settings-engine-cpu.yaml").read_text())
    validate(data, SCHEMA)
    check_settings(data, bench_job)
    found = settings_of(data, "vllm-omni-cpu", "tiny-qwen3-tts")
    assert [s.label for s in found] == [
        STOCK,
        "initial_codec_chunk_frames=10",
        "max_num_seqs=1",
        "max_num_seqs=1+initial_codec_chunk_frames=10",
    ]
    assert yaml.safe_load(found[2].text)["stages"][0]["max_num_seqs"] == 1
    assert data["settings_search"]["screen"] is None
    level = ServiceLevel.from_spec(
        {**data["capacity"]["slo"], "min_continuity_pct": data["report"]["min_continuity_pct"]}
    )
    assert level.max_audible_p95_s == 1.5 and level.min_continuity_pct == 0


def test_the_plan_counts_the_screen_and_the_full_search_apart(config):
    (estimate,) = estimate_settings(config, bench_job)
    assert (estimate.settings, estimate.screened, estimate.searched) == (4, 4, 2)
    text = format_settings_plan([estimate])
    assert "4 x short point" in text and "2 x grid + bisection" in text
    assert "GPU-hours screening" in text and "GPU-hours full search" in text


def summary(n: int, failed: int = 0, continuity: float = 100.0, p95: float = 0.5) -> dict:
    return {"n_scored": n, "n_failed": failed, "n_inaudible": 0, "continuity_pct": continuity,
            "ttfa_audible_s": {"p95": p95}}  # fmt: skip


def test_the_screen_keeps_the_best_and_always_the_stock_setting():
    settings = [{"label": x, "sha256": x, "stock": x == STOCK} for x in (STOCK, "a", "b", "c")]
    summaries = {
        STOCK: summary(4, continuity=50.0),
        "a": summary(4, p95=0.9),
        "b": summary(4, p95=0.4),
        "c": summary(4, failed=1, p95=0.1),
    }
    result = select(settings, summaries, keep=1, load=4)
    kept = {r["label"]: r["kept"] for r in result["settings"]}
    assert kept == {STOCK: True, "a": False, "b": True, "c": False}
    ranks = {r["label"]: r["rank"] for r in result["settings"]}
    assert ranks == {"b": 1, "a": 2, STOCK: 3, "c": 4}


def test_without_a_screen_every_setting_is_searched():
    settings = [{"label": x, "sha256": x, "stock": x == STOCK} for x in (STOCK, "a")]
    assert all(r["kept"] for r in select(settings, None, keep=0)["settings"])


def records(load: int, audible: list[float], continuous: bool = True) -> list[dict]:
    """One scored record per prompt p0..pN (the same prompts for every setting)."""
    return [
        {"sample_id": f"p{k}", "ok": True, "ttfa_s": a * 0.5, "ttfa_audible_s": a,
         "max_underrun_s": 0.0 if continuous else 1.0, "continuity_ok": continuous}
        for k, a in enumerate(audible)
    ]  # fmt: skip


def setting(label: str, holds_up_to: int, audible: list[float], stock: bool = False):
    """A searched setting that holds the level up to `holds_up_to` streams, then loses
    continuity (loads 1, 2, 4, 8)."""
    result = SettingResult(label, stock, {})
    for load in (1, 2, 4, 8):
        ok = load <= holds_up_to
        recs = records(load, audible, continuous=ok)
        p95 = sorted(audible)[-1]
        result.loads[load] = summary(len(recs), continuity=100.0 if ok else 0.0, p95=p95)
        result.records[load] = recs
    return result


LEVEL = ServiceLevel()
AUDIBLE = [0.30, 0.35, 0.40, 0.32, 0.38, 0.31, 0.36, 0.33]


def test_a_setting_made_worse_on_purpose_never_wins():
    stock = setting(STOCK, 4, AUDIBLE, stock=True)
    one_stream = setting("max_active_streams=1", 1, [a + 0.6 for a in AUDIBLE])
    assert rank([one_stream, stock], LEVEL)[0] is stock
    assert rank([stock, one_stream], LEVEL)[0] is stock


def test_two_identical_settings_are_not_distinguishable():
    a = setting("a", 4, AUDIBLE)
    b = setting("b", 4, AUDIBLE)
    verdict = compare(*rank([a, b], LEVEL), LEVEL)
    assert verdict.load == 4 and not verdict.distinguishable
    assert verdict.describe().startswith("not distinguishable")


def test_a_setting_holding_more_streams_is_distinguishable_by_continuity():
    better = setting("better", 8, AUDIBLE)
    worse = setting("worse", 2, AUDIBLE)
    verdict = compare(*rank([worse, better], LEVEL), LEVEL)
    assert (verdict.load, verdict.figure) == (4, "not continuous")
    assert verdict.distinguishable


def test_the_envelope_names_the_best_first_audio_among_continuous_settings():
    fast = setting("fast", 2, [a * 0.5 for a in AUDIBLE])
    steady = setting("steady", 8, AUDIBLE)
    rows = {row["load"]: row for row in envelope([fast, steady], LEVEL)}
    assert rows[1]["best"] == "fast" and rows[4]["best"] == "steady"
    assert (rows[8]["holding"], rows[8]["measured"]) == (1, 2)


def test_screen_json_is_plain_json(tmp_path: Path):
    settings = [{"label": STOCK, "sha256": "s", "stock": True}]
    json.dumps(select(settings, {STOCK: summary(2)}, keep=1, load=2))


def test_thetalker_plan_prints_the_settings_search(config, capsys):
    from thetalker.cli.plan import main

    assert main(["--configfile", "config/settings-local.yaml"]) == 0
    out = capsys.readouterr().out
    assert "Settings search" in out and "| local | piper-joe | 4 | 4 x short point" in out


def test_a_vllm_omni_knob_is_a_dotted_path_into_its_deploy_file(monkeypatch):
    monkeypatch.chdir(REPO)
    chunk = "connectors.connector_of_shared_memory.extra.initial_codec_chunk_frames"
    config = {
        "deploy_dir": "deploy",
        "models": {"q": {"deploy": "qwen3tts06b"}},
        "systems": {
            "v": {
                "launcher": "vllm-omni",
                "use_deploy_file": True,
                # stage 0's stock value alone: one setting, but two knobs end alike
                "settings": {
                    "stages.0.max_num_seqs": [64],
                    "stages.1.max_num_seqs": [1, 4],
                    chunk: [4],
                },
            }
        },
    }
    found = settings_of(config, "v", "q")
    assert len(found) == 6  # max_num_seqs 64 (stock), 1, 4 x the chunk 16 (stock), 4
    assert found[0].values == {"stages.0.max_num_seqs": 64, "stages.1.max_num_seqs": 64, chunk: 16}
    labels = [s.label for s in found]
    assert "stages.1.max_num_seqs=1+initial_codec_chunk_frames=4" in labels
    served = yaml.safe_load(found[labels.index("stages.1.max_num_seqs=1")].text)
    assert served["stages"][1]["max_num_seqs"] == 1 and served["stages"][0]["max_num_seqs"] == 64


def test_thetalker_plan_prints_the_published_settings_search_gpu_hours(config, capsys):
    from thetalker.cli.plan import main

    assert main(["--configfile", "config/published.yaml"]) == 0
    out = capsys.readouterr().out
    assert "| vllm-omni | qwen3tts17b | 12 | 12 x short point" in out
    assert "GPU-hours screening" in out and "GPU-hours full search" in out


def test_settings_search_models_names_known_models(config):
    cfg = copy.deepcopy(config)
    cfg["settings_search"]["models"] = ["piper-jo"]
    with pytest.raises(ConfigError, match=r"^config field settings_search.models: unknown model"):
        check_settings(cfg, bench_job)


def test_requests_per_second_held_come_from_the_open_loop_points():
    result = setting("a", 4, AUDIBLE)
    result.rate_loads = {1.0: summary(4), 2.0: summary(4, continuity=50.0)}
    assert result.rate_capacity(LEVEL).label(" req/s") == "1 req/s"
    assert setting("b", 4, AUDIBLE).rate_capacity(LEVEL).label() == "n/a"
