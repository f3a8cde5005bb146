"""The agent mode in the workflow: `protocol: websocket` systems in both shipped configs, their
job spec and client options, the agent table and figure from records, and the plan of the
published matrix."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate as validate_and_fill

from tests.support.paths import REPO
from thetalker.pipeline import config_checks as wfc
from thetalker.pipeline.job import BenchJob
from thetalker.pipeline.serve_and_sweep import bench_options
from thetalker.report import agent as agent_report

ROOT = REPO


def checked(name: str) -> dict:
    config = yaml.safe_load((ROOT / "config" / name).read_text())
    validate_and_fill(config, str(ROOT / "config" / "schema.yaml"))
    return config


def test_default_config_has_a_local_agent_system() -> None:
    config = checked("config.yaml")
    assert wfc.agent_systems(config) == ["local-agent"]
    job = wfc.bench_job(config, "local-agent", "piper-joe")
    assert job.agent == {
        "protocol": "websocket",
        "text_pace": 40,
        "text_pace_unit": "tokens",
        "text_pace_jitter": 0,
        "split_granularity": "sentence",
    }
    assert job.launcher == "local" and job.deploy_file is not None
    # Round trip through params, and the options of a point.
    again = BenchJob.from_json(job.to_json())
    assert again == job
    opts = bench_options(again, "http://127.0.0.1:9", 2, None)
    assert opts.protocol == "websocket" and opts.text_pace == 40
    assert opts.text_pace_unit == "tokens" and opts.split_granularity == "sentence"


def test_whole_text_jobs_keep_their_params() -> None:
    config = checked("config.yaml")
    job = wfc.bench_job(config, "local", "piper-joe")
    assert job.agent is None
    assert "agent" not in json.loads(job.to_json())  # earlier runs' params are unchanged
    assert bench_options(job, "http://127.0.0.1:9", 1, None).protocol == "http"


def test_agent_settings_are_checked_by_the_schema() -> None:
    from snakemake.exceptions import WorkflowError

    config = checked("config.yaml")
    for bad in ({"text_pace_unit": "chars"}, {"split_granularity": "word"}, {"text_pace": -1}):
        broken = copy.deepcopy(config)
        broken["systems"]["local-agent"]["agent"].update(bad)
        with pytest.raises(WorkflowError, match=list(bad)[0]):
            validate_and_fill(broken, str(ROOT / "config" / "schema.yaml"))


def test_published_config_plans_the_agent_mode_on_vllm_omni(published_dry_run) -> None:
    config = checked("published.yaml")
    # vllm-omni's sentence-split socket beside Nari's, whose text streams into one request.
    assert wfc.agent_systems(config) == ["vllm-omni-agent", "nari-agent"]
    job = wfc.bench_job(config, "vllm-omni-agent", "qwen3tts17b")
    assert job.launcher == "vllm-omni" and job.agent["protocol"] == "websocket"
    assert job.model_id == "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
    out = published_dry_run.stdout + published_dry_run.stderr
    assert "results/tables/agent.md" in out
    assert "results/runs/vllm-omni-agent/qwen3tts17b/c32/records.jsonl" in out


def _session(i: int, ok: bool = True) -> dict:
    return {
        "request_index": i,
        "sample_id": f"s{i}",
        "warmup": False,
        "ok": ok,
        "t_submit_s": float(i),
        "wall_s": 2.0,
        "audio_s": 1.5,
        "ttfa_s": 0.5,
        "max_underrun_s": 0.0,
        "continuity_ok": ok,
        "stalls": 0,
        "split_granularity": "sentence",
        "text_piece_s": [0.0, 0.1, 0.2, 0.3],
        "ttfa_first_text_s": 0.4 + 0.1 * i,
        "ttfa_input_done_s": 0.1 * i,
        "sentence_lag_s": [0.3, 0.2],
        "sentence_heard_lag_s": [0.3, 0.4],
    }


def write_point(root: Path, system: str, n: int, records: list[dict]) -> Path:
    from thetalker.data.records import RECORD_FIELDS

    path = root / system / "piper-joe" / f"c{n}" / "records.jsonl"
    path.parent.mkdir(parents=True)
    with path.open("w") as fh:
        for r in records:
            full = {f: None for f in RECORD_FIELDS} | {"chunk_arrival_s": [], "chunk_bytes": []}
            # The fields every record carries (records.py checks their types on reading).
            full |= {"text": "Hello there.", "text_chars": 12, "connection_reused": False}
            full |= {"leading_silence_s": 0.0, "sample_rate": 24000, "underrun_events": 0}
            full |= {"stalls": 0, "stall_s": 0.0, "protocol": "websocket"}
            fh.write(json.dumps(full | r) + "\n")
    return path


def test_agent_table_figure_and_csv(tmp_path: Path) -> None:
    a = write_point(tmp_path, "local-agent", 1, [_session(0), _session(1), _session(2)])
    b = write_point(tmp_path, "local-agent", 4, [_session(0), _session(1, ok=False)])
    table, figure = tmp_path / "agent.md", tmp_path / "agent.png"
    rc = agent_report.main(
        ["--records", str(a), str(b), "--table", str(table), "--figure", str(figure)]
    )
    assert rc == 0 and figure.stat().st_size > 1000
    md = table.read_text()
    rows = [line for line in md.splitlines() if line.startswith("| local-agent")]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert cells[:4] == ["local-agent", "piper-joe", "1", "10 words/s, sentence"]
    assert cells[4].startswith("0.50 [")  # median of 0.4, 0.5, 0.6, with its interval
    assert "(1/2 failed)" in rows[1]
    csv = (tmp_path / "agent.csv").read_text().splitlines()
    assert csv[0].startswith("system,model,concurrency,pace,n_scored,n_ok")
    assert len(csv) == 3


def test_agent_table_names_a_misplaced_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text("")
    assert agent_report.main(["--records", str(path), "--table", str(tmp_path / "t.md")]) == 2
    assert "not under a c<N> point folder" in capsys.readouterr().err


@pytest.mark.slow
def test_the_agent_system_runs_against_the_standins_socket(tmp_path: Path) -> None:
    """The published agent system end to end: Snakemake starts the stand-in vllm-omni, the
    bench job drives its /v1/audio/speech/stream sessions, agent.md is made from the records
    (the stand-in's socket is checked against 0.30.0's in tests/contract/test_standin.py)."""
    import shutil

    from tests.support.processes import processes_in
    from tests.support.workflow_copy import copy_workflow, smk
    from thetalker.data.record_reads import read_records

    workdir = copy_workflow(tmp_path / "wf")
    shutil.copy2(ROOT / "tests" / "configs" / "standin_agent.yaml", workdir / "agent.yaml")
    targets = ("results/tables/agent.md", "results/tables/throughput.md")
    try:
        result = smk(workdir, "--cores", "2", *targets, "--configfile", "agent.yaml")
    finally:
        assert not processes_in(workdir), "a server outlived the run"
    assert result.returncode == 0, result.stderr[-3000:]
    for c in (1, 2):
        path = workdir / f"results/runs/vllm-omni-agent/qwen3tts17b/c{c}/records.jsonl"
        scored = [r for r in read_records(path) if not r["warmup"]]
        assert len(scored) == 2 and all(r["ok"] for r in scored), scored
        # Sessions, not single requests: text went out in pieces, audio came per sentence.
        assert all(r["text_piece_s"] and r["ttfa_first_text_s"] is not None for r in scored)
        assert all(len(r["chunk_bytes"]) >= 1 and r["audio_s"] > 0 for r in scored)
    table = (workdir / "results" / "tables" / "agent.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| vllm-omni-agent")]
    assert len(rows) == 2, table
