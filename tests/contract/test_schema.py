"""What the project writes, read by 0.30.0's own classes: request bodies, serve command lines,
deploy files (loader, pipeline merge, known keys, and the header's list of changed keys).

One probe run in the contract venv answers every question (`venv_probe.py`)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import pytest
import yaml

from tests.contract.conftest import REPO, run_probe
from tests.contract.schedule import PROFILES
from thetalker.client import BenchOptions, build_request_body
from thetalker.lifecycle.deploy import REGISTRY, resolve
from thetalker.lifecycle.launch import ServerSpec, build_command

VLLM_OMNI_DEPLOYS = sorted(n for n, e in REGISTRY.items() if e.launcher == "vllm-omni")
REF_URI = "data:audio/wav;base64,UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA="


def client_bodies() -> list[tuple[str, dict]]:
    """Every kind of body the client builds, and the sample-rate probe's variant of each."""
    cases = []
    voices = [
        ("speaker", {"task_type": "CustomVoice", "speaker": "ryan"}),
        ("voice", {"task_type": "CustomVoice", "speaker": None, "voice": "ryan"}),
        ("inline", {"task_type": "Base", "speaker": None, "ref_audio": "x.wav", "ref_text": "t"}),
        ("registered", {"task_type": "Base", "speaker": None, "voice": "ref"}),
        ("register", {"task_type": "Base", "speaker": None, "register_voice": "ref"}),
        ("design", {"task_type": "VoiceDesign", "speaker": None, "instructions": "warm, slow"}),
    ]
    extras = [
        {},
        {"model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "max_new_tokens": 2048},
        {"language": None},
    ]
    for (name, voice), stream, fmt, extra in itertools.product(
        voices, ("audio", "sse"), ("pcm", "wav"), extras
    ):
        opts = BenchOptions(stream_format=stream, response_format=fmt, **voice, **extra)
        uri = REF_URI if opts.ref_audio else None
        body = build_request_body(opts, "Hello there, this is a test.", uri)
        label = f"{name}-{stream}-{fmt}-{sorted(extra)}"
        cases.append((label, body))
        probe = {k: v for k, v in body.items() if k not in ("stream", "stream_format")}
        cases.append((label + "-probe", {**probe, "response_format": "wav"}))
    return cases


def serve_lines() -> list[tuple[str, list[str]]]:
    """The serve command line `thetalker.lifecycle.launch` builds for every vllm-omni deploy."""
    lines = []
    for name in VLLM_OMNI_DEPLOYS:
        entry = resolve(name)
        spec = ServerSpec(
            launcher="vllm-omni",
            model_id=entry.model_id,
            deploy_config=entry.path,
            extra_args=list(entry.extra_args),
        )
        lines.append((name, build_command(spec, 8091)[1:]))  # argv after the program
        stock = dataclasses.replace(spec, deploy_config=None)  # the stock system: no file
        lines.append((name + "-stock", build_command(stock, 8092)[1:]))
    return lines


def deploy_questions() -> list[dict]:
    out = []
    for name in VLLM_OMNI_DEPLOYS:
        entry = resolve(name)
        profile = PROFILES[entry.model_id]
        path, stock = str(entry.path), entry.stock_file
        out.append({"path": path, "pipeline": profile.pipeline, "stock": stock})
    return out


BODIES = client_bodies()
LINES = serve_lines()


@pytest.fixture(scope="module")
def answers(contract_python, tmp_path_factory) -> dict:
    questions = {
        "bodies": [b for _, b in BODIES],
        "cli": [argv for _, argv in LINES],
        "deploys": deploy_questions(),
    }
    return run_probe(contract_python, questions, tmp_path_factory.mktemp("probe"))


@pytest.mark.parametrize("index", range(len(BODIES)), ids=[label for label, _ in BODIES])
def test_every_client_body_is_a_valid_0_30_request(answers, index):
    label, body = BODIES[index]
    answer = answers["bodies"][index]
    assert answer["ok"], f"{label}: 0.30.0 refuses {body}: {answer.get('error')}"
    assert answer["unknown_keys"] == [], f"{label}: keys 0.30.0 ignores"
    assert answer["response_format"] == body["response_format"]
    assert answer["task_type"] == body["task_type"]
    if "stream_format" in body:  # a streamed request is read as the stream it asks for
        assert answer["raw_stream"] is (body["stream_format"] == "audio")
        assert answer["sse"] is (body["stream_format"] == "sse")
    else:  # the probe: one whole wav file
        assert not answer["raw_stream"] and not answer["sse"]
    expected_voice = body.get("voice") or body.get("speaker")
    assert answer["voice"] == expected_voice


@pytest.mark.parametrize("index", range(len(LINES)), ids=[label for label, _ in LINES])
def test_every_serve_line_parses_with_vllm_omnis_own_cli(answers, index):
    label, argv = LINES[index]
    answer = answers["cli"][index]
    assert answer["ok"], f"{label}: vllm-omni's parser refuses {argv}: {answer.get('error')}"
    entry = resolve(label.removesuffix("-stock"))
    assert answer["model"] == entry.model_id and answer["omni"] and answer["trust_remote_code"]
    assert answer["host"] == "127.0.0.1" and answer["port"] in (8091, 8092)
    if label.endswith("-stock"):
        assert answer["deploy_config"] is None
    else:
        assert Path(answer["deploy_config"]) == entry.path
    if "--init-timeout" in argv:
        assert answer["init_timeout"] == int(argv[argv.index("--init-timeout") + 1])
        assert answer["stage_init_timeout"] == int(argv[argv.index("--stage-init-timeout") + 1])


def header_changed_keys(path: Path) -> dict[str, tuple[str, str]]:
    """The header's "Changed keys" entries: key path -> (stock, ours) as written.

    An entry is `#   <key path>  <stock> -> <ours>` (3 spaces after `#`); deeper-indented
    lines under it say what the change does. The block ends at the first other line."""
    entries: dict[str, tuple[str, str]] = {}
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# Changed keys"))
    for line in lines[start + 1 :]:
        entry = re.match(r"^#   (\S+)\s+(.+?)\s+->\s+(.+?)\s*$", line)
        if entry:
            entries[entry.group(1)] = (entry.group(2), entry.group(3))
        elif entries and not re.match(r"^#    +\S", line):
            break  # the heading may run over lines; the block ends after the entries
    return entries


def _header_value(text: str):
    return None if text in ("unset", "removed") else yaml.safe_load(text)


@pytest.mark.parametrize("name", VLLM_OMNI_DEPLOYS)
def test_deploy_file_loads_and_merges_with_its_pipeline(answers, name):
    answer = answers["deploys"][VLLM_OMNI_DEPLOYS.index(name)]
    assert answer["ok"], f"{name}: 0.30.0's loader refuses it: {answer.get('error')}"
    stage_ids = [s["stage_id"] for s in answer["stages"]]
    assert stage_ids == list(range(len(stage_ids)))
    assert all(s["runtime"].get("devices") == "0" for s in answer["stages"])


@pytest.mark.parametrize("name", VLLM_OMNI_DEPLOYS)
def test_every_deploy_key_is_one_0_30_reads(answers, name):
    # 0.30.0 drops an unknown key with a warning at most: a typo silently runs the default.
    answer = answers["deploys"][VLLM_OMNI_DEPLOYS.index(name)]
    assert answer["unknown"] == [], f"{name}: keys 0.30.0 reads nowhere"


@pytest.mark.parametrize("name", VLLM_OMNI_DEPLOYS)
def test_header_lists_exactly_the_keys_changed_against_the_stock_file(answers, name):
    answer = answers["deploys"][VLLM_OMNI_DEPLOYS.index(name)]
    listed = header_changed_keys(resolve(name).path)
    changed = answer["changed"]
    assert set(listed) == set(changed), (
        f"{name}: header lists {sorted(set(listed) - set(changed))} that do not change, "
        f"omits {sorted(set(changed) - set(listed))}"
    )
    for key, (stock_text, ours_text) in listed.items():
        stock, ours = changed[key]["stock"], changed[key]["ours"]
        assert _header_value(stock_text) == (None if stock == "<unset>" else stock), key
        assert _header_value(ours_text) == (None if ours == "<unset>" else ours), key


def test_the_published_deploys_are_the_ones_probed():
    assert VLLM_OMNI_DEPLOYS == ["moss", "omnivoice", "qwen3tts06b", "qwen3tts17b", "voxcpm2"]
    assert (REPO / "deploy").resolve() == resolve("moss").path.parent
