"""The plan before the run (thetalker.pipeline.plan, thetalker-plan), with numbers worked by
hand: the RTFx curve, one job's seconds, the GPU-hours, the wall time of jobs laid longest
first on the GPUs that run at once, and after a run what each job took by its provenance."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.support.paths import REPO
from thetalker.cli import plan as plan_cli
from thetalker.pipeline.job import BenchJob
from thetalker.pipeline.plan import JobEstimate, Plan, estimate_job, make_plan, rtfx_at

RATES = {
    "default": {
        "first_start_s": 600.0,
        "warm_start_s": 240.0,
        "audio_s_per_char": 0.1,
        "rtfx": {"8": 40.0, "32": 100.0},
    },
    "models": {},
}


def job(**over) -> BenchJob:
    base = dict(
        system="vllm-omni",
        model="m",
        launcher="vllm-omni",
        model_id="org/m",
        deploy_file=None,
        deploy_sha256=None,
        env={},
        extra_args=(),
        mps=False,
        sample_rate=24000,
        language="English",
        voice={"speaker": "ryan"},
        ref_audio=None,
        ref_text=None,
        prompts=str(REPO / "prompts/seed_tts_eval_en_100.jsonl"),
        concurrency=(8, 32),
        requests={8: 100, 32: 300},
        warmup=0,
        seed=42,
        request_timeout_s=30.0,
        health_timeout_s=60.0,
        max_error_rate=0.0,
        save_audio=False,
    )
    names = {f.name for f in dataclasses.fields(BenchJob)}
    return BenchJob(**{k: v for k, v in {**base, **over}.items() if k in names})


def test_the_rtfx_curve_is_linear_between_proportional_below_flat_above():
    curve = {"8": 40.0, "32": 100.0}
    assert rtfx_at(curve, 4) == pytest.approx(20.0)  # 40 * 4 / 8
    assert rtfx_at(curve, 20) == pytest.approx(70.0)  # halfway from 40 to 100
    assert rtfx_at(curve, 64) == pytest.approx(100.0)


def test_one_jobs_seconds_by_hand():
    # 10 characters a request -> 1 s of audio; c8: 100 / 40 = 2.5 s; c32: 300 / 100 = 3 s.
    est = estimate_job(job(), RATES, mean_chars=10.0, first_on_gpu=True)
    assert est.points == (("c8", 100), ("c32", 300))
    assert est.requests_s == pytest.approx(5.5)
    assert est.start_s == 600.0 and est.search_s == 0.0 and est.rate_source == "default"
    warm = estimate_job(job(warmup=2, repeats=2), RATES, 10.0, first_on_gpu=False)
    assert warm.start_s == 240.0
    assert warm.points == (("c8", 204), ("c32", 604))  # (requests + warm-up) x rounds
    assert warm.requests_s == pytest.approx(2 * (102 / 40 + 302 / 100))


def test_the_search_and_rate_points_add_their_requests():
    est = estimate_job(
        job(
            capacity={"max_steps": 3, "min_continuity_pct": 95.0, "ttfa_slo_s": None},
            request_rates=(2.0,),
            rate_requests=10,
        ),
        RATES,
        10.0,
        True,
    )
    assert est.points[-1] == ("r2", 10)
    assert est.requests_s == pytest.approx(5.5 + 10 / 2.0)
    assert est.search_s == pytest.approx(3 * 300 / 100)  # 3 points the size of c32


def test_published_and_stated_rates_and_a_cpu_job():
    rates = {**RATES, "models": {"m": {"rtfx": {"32": 50.0}}}}
    assert estimate_job(job(), rates, 10.0, True).rate_source == "plan"
    assert estimate_job(job(model="moss"), RATES, 10.0, True).rate_source == "published"
    local = estimate_job(job(launcher="local", system="local"), RATES, 10.0, True)
    assert not local.gpu
    assert Plan(1, [local]).gpu_hours == 0.0 and Plan(1, [local]).wall_hours > 0


def test_wall_time_lays_the_longest_jobs_first():
    def est(hours: float) -> JobEstimate:
        return JobEstimate("s", "m", (), hours * 3600, 0.0, 0.0, "default")

    plan = Plan(2, [est(h) for h in (1, 2, 3, 2)])
    assert plan.gpu_hours == pytest.approx(8.0)
    assert plan.wall_hours == pytest.approx(4.0)  # 3+1 and 2+2
    assert Plan(8, plan.jobs).wall_hours == pytest.approx(3.0)


def test_make_plan_starts_the_first_job_on_each_gpu_cold():
    plan = make_plan([job(model=f"m{i}") for i in range(3)], RATES, gpus=2)
    assert [j.start_s for j in plan.jobs] == [600.0, 600.0, 240.0]


def test_the_cli_prints_every_published_job_and_the_bill(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert plan_cli.main(["--configfile", "config/published.yaml", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    for system in ("vllm-omni", "thestage-vllm-omni"):
        assert f"| {system} | qwen3tts17b | c1 (" in out
    assert "GPU slot(s) at once" in out and "GPU-hours" in out and "(published)" in out


def test_after_a_run_each_job_shows_what_it_took(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    point = tmp_path / "results/runs/local/piper-joe/c1"
    point.mkdir(parents=True)
    (point / "provenance.json").write_text(
        json.dumps(
            {"started_at": "2026-12-01T10:00:00+00:00", "ended_at": "2026-12-01T10:30:00+00:00"}
        )
    )
    assert plan_cli.main(["--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "| estimate | took |" in out
    assert out.count("| 0.50 h |") == 1  # local/piper-joe's speed job took half an hour


def test_a_bad_config_is_one_line_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("concurrency: [0]\n")
    assert (
        plan_cli.main(["--configfile", str(bad), "--schema", str(REPO / "config/schema.yaml")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"thetalker-plan: {bad}: ") and "\n" not in err


@pytest.mark.parametrize(
    ("rates", "line"),
    [
        ({"rtfx": {"32": 0}}, "rtfx.32: must be a positive finite number (got 0)"),
        ({"rtfx": {}}, "rtfx: must be a non-empty mapping {concurrency: RTFx} (got {})"),
        ({"rtfx": {"32": "fast"}}, "rtfx.32: must be a positive finite number (got 'fast')"),
        ({"rtfx": {"0": 100}}, "rtfx: key '0' is no concurrency (an integer >= 1)"),
        ({"rtfx": {"1": 50, "01": 60}}, "rtfx: keys '1' and '01' both mean 1"),
        ({"audio_s_per_char": "x"}, "audio_s_per_char: must be a positive finite number"),
        ({"warm_start_s": -1}, "warm_start_s: must be a positive finite number (got -1)"),
        ({"rtfX": {"32": 100}}, "rtfX: unknown rate (known: first_start_s, warm_start_s"),
    ],
    ids=["zero", "empty", "string", "c0", "same-c", "per-char", "negative", "unknown"],
)
def test_every_plan_rate_is_checked_as_nan_is(tmp_path, capsys, monkeypatch, rates, line):
    """Issue 36 item 6: a rate of 0, `{}` or a non-number was a traceback
    (ZeroDivisionError, IndexError, ValueError); now one line naming the field, exit 2."""
    import yaml

    monkeypatch.chdir(REPO)
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    model = next(iter(config["models"]))
    config["plan"] = {"models": {model: rates}}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert plan_cli.main(["--configfile", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"thetalker-plan: {path}: config field plan.models.{model}.{line}")
    assert "\n" not in err
