"""No secret written down: the config names a secret's variable, never its value; whatever is
recorded (provenance, the server record and log, the report, Snakemake's own files) is
redacted. Proven by a real run with a dummy secret in the environment and a grep of every
file it wrote."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.processes import processes_in
from tests.support.workflow_copy import copy_workflow, smk, smk_env
from thetalker.lifecycle.launch import ServerSpec, launch_server
from thetalker.lifecycle.readiness import ServerStartError
from thetalker.pipeline.provenance import collect_provenance
from thetalker.util.redact import (
    REDACTED,
    check_args,
    check_env_names,
    is_secret_name,
    redact_command,
    redact_config,
    redact_env,
    redact_url,
)

SLOW = REPO / "tests" / "support" / "slow_stop_server.py"
SECRET = "sk-h7-dummy-secret-4242"


# --- what counts as secret ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD", "DB_PASS", "MY_KEY"]
    + ["GITHUB_AUTH", "GOOGLE_APPLICATION_CREDENTIALS", "hf_token"],
)
def test_secret_looking_names(name):
    assert is_secret_name(name)
    assert redact_env({name: SECRET, "CUDA_VISIBLE_DEVICES": "0"}) == {
        name: REDACTED,
        "CUDA_VISIBLE_DEVICES": "0",
    }


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "CUDA_VISIBLE_DEVICES", "PATH"])
def test_harmless_names_are_kept(name):
    assert not is_secret_name(name)


def test_command_lines_lose_every_secret_value():
    command = ["vllm-omni", "serve", "m", "--api-key", SECRET, f"--api-key={SECRET}"]
    command += ["--hf-token", SECRET, "--max-num-batched-tokens", "512", "--tokenizer", "t"]
    command += [f"--url=http://user:{SECRET}@host:1/x"]
    redacted = redact_command(command)
    assert SECRET not in json.dumps(redacted)
    assert redacted[3:6] == ["--api-key", REDACTED, f"--api-key={REDACTED}"]
    assert redacted[8:12] == ["--max-num-batched-tokens", "512", "--tokenizer", "t"]
    assert redacted[-1] == f"--url=http://user:{REDACTED}@host:1/x"


def test_urls_and_configs():
    assert redact_url(f"http://bob:{SECRET}@127.0.0.1:8000/v1") == (
        f"http://bob:{REDACTED}@127.0.0.1:8000/v1"
    )
    assert redact_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    job = {"env": {"HF_TOKEN": SECRET}, "extra_args": ["--api-key", SECRET], "n": 1}
    job["nested"] = [{"command": ["x", f"--auth-token={SECRET}"]}]
    assert SECRET not in json.dumps(redact_config(job))
    assert redact_config(job)["n"] == 1


def test_the_config_refuses_a_secret_value_with_one_line():
    with pytest.raises(ValueError, match=r"systems.s.env.HF_TOKEN: looks like a secret.*"):
        check_env_names({"HF_TOKEN": SECRET}, "systems.s.env")
    with pytest.raises(ValueError, match=r"^x: --api-key would write a secret"):
        check_args(["--api-key", SECRET], "x")
    check_env_names({"THESTAGE_VLLM_OMNI": "0"}, "systems.s.env")
    check_args(["--max-num-batched-tokens", "512"], "x")


# --- the launcher ------------------------------------------------------------------------


def test_secret_env_reaches_the_server_and_no_file(tmp_path, monkeypatch):
    monkeypatch.setenv("THETALKER_TEST_TOKEN", SECRET)
    spec = ServerSpec(
        launcher="vllm-omni",
        model_id="m",
        executable=str(SLOW),
        log_path=tmp_path / "server.log",
        secret_env=["THETALKER_TEST_TOKEN"],
        extra_args=["--api-key", SECRET, f"--url=http://u:{SECRET}@h/"],
        env={"PLAIN": "1"},
        check_gpu=False,
        stop_grace_s=0.5,
    )
    try:
        with launch_server(spec) as server:
            environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
            assert f"THETALKER_TEST_TOKEN={SECRET}".encode() in environ
            assert (
                f"--api-key\0{SECRET}".encode() in Path(f"/proc/{server.pid}/cmdline").read_bytes()
            )
            assert server.env["THETALKER_TEST_TOKEN"] == REDACTED and server.env["PLAIN"] == "1"
            recorded = json.dumps(server.as_record()) + json.dumps(
                collect_provenance(server=server, config_slice={"system": "s"})
            )
            recorded += (tmp_path / "server.pid.json").read_text()
            assert SECRET not in recorded
    finally:
        for pid in map(int, re.findall(r"pid=(\d+)", (tmp_path / "server.log").read_text())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_a_secret_env_name_not_set_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("THETALKER_TEST_TOKEN", raising=False)
    spec = ServerSpec(
        launcher="local",
        model_id="m",
        log_path=tmp_path / "server.log",
        secret_env=["THETALKER_TEST_TOKEN"],
    )
    with (
        pytest.raises(
            ServerStartError, match=r"^secret_env: variable THETALKER_TEST_TOKEN is not set"
        ),
        launch_server(spec),
    ):
        pytest.fail("must not start")


# --- a real workflow run, every file it wrote grepped ------------------------------------

TINY = {
    "prompts": "prompts/seed_tts_eval_en_100.jsonl",
    "seed": 42,
    "warmup": 1,
    "concurrency": [1],
    "requests": {1: 2},
    "request_timeout_s": 60,
    "health_timeout_s": 120,
    "max_error_rate": 0.0,
    "report": {
        "headline_concurrency": 1,
        "gpu_hour_usd": 2.99,
        "min_continuity_pct": 95,
        "ratio": ["local", "local"],
    },
    "systems": {
        "local": {
            "launcher": "local",
            "use_deploy_file": True,
            "env": {"PLAIN_SETTING": "1"},
            "secret_env": ["THETALKER_TEST_TOKEN"],
        }
    },
    "models": {
        "piper-joe": {
            "model_id": "piper-joe",
            "deploy": "piper-joe",
            "sample_rate": 22050,
            "voice": {"speaker": "joe"},
        }
    },
}


@pytest.fixture
def workflow(tmp_path):
    dest = copy_workflow(tmp_path / "wf")
    yield dest
    leftovers = processes_in(dest)
    assert not leftovers, f"processes left running in the workflow copy: {leftovers}"


def test_a_secret_value_in_the_config_is_refused_before_any_job(workflow):
    config = json.loads(json.dumps(TINY))
    config["systems"]["local"]["env"]["HF_TOKEN"] = SECRET
    (workflow / "bad.yaml").write_text(yaml.safe_dump(config))
    result = smk(workflow, "-n", "--configfile", "bad.yaml")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "config field systems.local.env.HF_TOKEN: looks like a secret" in output
    assert SECRET not in output
    assert not (workflow / "results").exists()


@pytest.mark.slow
def test_a_real_run_writes_the_secret_nowhere(workflow):
    (workflow / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    env = smk_env(THETALKER_TEST_TOKEN=SECRET)
    result = smk(workflow, "--cores", "2", "--configfile", "tiny.yaml", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = smk(workflow, "--configfile", "tiny.yaml", "--report", "results/report.html", env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    provenance = json.loads(
        (workflow / "results/runs/local/piper-joe/c1/provenance.json").read_text()
    )
    assert provenance["server"]["env"]["THETALKER_TEST_TOKEN"] == REDACTED
    assert provenance["config"]["secret_env"] == ["THETALKER_TEST_TOKEN"]
    assert provenance["stock_contaminated"] is False
    written = [
        p for top in ("results", ".snakemake") for p in (workflow / top).rglob("*") if p.is_file()
    ]
    assert len(written) > 10 and any(p.name == "report.html" for p in written)
    assert not [p for p in written if SECRET.encode() in p.read_bytes()]
    assert SECRET not in result.stdout + result.stderr + report.stdout + report.stderr


# --- the client: its key from a variable, sent as a Bearer token, recorded by name only -------


@pytest.fixture
def keyed_server(monkeypatch):
    """The scripted speech server refusing /v1/* without `Authorization: Bearer SECRET` (as
    vllm does with --api-key); /health open. Yields (server, headers seen)."""
    from aiohttp import web

    import tests.support.scripted_server as scripted

    seen: list[str | None] = []
    make_app = scripted.make_app

    def keyed_app(server):
        app = make_app(server)

        @web.middleware
        async def require_key(request, handler):
            seen.append(request.headers.get("Authorization"))
            if request.path.startswith("/v1/") and seen[-1] != f"Bearer {SECRET}":
                return web.json_response({"error": {"message": "Unauthorized"}}, status=401)
            return await handler(request)

        app.middlewares.append(require_key)
        return app

    monkeypatch.setattr(scripted, "make_app", keyed_app)
    for name in ("THETALKER_API_KEY", "VLLM_API_KEY", "OPENAI_API_KEY", "MY_KEY_VAR"):
        monkeypatch.delenv(name, raising=False)
    with scripted.start_scripted_server(scripted.Script()) as server:
        yield server, seen


def _run(base_url: str, out: Path, **options):
    from thetalker.client import BenchOptions, run_benchmark
    from thetalker.data.prompts import load_prompts

    opts = BenchOptions(
        base_url=base_url,
        speaker="ryan",
        requests=2,
        warmup=0,
        sample_rate=24000,
        max_error_rate=1.0,
        **options,
    )
    prompts = load_prompts(REPO / "prompts" / "seed_tts_eval_en_100.jsonl")
    return run_benchmark(opts, prompts, out)


def test_the_client_sends_the_key_from_the_named_variable(keyed_server, tmp_path, monkeypatch):
    server, seen = keyed_server
    refused = _run(server.base_url, tmp_path / "none")
    assert refused["n_ok"] == 0  # no key: every request 401
    monkeypatch.setenv("MY_KEY_VAR", SECRET)
    summary = _run(server.base_url, tmp_path / "named", api_key_env="MY_KEY_VAR")
    assert summary["n_ok"] == 2 and seen[-1] == f"Bearer {SECRET}"
    monkeypatch.setenv("VLLM_API_KEY", SECRET)  # a default: the variable the server reads
    assert _run(server.base_url, tmp_path / "default")["n_ok"] == 2
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    assert summary["options"]["api_key_env"] == "MY_KEY_VAR"


def test_a_named_key_variable_that_is_not_set_is_one_line(tmp_path):
    from thetalker.client import OptionsError

    with pytest.raises(
        OptionsError, match=r"^option field api_key_env: --api-key-env: variable NOPE_"
    ):
        _run("http://127.0.0.1:9", tmp_path, api_key_env="NOPE_NOT_SET_VAR")


def test_a_password_in_the_base_url_is_not_in_the_summary(keyed_server, tmp_path):
    server, _ = keyed_server
    url = server.base_url.replace("http://", f"http://bob:{SECRET}@")
    summary = _run(url, tmp_path / "pw")
    assert summary["options"]["base_url"] == server.base_url.replace(
        "http://", f"http://bob:{REDACTED}@"
    )
    for path in (tmp_path / "pw").rglob("*"):
        assert SECRET not in path.read_text(errors="replace"), path


def test_voice_registration_and_thetalker_voice_send_the_key_too(
    keyed_server, monkeypatch, capsys, tmp_path
):
    from thetalker.api.speech import register_voice_blocking
    from thetalker.cli.voice import main as voice_main
    from thetalker.data.wavio import write_wav

    server, seen = keyed_server
    monkeypatch.setenv("THETALKER_API_KEY", SECRET)
    assert voice_main(["--base-url", server.base_url, "list"]) == 0
    assert seen[-1] == f"Bearer {SECRET}"
    clip = write_wav(tmp_path / "ref.wav", b"\0\1" * 48000, 24000)
    assert register_voice_blocking(server.base_url, "ref", clip, "A reference.")
    assert seen[-1] == f"Bearer {SECRET}"
    assert SECRET not in capsys.readouterr().out


# --- what argparse accepts, and every URL printed ------------------------------------------


def _secret_options(parser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if is_secret_name(o.lstrip("-"))]


def test_every_prefix_argparse_takes_for_a_secret_option_is_caught():
    # The rule behind `--api X`: the check covers what the parser accepts, not one spelling.
    from thetalker.server.__main__ import build_parser

    parser = build_parser()
    options = _secret_options(parser)
    assert "--api-key" in options
    for option in options:
        dest = next(a.dest for a in parser._actions if option in a.option_strings)
        for cut in range(3, len(option) + 1):
            prefix = option[:cut]
            try:
                taken = parser.parse_known_args([prefix, SECRET])[0]
            except SystemExit:  # ambiguous: argparse refuses it, nothing to catch
                continue
            if getattr(taken, dest) != SECRET:
                continue
            with pytest.raises(ValueError, match="would write a secret"):
                check_args([prefix, SECRET], "x")
            assert SECRET not in json.dumps(redact_command(["srv", prefix, SECRET]))
            assert SECRET not in json.dumps(redact_command(["srv", f"{prefix}={SECRET}"]))


def test_a_password_in_the_base_url_is_printed_nowhere(tmp_path, capsys):
    from thetalker.cli import bench

    texts = tmp_path / "t.jsonl"
    texts.write_text('{"sample_id": "a", "text": "Hello."}\n')
    common = ["--texts-jsonl", str(texts), "--out-dir", str(tmp_path / "o"), "--speaker", "joe"]
    for url in (f"http://bob:{SECRET}@127.0.0.1:99999", f"http://bob:{SECRET}@127.0.0.1:9"):
        with contextlib.suppress(SystemExit):
            bench.main(["--base-url", url, "--requests", "1", "--warmup", "0", *common])
        err = capsys.readouterr().err
        assert err and SECRET not in err and REDACTED in err, err
