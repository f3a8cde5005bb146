"""Bad input is refused before any server starts, with one line naming the file and the place.

Through Snakemake (`-n`, and a real run for the cases a dry run could miss) on a temporary copy
of the workflow: no bench job may start, so no server log and no results appear. Through
`thetalker-bench` where the input is its own (prompts, a reference clip): exit 2 and one line.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.config_checks import COMMON_SMK_CHECKS, parse_time_error
from tests.support.paths import REPO
from tests.support.workflow_copy import copy_workflow, smk, tiny_config
from thetalker.data import wavio

BAD_PROMPTS = {
    "broken.jsonl": '{"sample_id": "a", "text": "fine"}\n{"sample_id": "b", "text": \n',
    "notext.jsonl": '{"sample_id": "a", "text": "fine"}\n{"sample_id": "b"}\n',
    "empty.jsonl": "",
}


def write_clip(path: Path, seconds: float, rate: int = 16000) -> Path:
    return wavio.write_wav(path, b"\x00\x01" * int(seconds * rate), rate)


def _cloning(config: dict) -> dict:
    """The tiny config with its model cloning the reference clip (a registered voice)."""
    config["models"]["piper-joe"]["voice"] = {"clone": "registered", "name": "ref"}
    return config


def _cloning_server(config: dict) -> dict:
    """`_cloning` on servers that can clone (the embedded server cannot, and the config check
    says so before it reads the reference clip)."""
    for system in config["systems"].values():
        system.update(launcher="vllm-omni", use_deploy_file=False)
    return _cloning(config)


def _set(path: str, value: object) -> Callable[[dict], dict]:
    def edit(config: dict) -> dict:
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[key]
        node[last] = value
        return config

    return edit


def _rename_system(name: str) -> Callable[[dict], dict]:
    def edit(config: dict) -> dict:
        config["systems"] = {name: config["systems"]["local"]}
        config["report"]["ratio"] = [name, name]
        return config

    return edit


def _missing_serving_env(config: dict) -> dict:
    """A second system served from a venv that is not there (issue 45: a dry run took it)."""
    config["systems"]["vllm"] = {"launcher": "vllm-omni", "serving_env": "no-such-venv"}
    return config


def alias_bomb(levels: int = 9) -> str:
    """About 400 bytes of YAML that expand to 9**levels strings."""
    lines = ['l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for k in range(1, levels):
        lines.append(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


BAD_DEPLOY = {  # deploy/<name>.yaml
    "bomb": alias_bomb().encode(),
    "bad-yaml": b"workers: 1\nsynthesis: [1\n",
    "a-list": b"- workers\n- 2\n",
    "not-utf8": b"workers: 1\n# caf\xe9\n",
    "nan": b"synthesis:\n  length_scale: .nan\n",
    # Valid YAML past MAX_YAML_BYTES (256 KiB): a 52 MB one made a dry run take 42 s.
    "huge": b"workers: 1\n" + b"# padding\n" * 30_000,
}


# (case, config edit, the place the one line must name, the file it must name or None)
CASES = [
    ("broken-json-line", _set("prompts", "broken.jsonl"), "broken.jsonl:2", "not valid JSON"),
    ("missing-text", _set("prompts", "notext.jsonl"), "notext.jsonl:2", "text"),
    ("empty-prompts", _set("prompts", "empty.jsonl"), "empty.jsonl", "empty"),
    ("unknown-model", _set("models.piper-joe.model_id", "nosuch/tts"), "model_id", "nosuch/tts"),
    ("wrong-type", _set("warmup", "two"), "warmup", "'two'"),
    ("negative-concurrency", _set("concurrency", [-2]), "concurrency", "-2"),
    ("no-deploy-file", _set("models.piper-joe.deploy", "nosuch"), "deploy", "nosuch"),
    (
        "missing-clip",
        lambda c: _set("reference", {"audio": "none.wav", "text": "reference/ref.txt"})(
            _cloning_server(c)
        ),
        "reference",
        "none.wav",
    ),
    (
        "missing-transcript",
        lambda c: _set("reference", {"audio": "reference/ref.wav", "text": "none.txt"})(
            _cloning_server(c)
        ),
        "reference",
        "none.txt",
    ),
    (
        "clip-too-short",
        lambda c: _set("reference", {"audio": "short.wav", "text": "reference/ref.txt"})(
            _cloning_server(c)
        ),
        "reference.audio",
        "short.wav",
    ),
    (
        "clip-too-long",
        lambda c: _set("reference", {"audio": "long.wav", "text": "reference/ref.txt"})(
            _cloning_server(c)
        ),
        "reference.audio",
        "long.wav",
    ),
    # Deploy files (written by `bad_workflow`), read at parse time, not by a started server.
    ("deploy-bad-yaml", _set("models.piper-joe.deploy", "bad-yaml"), "bad-yaml.yaml:3", "YAML"),
    ("deploy-a-list", _set("models.piper-joe.deploy", "a-list"), "a-list.yaml", "mapping"),
    ("deploy-not-utf8", _set("models.piper-joe.deploy", "not-utf8"), "not-utf8.yaml:2", "UTF-8"),
    ("deploy-nan", _set("models.piper-joe.deploy", "nan"), "nan.yaml", "length_scale"),
    ("deploy-alias-bomb", _set("models.piper-joe.deploy", "bomb"), "bomb.yaml", "alias bomb"),
    ("deploy-huge", _set("models.piper-joe.deploy", "huge"), "huge.yaml", "more than 262144"),
    ("local-clone", _cloning, "models.piper-joe.voice.clone", "cannot clone"),
    ("duplicate-request-keys", _set("requests", {1: 2, "01": 5}), "requests", "concurrency 1"),
    ("nan-timeout", _set("request_timeout_s", float("nan")), "request_timeout_s", "nan"),
    ("underscore-name", _rename_system("lo_cal"), "lo_cal", "does not match"),
    ("missing-serving-env", _missing_serving_env, "systems.vllm.serving_env", "no-such-venv"),
    # The audible onset's settings (thetalker.metrics.OnsetSettings): one line each.
    (
        "onset-threshold-0",
        _set("audible_onset", {"threshold_dbfs": 0}),
        "audible_onset.threshold_dbfs",
        "config field audible_onset.threshold_dbfs: must be below 0 dBFS, full scale (got 0)",
    ),
    (
        "onset-frame-0",
        _set("audible_onset", {"frame_s": 0}),
        "audible_onset.frame_s",
        "config field audible_onset.frame_s: must be above 0 s (got 0)",
    ),
    (
        "onset-run-0",
        _set("audible_onset", {"run_frames": 0}),
        "audible_onset.run_frames",
        "config field audible_onset.run_frames: must be at least 1 (got 0)",
    ),
    (
        "onset-unknown-key",
        _set("audible_onset", {"thresh": -30}),
        "audible_onset.thresh",
        "config field audible_onset.thresh: unknown onset setting",
    ),
    (
        "onset-nan",
        _set("audible_onset", {"threshold_dbfs": float("nan")}),
        "audible_onset.threshold_dbfs",
        "config field audible_onset.threshold_dbfs: nan is not a finite number",
    ),
    (
        "onset-hop-past-frame",
        _set("audible_onset", {"hop_s": 0.05}),
        "audible_onset.hop_s",
        "config field audible_onset.hop_s: 0.05 s is longer than frame_s 0.02 s",
    ),
]


@pytest.fixture(scope="module")
def bad_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workflow copy holding every bad file; each case writes its own config."""
    dest = copy_workflow(tmp_path_factory.mktemp("bad-input") / "wf")
    for name, text in BAD_PROMPTS.items():
        (dest / name).write_text(text)
    write_clip(dest / "short.wav", 0.5)
    write_clip(dest / "long.wav", 31.0)
    for name, data in BAD_DEPLOY.items():
        (dest / "deploy" / f"{name}.yaml").write_bytes(data)
    return dest


