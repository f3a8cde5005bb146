"""Deploy files carry the facts of the published configurations; thetalker-deploy finds them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO
from thetalker.cli import deploy as deploy_cli
from thetalker.lifecycle import deploy
from thetalker.lifecycle.deploy import ALIASES, REGISTRY, UnknownDeployError, names, resolve

PUBLISHED = ("qwen3tts17b", "qwen3tts06b", "voxcpm2", "moss", "omnivoice")

# Keys each file marks "# stock: <value>" (deploy-configs.md: "what it changes"), with the stock
# value written on the line.
CHANGED = {
    "qwen3tts17b": {
        "model_runner": "v2",
        "codec_chunk_frames": "25",
        "initial_codec_chunk_frames": "1",
        "ref_code_context_frames": "unset",
        "decode_cudagraph_batch_sizes": "unset",
        "max_num_batched_tokens": "512",
    },
    "voxcpm2": {"max_num_seqs": "8", "unified_decode_graph_max_batch_size": "8"},
    "moss": {
        "max_num_seqs": ["4", "1"],
        "gpu_memory_utilization": ["0.85", "0.12"],
        "max_num_batched_tokens": "196608",
    },
    "omnivoice": {"dtype": "float32"},
    "piper-joe": {
        "workers": "1",
        "threads_per_worker": "onnxruntime default",
        "initial_chunk_words": "0",
        "chunk_words": "0",
        "min_chunk_words": "1",
        "scheduling_policy": "fifo",
    },
}
CHANGED["qwen3tts06b"] = CHANGED["qwen3tts17b"]


def load(name: str) -> dict:
    return yaml.safe_load(resolve(name).path.read_text())


def header(name: str) -> dict[str, str]:
    """'# Key: value' lines of the leading comment block."""
    facts = {}
    for line in resolve(name).path.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = re.match(r"#\s*([A-Z][A-Za-z ]+):\s*(.+)", line)
        if m:
            facts[m.group(1)] = m.group(2).strip()
    return facts


def stock_marks(name: str) -> dict[str, list[str]]:
    """key -> stock values, from the lines of the YAML body marked '# stock: <value>'."""
    marks: dict[str, list[str]] = {}
    for line in resolve(name).path.read_text().splitlines():
        m = re.match(r"\s*(?:- )?(\w+):.*#\s*stock:\s*(.+)$", line)
        if m:
            marks.setdefault(m.group(1), []).append(m.group(2).strip())
    return marks


def stage(doc: dict, stage_id: int) -> dict:
    return next(s for s in doc["stages"] if s["stage_id"] == stage_id)


def test_the_five_published_files_and_the_local_one_are_registered():
    assert set(names()) == {*PUBLISHED, "piper-joe"}
    for name in names():
        assert resolve(name).path.is_file(), name


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_header_agrees_with_registry(name):
    entry, facts = resolve(name), header(name)
    assert facts["Deploy"].split()[0] == name
    assert facts["Model"].split()[0] == entry.model_id
    assert facts["Sample rate"] == f"{entry.sample_rate} Hz"
    assert facts["Stock file"].startswith(entry.stock_file)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_changed_keys_are_marked_with_their_stock_value(name):
    expected = {k: v if isinstance(v, list) else [v] for k, v in CHANGED[name].items()}
    assert stock_marks(name) == expected


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_files_are_self_contained_vllm_omni_configs(name):
    doc = load(name)
    assert "base_config" not in doc
    assert isinstance(doc["stages"], list) and doc["stages"]
    assert all(s["devices"] == "0" for s in doc["stages"])
    assert resolve(name).launcher == "vllm-omni"


@pytest.mark.parametrize("name", ["qwen3tts17b", "qwen3tts06b"])
def test_qwen3_chunking_and_graph_sizes(name):
    doc = load(name)
    assert doc["async_chunk"] is True and doc["model_runner"] == "v1"
    extra = doc["connectors"]["connector_of_shared_memory"]["extra"]
    assert extra["initial_codec_chunk_frames"] == 16
    assert extra["codec_chunk_frames"] == 75
    assert extra["decode_cudagraph_batch_sizes"] == [1, 2, 4, 8]
    assert extra["codec_left_context_frames"] == 72 and extra["decode_batch_max_size"] == 4
    s0, s1 = stage(doc, 0), stage(doc, 1)
    assert s0["max_num_seqs"] == 64 and s0["max_num_batched_tokens"] == 32768
    assert s0["default_sampling_params"]["repetition_penalty"] == 1.05
    assert s0["output_connectors"] == {"to_stage_1": "connector_of_shared_memory"}
    assert s1["max_model_len"] == 65536 and s1["enforce_eager"] is False
    assert doc["platforms"]["rocm"]["stages"][0] == {"stage_id": 1, "enforce_eager": True}
    assert resolve(name).mps and resolve(name).speaker == "ryan"


def test_qwen3_files_differ_only_in_the_model():
    a = resolve("qwen3tts17b").path.read_text().replace("1.7B", "X").replace("17b", "X")
    b = resolve("qwen3tts06b").path.read_text().replace("0.6B", "X").replace("06b", "X")
    assert a == b
    assert load("qwen3tts17b") == load("qwen3tts06b")


def test_voxcpm2_batch_of_32():
    doc = load("voxcpm2")
    s0 = stage(doc, 0)
    assert doc["dtype"] == "bfloat16" and doc["async_chunk"] is False
    assert s0["max_num_seqs"] == 32
    rt = s0["engine_extras"]["hf_overrides"]["voxcpm2_runtime_config"]
    assert rt["unified_decode_graph_max_batch_size"] == 32
    assert rt["vae_decode_every"] == 3 and rt["enable_unified_decode_graph"] is True
    assert s0["kv_cache_memory_bytes"] == 6442450944
    assert s0["default_sampling_params"]["seed"] == 42
    assert resolve("voxcpm2").voice_mode == deploy.VOICE_INLINE


def test_moss_tuned_values():
    doc = load("moss")
    s0, s1 = stage(doc, 0), stage(doc, 1)
    assert (s0["max_num_seqs"], s0["gpu_memory_utilization"]) == (32, 0.3)
    assert (s1["max_num_seqs"], s1["gpu_memory_utilization"]) == (8, 0.3)
    assert s1["max_num_batched_tokens"] == 65536 and s1["max_model_len"] == 196608
    assert s0["default_sampling_params"]["stop_token_ids"] == [151645]
    extra = doc["connectors"]["shm"]["extra"]
    assert extra["decode_cudagraph_capture_sizes"][-1] == 256
    entry = resolve("moss")
    assert entry.extra_args == ("--init-timeout", "1800", "--stage-init-timeout", "1800")
    assert entry.mps and entry.voice_mode == deploy.VOICE_REGISTERED


def test_omnivoice_bfloat16():
    doc = load("omnivoice")
    assert doc["pipeline"] == "omnivoice"
    s0 = stage(doc, 0)
    assert s0["dtype"] == "bfloat16" and s0["distributed_executor_backend"] == "mp"
    assert resolve("omnivoice").voice_mode == deploy.VOICE_REGISTERED
    assert not resolve("omnivoice").mps


def test_piper_joe_is_the_local_servers_format():
    doc = load("piper-joe")
    assert doc == {
        "workers": 2,
        "threads_per_worker": 1,
        "initial_chunk_words": 3,
        "chunk_words": 6,
        "min_chunk_words": 3,
        "scheduling_policy": "round_robin",
        "max_active_streams": 0,
        "synthesis": {"length_scale": 1.0, "noise_scale": 0.667, "noise_w_scale": 0.8},
    }
    from thetalker.server.settings import load_deploy_config

    load_deploy_config(resolve("piper-joe").path)  # the server reads every key of it
    entry = resolve("piper-joe")
    assert (entry.launcher, entry.model_id, entry.sample_rate) == ("local", "piper-joe", 22050)


def test_aliases_and_unknown_names():
    assert resolve("batch32") == resolve("voxcpm2")
    assert resolve("tuned") == resolve("moss")
    assert set(ALIASES) == {"batch32", "tuned"}
    with pytest.raises(UnknownDeployError, match="known: .*qwen3tts17b"):
        resolve("qwen4")


def test_root_deploy_folder_is_the_package_folder():
    root = REPO / "deploy"
    assert root.resolve() == deploy.DEPLOY_DIR
    assert (root / "qwen3tts17b.yaml").read_bytes() == resolve("qwen3tts17b").path.read_bytes()


def test_content_hash_tracks_the_file():
    digest = resolve("moss").content_sha256()
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert digest != resolve("voxcpm2").content_sha256()


def test_cli_prints_path_model_id_rate_and_list(capsys):
    assert deploy_cli.main(["qwen3tts17b"]) == 0
    assert Path(capsys.readouterr().out.strip()) == resolve("qwen3tts17b").path
    assert deploy_cli.main(["batch32", "--model-id"]) == 0
    assert capsys.readouterr().out.strip() == "openbmb/VoxCPM2"
    assert deploy_cli.main(["tuned", "--sample-rate"]) == 0
    assert capsys.readouterr().out.strip() == "24000"
    assert deploy_cli.main(["--sample-rate", "voxcpm2"]) == 0  # the original's order
    assert capsys.readouterr().out.strip() == "48000"
    for argv in ([], ["list"]):
        assert deploy_cli.main(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in lines] == names()
        for line in lines:  # each name with the model it serves, its rate and its aliases
            entry = resolve(line.split()[0])
            assert line.split()[1:4] == [entry.model_id, str(entry.sample_rate), "Hz"]
            aliases = sorted(a for a, n in ALIASES.items() if n == entry.name)
            assert line.endswith(f"(alias: {', '.join(aliases)})") == bool(aliases), line
        assert "(alias: batch32)" in next(x for x in lines if x.startswith("voxcpm2 "))
        assert "(alias: tuned)" in next(x for x in lines if x.startswith("moss "))


def test_cli_unknown_name_exits_2_listing_names():
    # Through the interpreter, as a user or Snakemake would run it.
    result = subprocess.run(
        [sys.executable, "-m", "thetalker.cli.deploy", "nosuch"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert "nosuch" in result.stderr
    for name in names():
        assert name in result.stderr


def test_console_script_when_installed():
    script = shutil.which("thetalker-deploy")
    if script is None:
        pytest.skip("thetalker-deploy is not installed in this environment")
    out = subprocess.run([script, "omnivoice", "--model-id"], capture_output=True, text=True)
    assert (out.returncode, out.stdout.strip()) == (0, "k2-fsa/OmniVoice")


@pytest.mark.slow
def test_built_wheel_ships_the_deploy_files(tmp_path):
    # Build from a copy so the shared working tree gets no build/ folder.
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copytree(REPO / "thetalker", src / "thetalker", ignore=shutil.ignore_patterns("__py*"))
    readme = REPO / "README.md"
    (src / "README.md").write_text(readme.read_text() if readme.exists() else "# thetalker\n")
    (src / "deploy").symlink_to("thetalker/deploy_configs")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(tmp_path / "dist"), str(src)],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("thetalker-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for entry in REGISTRY.values():
        assert f"thetalker/deploy_configs/{entry.filename}" in shipped
