"""The audible onset's settings, from the config to the records: a -30 dBFS threshold stated
in the workflow's config reaches the job, the client's options and every record and summary
of a run against a scripted server on loopback, whose stream (hand-made PCM) is audible
later at -30 than at the default -45, or not at all."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from snakemake.utils import validate

from tests.support.paths import REPO
from tests.support.scripted_server import Script, ScriptedServer
from thetalker import metrics
from thetalker.client import run_benchmark
from thetalker.data.prompts import Prompt
from thetalker.data.record_reads import read_json, read_records
from thetalker.pipeline import config_checks as wfc
from thetalker.pipeline.serve_and_sweep import bench_options

RATE = 24000


def _square(seconds: float, amplitude: int) -> np.ndarray:
    """+a, -a, ...: every even-length frame has mean 0 and RMS exactly a."""
    return (amplitude * np.where(np.arange(int(seconds * RATE)) % 2 == 0, 1, -1)).astype("<i2")


# 0.3 s of zeros, 0.3 s at -40 dBFS (328: active at -45, not at -30), 0.4 s at -29 dBFS
# (1163: active at both). The onset: 0.29 s at -45 (the frame at 0.29 s holds 10 ms of the
# quiet square, -43 dBFS), 0.60 s at -30 (the one at 0.59 s mixes both, -31.7 dBFS).
QUIET_THEN_LOUD = np.concatenate(
    [np.zeros(int(0.3 * RATE), "<i2"), _square(0.3, 328), _square(0.4, 1163)]
).tobytes()
QUIET_ONLY = np.concatenate([np.zeros(int(0.3 * RATE), "<i2"), _square(0.7, 328)]).tobytes()


def external_config(base_url: str, **changes: Any) -> dict[str, Any]:
    """A config whose one system is the scripted server (launcher external), as
    rules/common.smk leaves it (validated, defaults filled, checked)."""
    config: dict[str, Any] = {
        "prompts": "prompts/seed_tts_eval_en_100.jsonl",
        "warmup": 0,
        "concurrency": [1],
        "requests": {1: 2},
        "report": {"headline_concurrency": 1, "ratio": ["scripted", "scripted"]},
        "systems": {
            "scripted": {"launcher": "external", "server": "vllm-omni", "base_url": base_url}
        },
        "models": {"m": {"model_id": "scripted", "voice": {"speaker": "ryan"}}},
        **changes,
    }
    config = copy.deepcopy(config)
    validate(config, str(REPO / "config" / "schema.yaml"))
    wfc.check_config(config)
    return config


def run_point(srv: ScriptedServer, out: Path, config: dict[str, Any]) -> tuple[dict, list[dict]]:
    """The job's one point, as serve_and_sweep runs it: its options against the server."""
    job = wfc.bench_job(config, "scripted", "m", hash_files=False)
    opts = bench_options(job, srv.base_url, 1, None)
    prompts = [Prompt("a", "hello there"), Prompt("b", "general kenobi")]
    summary = run_benchmark(opts, prompts, out)
    return summary, list(read_records(out / "records.jsonl"))


@pytest.mark.parametrize(
    ("pcm", "onset_at_45", "onset_at_30"),
    [(QUIET_THEN_LOUD, 0.29, 0.60), (QUIET_ONLY, 0.29, None)],
    ids=["later", "inaudible"],
)
def test_a_minus_30_dbfs_config_measures_every_record_by_its_rule(
    scripted_server: ScriptedServer, tmp_path: Path, pcm: bytes, onset_at_45, onset_at_30
):
    scripted_server.sample_rate = RATE
    scripted_server.default = Script(chunks=((0.0, len(pcm) // 2), (0.05, len(pcm) // 2)), pcm=pcm)
    default = external_config(scripted_server.base_url)
    stated = external_config(scripted_server.base_url, audible_onset={"threshold_dbfs": -30})

    s45, at_45 = run_point(scripted_server, tmp_path / "at45", default)
    s30, at_30 = run_point(scripted_server, tmp_path / "at30", stated)

    assert [r["ok"] for r in at_45 + at_30] == [True] * 4
    assert {r["audible_onset_rule"] for r in at_45} == {"abs-45dBFS/20ms/10ms/2"}
    assert {r["audible_onset_rule"] for r in at_30} == {"abs-30dBFS/20ms/10ms/2"}
    for rec in at_45:
        assert rec["leading_silence_s"] == pytest.approx(onset_at_45)
    for rec in at_30:
        if onset_at_30 is None:
            assert rec["audible"] is False and rec["ttfa_audible_s"] is None
        else:
            assert rec["leading_silence_s"] == pytest.approx(onset_at_30)
            assert rec["ttfa_audible_s"] > rec["ttfa_s"]
    # The summary says the settings the records used, in the file and as returned.
    for summary, out in ((s30, tmp_path / "at30"), (s45, tmp_path / "at45")):
        assert read_json(out / "summary.json")["audible_onset"] == summary["audible_onset"]
    assert s30["audible_onset"]["threshold_dbfs"] == -30.0
    assert s30["audible_onset"]["rule"] == s30["audible_onset_rule"] == "abs-30dBFS/20ms/10ms/2"
    assert s30["options"]["onset"]["threshold_dbfs"] == -30.0
    assert s45["audible_onset"] == metrics.DEFAULT_ONSET.to_dict()
    assert s30["n_inaudible"] == (2 if onset_at_30 is None else 0) and s45["n_inaudible"] == 0
    # Recomputed from a record and its audio, each record gives its own figures back.
    audio = np.frombuffer(pcm, "<i2")
    for rec in at_45 + at_30:
        again = metrics.record_metrics(rec, audio)
        assert again["audible_onset_rule"] == rec["audible_onset_rule"]
        assert again["leading_silence_s"] == (
            None if rec["leading_silence_s"] is None else pytest.approx(rec["leading_silence_s"])
        )
    assert json.dumps(s30["audible_onset"])  # plain JSON