def _one_line_naming(output: str, *words: str) -> str | None:
    return next((line for line in output.splitlines() if all(w in line for w in words)), None)


# Every case is checked in-process, through the functions rules/common.smk calls; these few
# also through Snakemake itself (one of each kind: prompts, schema, deploy file, names, clip,
# a job value said of the config: the onset).
END_TO_END = {"broken-json-line", "wrong-type", "deploy-bad-yaml", "underscore-name"}
END_TO_END |= {"missing-clip", "onset-hop-past-frame", "missing-serving-env"}


def test_the_in_process_checks_are_the_ones_common_smk_runs(bad_workflow: Path) -> None:
    assert parse_time_error(tiny_config(), bad_workflow) is None  # the good config passes
    text = (REPO / "rules" / "common.smk").read_text()
    lines = [line.split("  #", 1)[0].strip() for line in text.splitlines()]  # without comments
    at = [lines.index(check) for check in COMMON_SMK_CHECKS]
    assert at == sorted(at), "rules/common.smk runs its checks in another order"
    calls = [line for line in lines if line.startswith(("wfc.check_", "validate("))]
    assert calls == list(COMMON_SMK_CHECKS), "a parse-time check was added: mirror it"


@pytest.mark.parametrize(("edit", "place", "what"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_bad_input_is_refused_naming_it(bad_workflow: Path, edit, place: str, what: str):
    message = parse_time_error(edit(copy.deepcopy(tiny_config())), bad_workflow)
    assert message is not None, "accepted"
    assert _one_line_naming(message, place) and _one_line_naming(message, what), message


@pytest.mark.parametrize(
    ("edit", "place", "what"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES if c[0] in END_TO_END],
)
def test_bad_input_is_refused_by_snakemake_before_planning(
    bad_workflow: Path, edit, place: str, what: str
):
    config = edit(copy.deepcopy(tiny_config()))
    name = f"{place.replace('/', '_').replace(':', '_')}-{abs(hash(what))}.yaml"
    (bad_workflow / name).write_text(yaml.safe_dump(config, sort_keys=False))
    result = smk(bad_workflow, "-n", "--configfile", name, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    assert _one_line_naming(output, place) and _one_line_naming(output, what), output[-2000:]
    assert "rule bench:" not in result.stdout  # refused before planning any job
    assert not (bad_workflow / "results").exists()


def test_a_config_file_alias_bomb_is_refused_in_one_line(bad_workflow: Path):
    # Snakemake reads a --configfile itself; the size check comes before its validation,
    # which would print the expanded document.
    config = (
        yaml.safe_dump(tiny_config(), sort_keys=False)
        + "bomb:\n"
        + "".join(f"  {line}\n" for line in alias_bomb().splitlines())
    )
    (bad_workflow / "bomb-config.yaml").write_text(config)
    result = smk(bad_workflow, "-n", "--configfile", "bomb-config.yaml", timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    assert _one_line_naming(output, "alias bomb"), output[-2000:]
    assert len(output) < 20_000  # the document was not printed (a count of lines, no time)


@pytest.mark.slow
@pytest.mark.parametrize("prompts", ["broken.jsonl", "short.wav"], ids=["prompts", "ref-clip"])
def test_a_real_run_fails_before_any_server_starts(tmp_path: Path, prompts: str):
    """Not a dry run: the error still comes at parse time, so no bench job starts."""
    config = tiny_config()
    if prompts == "short.wav":
        config = _set("reference", {"audio": "short.wav", "text": "reference/ref.txt"})(
            _cloning_server(config)
        )
    else:
        config["prompts"] = prompts
    workdir = copy_workflow(tmp_path / "wf", config)
    (workdir / "broken.jsonl").write_text(BAD_PROMPTS["broken.jsonl"])
    write_clip(workdir / "short.wav", 0.5)
    result = smk(workdir, "--configfile", "tiny.yaml", timeout=120)
    assert result.returncode != 0
    assert _one_line_naming(result.stdout + result.stderr, prompts), result.stderr[-2000:]
    assert not (workdir / "results/logs/local/piper-joe/server.log").exists()
    assert not (workdir / "results/logs/local/piper-joe/bench.log").exists()


# --- thetalker-bench ----------------------------------------------------------------------


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # Port 9 (discard) on loopback: nothing may be sent there; the error must come first.
    cmd = [sys.executable, "-m", "thetalker.cli.bench", "--base-url", "http://127.0.0.1:9"]
    cmd += ["--out-dir", str(tmp_path / "out"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("name", "place"),
    [("notext.jsonl", "notext.jsonl:2"), ("empty.jsonl", "empty.jsonl")],
    ids=["missing-text", "empty-file"],
)
def test_bench_cli_refuses_bad_prompts_with_one_line(tmp_path: Path, name: str, place: str):
    (tmp_path / name).write_text(BAD_PROMPTS[name])
    result = _bench(tmp_path, "--texts-jsonl", str(tmp_path / name))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and place in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("clip_s", "words"),
    [(None, ["ref_audio", "no such file"]), (0.5, ["ref_audio", "0.50 s"]), (31, ["31.00 s"])],
    ids=["missing-clip", "too-short", "too-long"],
)
def test_bench_cli_refuses_a_bad_reference_clip(tmp_path: Path, clip_s, words: list[str]):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"sample_id": "a", "text": "hello"}\n')
    clip = tmp_path / "clip.wav"
    if clip_s is not None:
        write_clip(clip, clip_s)
    result = _bench(
        tmp_path, "--texts-jsonl", str(prompts), "--task-type", "Base",
        "--ref-audio", str(clip), "--ref-text", "words",
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), result.stderr
    assert str(clip) in lines[0]


def test_bench_cli_refuses_negative_concurrency(tmp_path: Path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"sample_id": "a", "text": "hello"}\n')
    result = _bench(tmp_path, "--texts-jsonl", str(prompts), "--concurrency", "-1")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "concurrency" in lines[0], result.stderr
