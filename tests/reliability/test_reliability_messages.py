"""Bad or late messages: each bad input is one line naming the file, field or line, exit 2,
before anything is sent or any server starts; a wrong number is refused, not trusted; a point
accepted with failures is warned about in the job's log and at the end of the Snakemake run.

Real processes throughout (thetalker-bench, python -m thetalker.quality.asr / serve_and_sweep,
Snakemake on a workflow copy) against the scripted server or nothing (port 9: discard).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from snakemake.utils import validate

from tests.support.paths import REPO
from tests.support.processes import kill_pids
from tests.support.scripted_server import ScriptedServer
from tests.support.workflow_copy import (
    POINT,
    SNAKEMAKE,
    copy_workflow,
    server_pids_in,
    serving_with_records,
    smk,
    start_snakemake,
    tiny_config,
    wait_for,
)
from thetalker.client import BenchOptions, run_benchmark
from thetalker.data.prompts import Prompt
from thetalker.pipeline.job import BenchJob
from thetalker.pipeline.job_from_config import bench_job
from thetalker.pipeline.verdicts import failed_points_warning, point_warning

NOWHERE = "http://127.0.0.1:9"  # discard: nothing may be sent there


def _run(*cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *cmd], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)  # fmt: skip


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "p.jsonl"
    path.write_text('{"sample_id": "a", "text": "hello there"}\n', encoding="utf-8")
    return path


def _bench(prompts: Path, *args: str, base_url: str = NOWHERE) -> subprocess.CompletedProcess:
    return _run("-m", "thetalker.cli.bench", "--base-url", base_url, "--texts-jsonl",
                str(prompts), "--out-dir", str(prompts.parent / "out"), "--speaker", "scripted",
                "--requests", "2", "--warmup", "0", *args)  # fmt: skip


# --- thetalker-bench ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "0"])
def test_a_threshold_that_is_no_positive_number_exits_2(prompts: Path, value: str):
    line = _one_line(done := _bench(prompts, "--threshold", value))
    assert done.returncode == 2 and "threshold_s" in line and value in line.lower()


@pytest.mark.parametrize(
    ("url", "why"),
    [("notaurl", "http://"), ("http://", "no host"), ("http://127.0.0.1:99999", "Port"),
     ("http://127.0.0.1:8091 x", "spaces")],
    ids=["no-scheme", "no-host", "bad-port", "space"],
)  # fmt: skip
def test_an_invalid_base_url_exits_2_before_sending(prompts: Path, url: str, why: str):
    line = _one_line(done := _bench(prompts, base_url=url))
    assert done.returncode == 2 and "base_url" in line and why in line
    assert not (prompts.parent / "out").exists()


def test_a_404_names_the_url_tried(scripted_server: ScriptedServer, prompts: Path):
    done = _bench(prompts, base_url=scripted_server.base_url + "/wrong/prefix")
    assert done.returncode == 2  # a 4xx: the request is refused as every one would be
    assert f"{scripted_server.base_url}/wrong/prefix/v1/audio/speech" in done.stderr
    assert "404" in done.stderr


def test_a_voice_404_names_the_url_tried(scripted_server: ScriptedServer):
    base = scripted_server.base_url + "/wrong/prefix"
    done = _run("-m", "thetalker.cli.voice", "--base-url", base, "list")
    assert done.returncode != 0 and "HTTP 404" in done.stderr
    assert f"GET {base}/v1/audio/voices" in done.stderr and "Traceback" not in done.stderr


def test_a_wrong_explicit_sample_rate_is_checked_against_the_server(
    scripted_server: ScriptedServer, prompts: Path
):
    scripted_server.sample_rate = 22050
    done = _bench(prompts, "--sample-rate", "16000", base_url=scripted_server.base_url)
    line = _one_line(done)
    assert done.returncode == 2 and "16000" in line and "22050" in line
    assert len(scripted_server.requests) == 1  # the check, nothing scored
    # Nothing ran, so no (empty) records file says a point did.
    assert not (prompts.parent / "out" / "records.jsonl").exists()
    # --trust-sample-rate: the old behaviour, for a server that cannot answer the check.
    ok = _bench(prompts, "--sample-rate", "16000", "--trust-sample-rate",
                base_url=scripted_server.base_url)  # fmt: skip
    assert ok.returncode == 0, ok.stderr


def test_the_right_explicit_rate_passes_its_check(scripted_server: ScriptedServer, prompts):
    done = _bench(prompts, "--sample-rate", "24000", base_url=scripted_server.base_url)
    assert done.returncode == 0, done.stderr
    summary = json.loads((prompts.parent / "out" / "summary.json").read_text())
    assert summary["sample_rate"] == 24000 and summary["n_ok"] == 2


def test_an_explicit_rate_against_the_deploy_names_rate_exits_2_before_sending(prompts: Path):
    # piper-joe streams 22050 Hz (thetalker.lifecycle.deploy)
    line = _one_line(done := _bench(prompts, "--deploy", "piper-joe", "--sample-rate", "16000"))
    assert done.returncode == 2 and "16000" in line and "22050" in line


@pytest.mark.parametrize("value", ["nan", "-0.1"])
def test_report_points_refuses_a_threshold_that_is_no_positive_number(tmp_path, value: str):
    done = _run("-m", "thetalker.report.points", "--out", str(tmp_path / "p.csv"),
                str(tmp_path / "r.jsonl"), "--continuity-thresholds-s", value)  # fmt: skip
    assert done.returncode == 2 and "--continuity-thresholds-s" in done.stderr.splitlines()[-1]


# --- python -m thetalker.quality.asr / thetalker.quality.wer ------------------------------------


def _saved_run(srv: ScriptedServer, out: Path) -> Path:
    opts = BenchOptions(base_url=srv.base_url, speaker="scripted", requests=2, warmup=0,
                        sample_rate=24000, save_audio_dir=str(out / "audio"))  # fmt: skip
    run_benchmark(opts, [Prompt("a", "one"), Prompt("b", "two")], out)
    return out / "records.jsonl"


def test_asr_on_a_non_audio_file_is_one_line_naming_it(scripted_server, tmp_path: Path):
    records = _saved_run(scripted_server, tmp_path / "run")
    victim = sorted((tmp_path / "run" / "audio").glob("*.wav"))[0]
    victim.write_text("this is no audio\n")
    done = _run("-m", "thetalker.quality.asr", "--records", str(records), "--out",
                str(tmp_path / "t.jsonl"), "--no-progress")  # fmt: skip
    line = _one_line(done)
    assert done.returncode == 2 and victim.name in line and "RIFF" in line


def test_asr_on_an_empty_records_file_is_an_error(tmp_path: Path):
    records = tmp_path / "records.jsonl"
    records.write_text("")
    done = _run("-m", "thetalker.quality.asr", "--records", str(records), "--out",
                str(tmp_path / "t.jsonl"), "--no-progress")  # fmt: skip
    line = _one_line(done)
    assert done.returncode == 2 and str(records) in line and "no scored records" in line
    assert not (tmp_path / "t.jsonl").exists()


# --- the bench job (python -m thetalker.pipeline.serve_and_sweep, as rules/bench.smk runs it) -


def _job(tmp_path: Path, **changes: Any) -> str:
    config = tiny_config()
    wf = copy_workflow(tmp_path / "wf", config)
    validated = yaml.safe_load((wf / "tiny.yaml").read_text())
    validate(validated, str(REPO / "config" / "schema.yaml"))
    cwd = os.getcwd()
    os.chdir(wf)
    try:
        data = bench_job(validated, "local", "piper-joe").to_dict()
    finally:
        os.chdir(cwd)
    data.update(changes)
    return json.dumps(data)


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"request_timeout_s": -1}, "request_timeout_s"), ({"max_error_rate": float("nan")},
     "max_error_rate"), ({"concurrency": [0], "requests": {"0": 2}}, "concurrency"),
     ({"requests": {"1": -3}}, "requests.1"), ({"voice": {"clone": "inline"}}, "voice.clone"),
     ({"prompts": "nosuch.jsonl"}, "prompts"), ({"deploy_file": "nosuch.yaml"}, "deploy_file")],
    ids=["timeout", "nan-rate", "zero-point", "negative-requests", "local-clone", "prompts",
         "deploy"],
)  # fmt: skip
def test_bad_job_values_exit_2_before_any_server(tmp_path: Path, changes: dict, field: str):
    job = _job(tmp_path, **changes)
    log = tmp_path / "server.log"
    done = subprocess.run(
        [sys.executable, "-m", "thetalker.pipeline.serve_and_sweep", "--job", job,
         "--server-log", str(log),
         "--records", str(tmp_path / "c1" / "records.jsonl")],
        capture_output=True, text=True, cwd=tmp_path / "wf", timeout=60,
    )  # fmt: skip
    line = _one_line(done)
    assert done.returncode == 2 and f"job field {field}" in line, line
    assert not log.exists()  # no server was started


def test_a_job_from_the_checked_config_still_builds(tmp_path: Path):
    assert BenchJob.from_json(_job(tmp_path)).launcher == "local"


# --- Snakemake: its own config file ---------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"systems: [1\n", ["config/config.yaml:2", "not valid YAML"]),
     (b"- a\n- b\n", ["config/config.yaml", "mapping", "list"]),
     (b"prompts: caf\xe9\n", ["config/config.yaml:1", "not UTF-8"])],
    ids=["bad-yaml", "a-list", "not-utf8"],
)  # fmt: skip
def test_a_broken_default_config_file_is_named(tmp_path: Path, content: bytes, words: list):
    wf = copy_workflow(tmp_path / "wf")
    (wf / "config" / "config.yaml").write_bytes(content)
    done = smk(wf, "-n", timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert any(all(w in line for w in words) for line in output.splitlines()), output[-2000:]


# --- a point accepted with failures ---------------------------------------------------------


def test_the_warning_line_of_a_point_with_failures():
    summary = {"n_scored": 10, "n_failed": 9, "errors_by_type": {"connection": 8, "truncated": 1}}
    line = point_warning(summary, "local/piper-joe c8")
    assert line == (
        "WARNING: local/piper-joe c8: 9 of 10 scored requests failed (90%: connection 8, "
        "truncated 1); its figures count only what succeeded"
    )
    assert point_warning({"n_scored": 10, "n_failed": 0}, "x") is None


def test_the_end_of_run_block_lists_each_point_with_failures(tmp_path: Path):
    paths = []
    for point, failed in (("c1", 0), ("c2", 3)):
        path = tmp_path / "runs" / "local" / "m" / point / "summary.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"n_scored": 4, "n_failed": failed}))
        paths.append(path)
    block = failed_points_warning([*paths, tmp_path / "absent" / "summary.json"])
    assert block is not None
    first, *rest = block.splitlines()
    assert first == "WARNING: 1 point(s) had failed requests:"
    assert len(rest) == 1 and rest[0].startswith("  local/m c2: 3 of 4 scored requests failed")


@pytest.mark.slow
def test_a_server_dying_under_max_error_rate_1_is_warned_in_the_log_and_at_the_end(
    workdir: Path,
):
    """The published setting accepts any failure rate: the run succeeds, and says so."""
    config = tiny_config(requests=400)
    config["max_error_rate"] = 1.0
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = start_snakemake([SNAKEMAKE, "results/points.csv", "--configfile", "tiny.yaml"], workdir)
    try:
        wait_for(serving_with_records(workdir, 2, proc), 240, "the bench job to finish 2")
        kill_pids(server_pids_in(workdir))
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    bench_log = (workdir / "results/logs/local/piper-joe/bench.log").read_text()
    assert "WARNING: local/piper-joe c1: " in bench_log and " of 400 scored requests failed" in (
        bench_log
    )
    assert "WARNING: 1 point(s) had failed requests:" in out
    assert "local/piper-joe c1: " in out and str(POINT / "summary.json") in out
