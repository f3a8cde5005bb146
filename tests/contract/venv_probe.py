"""Questions for vllm-omni 0.30.0's own code, asked in the contract venv; JSON in, JSON out.

    python tests/contract/venv_probe.py QUESTIONS.json ANSWERS.json

Input: {"bodies": [body, ...], "cli": [[argv...], ...], "deploys": [{"path", "pipeline",
"stock"}, ...]}; each list may be missing. Output, in the same order:

- bodies: whether `OpenAICreateSpeechRequest` accepts the body, and how 0.30.0 reads it
  (raw stream, SSE, or a whole file; the fields it set).
- cli: whether vllm-omni's own serve parser and `validate` accept the command line, and the
  values it read.
- deploys: `load_deploy_config` and `merge_pipeline_deploy` with the registered pipeline; the
  keys the loader would drop or cannot place; and every key path whose value differs from the
  stock file in the wheel (`vllm_omni/deploy/`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def check_body(body: dict) -> dict:
    from pydantic import ValidationError
    from vllm_omni.entrypoints.openai.protocol.audio import OpenAICreateSpeechRequest

    try:
        req = OpenAICreateSpeechRequest.model_validate(body)
    except ValidationError as exc:
        return {"ok": False, "error": str(exc).splitlines()[0]}
    known = set(OpenAICreateSpeechRequest.model_fields)
    for field in OpenAICreateSpeechRequest.model_fields.values():
        alias = field.validation_alias
        known.update(getattr(alias, "choices", None) or ([alias] if alias else []))
        if field.alias:
            known.add(field.alias)
    return {
        "ok": True,
        "raw_stream": req.is_raw_audio_stream(),
        "sse": req.is_sse_stream(),
        "voice": req.voice,
        "task_type": req.task_type,
        "response_format": req.response_format,
        "unknown_keys": sorted(set(body) - known),
    }


def check_cli(argv: list[str]) -> dict:
    from fake_engine_server import parse_cli

    try:
        args = parse_cli(argv)
    except (SystemExit, ValueError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "ok": True,
        "model": args.model,
        "omni": bool(args.omni),
        "trust_remote_code": bool(args.trust_remote_code),
        "host": args.host,
        "port": args.port,
        "deploy_config": args.deploy_config,
        "init_timeout": getattr(args, "init_timeout", None),
        "stage_init_timeout": getattr(args, "stage_init_timeout", None),
    }


MISSING = "<unset>"


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by key path; `stages` lists (also under `platforms`) keyed by stage_id."""
    out: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if key == "stages" and isinstance(value, list):
                for stage in value:
                    body = {k: v for k, v in stage.items() if k != "stage_id"}
                    out.update(flatten(body, f"{path}[{stage['stage_id']}]"))
            else:
                out.update(flatten(value, path))
    else:
        out[prefix] = node
    return out


def _known_string_keys() -> set[str]:
    """Every quoted identifier in the wheel's Python source: a connector `extra` key is read
    by model code as a string literal, so one that occurs nowhere is read by nothing."""
    import vllm_omni

    keys: set[str] = set()
    for path in Path(vllm_omni.__file__).parent.rglob("*.py"):
        keys.update(re.findall(r"[\"']([a-z_][a-z0-9_]*)[\"']", path.read_text(errors="replace")))
    return keys


def unknown_keys(raw: dict, merged: list) -> list[str]:
    """Keys of a deploy file that 0.30.0 reads nowhere: a typo there silently runs the
    default (the loader drops such a key with a warning at most)."""
    from vllm import SamplingParams
    from vllm_omni.config.stage_config import (
        _STAGE_DEPLOY_FIELDS,
        _STAGE_RESERVED_KEYS,
        DeployConfig,
    )
    from vllm_omni.engine.arg_utils import OmniEngineArgs
    from vllm_omni.entrypoints.utils import filter_dataclass_kwargs

    bad: list[str] = []
    top = {f.name for f in dataclasses.fields(DeployConfig)} | {"base_config"}
    bad += [k for k in raw if k not in top]
    engine_fields = {f.name for f in dataclasses.fields(OmniEngineArgs) if f.init}
    sampling = set(SamplingParams.__struct_fields__)
    logging.disable(logging.WARNING)  # filter_dataclass_kwargs warns for each dropped key
    try:
        for stage in merged:
            # The very filter the engine builder applies (stage_init_utils.py L1497).
            args = dict(stage.yaml_engine_args)
            kept = filter_dataclass_kwargs(OmniEngineArgs, dict(args))
            bad += [f"stages[{stage.stage_id}].{k}" for k in sorted(set(args) - set(kept))]
            params = stage.yaml_extras.get("default_sampling_params") or {}
            bad += [
                f"stages[{stage.stage_id}].default_sampling_params.{k}"
                for k in params
                if k not in sampling
            ]
    finally:
        logging.disable(logging.NOTSET)
    literals = _known_string_keys()
    for name, conn in (raw.get("connectors") or {}).items():
        bad += [f"connectors.{name}.{k}" for k in conn if k not in {"name", "extra"}]
        extra = conn.get("extra") or {}
        bad += [f"connectors.{name}.extra.{k}" for k in extra if k not in literals]
    for stage in raw.get("stages") or []:
        runtime = ((stage.get("engine_extras") or {}).get("hf_overrides") or {}).get(
            "voxcpm2_runtime_config"
        )
        if runtime:
            from vllm_omni.model_executor.models.voxcpm2.runtime_config import (
                _VoxCPM2RuntimeConfig,
            )

            names = {f.name for f in dataclasses.fields(_VoxCPM2RuntimeConfig)}
            prefix = f"stages[{stage['stage_id']}].engine_extras.hf_overrides."
            bad += [f"{prefix}voxcpm2_runtime_config.{k}" for k in runtime if k not in names]
    stage_keys = set(_STAGE_DEPLOY_FIELDS) | set(_STAGE_RESERVED_KEYS) | engine_fields
    for platform, section in (raw.get("platforms") or {}).items():
        bad += [f"platforms.{platform}.{k}" for k in section if k not in {"stages", "model_runner"}]
        for stage in section.get("stages") or []:
            bad += [
                f"platforms.{platform}.stages[{stage['stage_id']}].{k}"
                for k in stage
                if k not in stage_keys
            ]
    return bad


def check_deploy(item: dict) -> dict:
    import vllm_omni
    from vllm_omni.config.pipeline_registry import resolve_pipeline_config
    from vllm_omni.config.stage_config import (
        load_deploy_config,
        merge_pipeline_deploy,
        resolve_deploy_yaml,
    )

    stock_path = Path(vllm_omni.__file__).parent / "deploy" / item["stock"]
    try:
        pipeline = resolve_pipeline_config(item["pipeline"])
        merged = merge_pipeline_deploy(pipeline, load_deploy_config(item["path"]))
        stock_merged = merge_pipeline_deploy(pipeline, load_deploy_config(stock_path))
    except Exception as exc:  # the loader's own refusal, whatever its type
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    raw, stock_raw = resolve_deploy_yaml(item["path"]), resolve_deploy_yaml(stock_path)
    ours, stock = flatten(raw), flatten(stock_raw)
    unknown, stock_unknown = unknown_keys(raw, merged), unknown_keys(stock_raw, stock_merged)
    changed = {
        path: {"stock": stock.get(path, MISSING), "ours": ours.get(path, MISSING)}
        for path in sorted(set(ours) | set(stock))
        if ours.get(path, MISSING) != stock.get(path, MISSING)
    }
    stages = [
        {
            "stage_id": s.stage_id,
            "model_stage": s.model_stage,
            "engine_args": {k: v for k, v in s.yaml_engine_args.items() if _jsonable(v)},
            "runtime": s.yaml_runtime,
        }
        for s in merged
    ]
    return {
        "ok": True,
        # Keys nothing reads; those the stock file also carries are reported apart.
        "unknown": sorted(set(unknown) - set(stock_unknown)),
        "unknown_in_stock_too": sorted(set(unknown) & set(stock_unknown)),
        "changed": changed,
        "stages": stages,
    }


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except TypeError:
        return False
    return True


def main(argv: list[str]) -> int:
    questions = json.loads(Path(argv[0]).read_text())
    answers = {
        "bodies": [check_body(b) for b in questions.get("bodies", [])],
        "cli": [check_cli(a) for a in questions.get("cli", [])],
        "deploys": [check_deploy(d) for d in questions.get("deploys", [])],
    }
    # A file, not stdout: vLLM's loggers write to stdout.
    Path(argv[1]).write_text(json.dumps(answers, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
