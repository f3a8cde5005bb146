"""The Snakemake workflow's config: the checks a schema cannot make, and what the rules ask.

`rules/common.smk` validates the config against `config/schema.yaml` (types, ranges, and
every default: nothing here repeats one), then calls `check_config`, `check_inputs` and
`check_quality` for what a JSON schema cannot say (every concurrency point has a request
count, the ratio names known systems, the files exist, ...), each error one line naming the
field. This module holds those entry points and the checks of the config file itself, the
secrets and the files a run reads; each section's own checks and answers live beside it:
the load points and service level (thetalker.pipeline.load_points), the systems
(thetalker.pipeline.system_config), the quality run (thetalker.pipeline.quality_config),
each run's `thetalker.pipeline.job.BenchJob` and the files it reads
(thetalker.pipeline.job_from_config). The rules import this module only (`wfc`), so it
re-exports what they ask. Every function takes the config as `validate()` left it
(defaults filled in).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thetalker import backends
from thetalker.pipeline.job import ConfigError, read_as_served
from thetalker.pipeline.job_from_config import (
    agent_systems,
    audible_onset_spec,
    bench_inputs,
    bench_job,
    check_audible_onset,
    check_jobs,
    deploy_file,
    file_sha256,
    uses_reference,
)
from thetalker.pipeline.load_points import (
    capacity_search,
    check_plan_rates,
    check_point_labels,
    check_service_level,
    point_labels,
    request_counts,
    round_dirs,
    service_level_spec,
)
from thetalker.pipeline.quality_config import (
    BUNDLED_ASR_MODEL,
    asr_model_arg,
    check_quality,
    quality_run_config,
    quality_settings,
    wer_pairs,
    wer_under_load_label,
)
from thetalker.pipeline.system_config import (
    check_system,
    quality_runs,
    runs,
    system_api,
    system_models,
)

__all__ = [
    "ConfigError",
    "BUNDLED_ASR_MODEL",
    "check_config",
    "check_config_file",
    "check_config_size",
    "check_inputs",
    "check_quality",
    "wildcard_pattern",
    # Re-exported for the rules, which import this module only:
    "agent_systems",
    "asr_model_arg",
    "audible_onset_spec",
    "bench_inputs",
    "bench_job",
    "capacity_search",
    "deploy_file",
    "file_sha256",
    "point_labels",
    "quality_run_config",
    "quality_runs",
    "quality_settings",
    "request_counts",
    "round_dirs",
    "runs",
    "service_level_spec",
    "system_models",
    "wer_pairs",
    "wer_under_load_label",
]


def _not_finite(node: Any, field: str = "") -> tuple[str, float] | None:
    """The first number that is nan or infinite, with its field: a schema's `minimum` lets
    `.nan` through (nan < 0 is false)."""
    if isinstance(node, float) and not math.isfinite(node):
        return field, node
    items: Any = ()
    if isinstance(node, Mapping):
        items = ((f"{field}.{key}".lstrip("."), value) for key, value in node.items())
    elif isinstance(node, list | tuple):
        items = ((f"{field}[{i}]", value) for i, value in enumerate(node))
    for name, value in items:
        found = _not_finite(value, name)
        if found:
            return found
    return None


def check_config_file(path: str | Path) -> None:
    """The workflow's default config file, checked before Snakemake loads it (its own error
    for bad YAML names no file): UTF-8 YAML holding a mapping. A missing file is Snakemake's
    to report (it names the file); a `--configfile` is read by Snakemake's command line
    before the workflow, out of reach here."""
    from thetalker.data.yaml_files import YamlFileError, load_yaml_mapping

    if not Path(path).exists():
        return
    try:
        load_yaml_mapping(path, "config file")
    except YamlFileError as exc:
        raise ConfigError(f"config file {exc}") from None


def check_config_size(config: Any) -> None:
    """Refuse a config whose aliases expand past MAX_EXPANDED_NODES (a `--configfile` alias
    bomb), before the schema's validation or any walk: each would take hours or print the
    expanded document. Linear in the distinct nodes, whatever the expansion."""
    from thetalker.data.yaml_files import MAX_EXPANDED_NODES, expanded_size

    size = expanded_size(config)
    if size > MAX_EXPANDED_NODES:
        raise ConfigError(
            f"config: {size} values once its YAML aliases are expanded, more than "
            f"{MAX_EXPANDED_NODES} (an alias bomb?); refused before it is checked"
        )


def check_config(config: Mapping[str, Any]) -> None:
    """Cross-field checks after the schema; raise ConfigError naming the field."""
    check_config_size(config)
    bad_number = _not_finite(config)
    if bad_number:
        raise ConfigError(f"config field {bad_number[0]}: {bad_number[1]} is not a finite number")
    check_point_labels(config)
    points = [int(c) for c in config["concurrency"]]
    report = config["report"]
    if int(report["headline_concurrency"]) not in points:
        raise ConfigError(
            f"config field report.headline_concurrency: {report['headline_concurrency']} "
            f"is not in concurrency {points}"
        )
    for name in report.get("ratio") or ():  # no ratio asked for: no ratio column
        if name not in config["systems"]:
            raise ConfigError(f"config field report.ratio: unknown system {name!r}")
    deploy_systems = [s for s, spec in config["systems"].items() if spec.get("use_deploy_file")]
    for model, spec in config["models"].items():
        if deploy_systems and not spec.get("deploy"):
            raise ConfigError(
                f"config field models.{model}.deploy: required, system "
                f"{deploy_systems[0]!r} serves with the model's deploy file"
            )
        voice = spec.get("voice") or {}
        if not voice.get("speaker") and not voice.get("clone"):
            raise ConfigError(f"config field models.{model}.voice: set speaker or clone")
    if config["repeats"] > 1 and config["quality"]["at_speed_points"]:
        # WER under load transcribes {point}/records.jsonl; rounds live in {point}/roundK/.
        raise ConfigError(
            "config field quality.at_speed_points: needs repeats 1 (a point's rounds are not "
            "transcribed)"
        )
    check_audible_onset(config)
    check_service_level(config)
    check_plan_rates(config)
    _check_no_secrets(config)
    for system in config["systems"]:
        check_system(config, system)
    check_jobs(config)


def _check_no_secrets(config: Mapping[str, Any]) -> None:
    """A secret's value in env, extra_args or a command template would reach params and logs
    (thetalker.util.redact)."""
    from thetalker.backends.command import words
    from thetalker.util.redact import check_args, check_env_names

    try:
        for system, spec in config["systems"].items():
            check_env_names(spec.get("env") or {}, f"config field systems.{system}.env")
            check_args(spec.get("extra_args") or [], f"config field systems.{system}.extra_args")
            template = spec.get("command")
            if isinstance(template, str):
                check_args(words(template), f"config field systems.{system}.command")
        for model, spec in config["models"].items():
            check_args(spec.get("extra_args") or [], f"config field models.{model}.extra_args")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def wildcard_pattern(names: Any) -> str:
    """A regex matching exactly the given names (for wildcard_constraints)."""
    return "|".join(re.escape(str(n)) for n in names)


def _check_deploy_file(path: str, launcher: backends.Launcher, field: str) -> None:
    """A deploy file readable before any server starts: UTF-8 YAML holding a mapping, every
    number finite; a server that reads its own keys (the embedded one) as it reads them."""
    from thetalker.data.yaml_files import YamlFileError, load_yaml_mapping

    try:
        data = load_yaml_mapping(path, "deploy file")
    except YamlFileError as exc:
        raise ConfigError(f"config field {field}: {exc}") from None
    bad_number = _not_finite(data)
    if bad_number:
        key, value = bad_number
        raise ConfigError(f"config field {field}: {path}: '{key}' is {value}, not a finite number")
    try:
        read_as_served(launcher, path)
    except ValueError as exc:
        raise ConfigError(f"config field {field}: {exc}") from None


def check_inputs(config: Mapping[str, Any]) -> None:
    """The files a run reads, checked before any job starts (a bad one would otherwise fail
    a bench job after its server started): the prompts parse, every deploy file exists, a
    system's serving_env is there (thetalker.pipeline.serving_env_check), the local
    launcher serves its one model, and the reference clip (1 to 30 s) and transcript of
    cloning models are there. Paths are relative to the working directory. Raises
    ConfigError: one line naming the field and the file (and its line)."""
    from thetalker.data.prompts import PromptError, load_prompts
    from thetalker.data.wavio import WavError, check_reference_clip
    from thetalker.pipeline.serving_env_check import check_serving_envs

    try:
        load_prompts(config["prompts"])
    except PromptError as exc:
        raise ConfigError(f"config field prompts: {exc}") from None
    check_serving_envs(config)  # a system's venv: there, and of the version its kind speaks
    for model, spec in config["models"].items():
        for system, sys_spec in config["systems"].items():
            if model not in system_models(config, system):
                continue
            launcher = backends.launcher(sys_spec["launcher"])
            served = launcher.served_models
            if served is not None and spec["model_id"] not in served:
                raise ConfigError(
                    f"config field models.{model}.model_id: unknown model {spec['model_id']!r} "
                    f"for system {system!r} (the {launcher.name} server serves only "
                    f"{', '.join(repr(m) for m in served)})"
                )
            deploy = deploy_file(config, system, model)
            if deploy and not Path(deploy).is_file():
                known = sorted(p.stem for p in Path(deploy).parent.glob("*.yaml"))
                raise ConfigError(
                    f"config field models.{model}.deploy: {deploy} does not exist "
                    f"(deploy names: {', '.join(known) or 'none'})"
                )
            if deploy:
                _check_deploy_file(deploy, launcher, f"models.{model}.deploy")
        if not uses_reference(config, model):
            continue
        audio = Path(config["reference"]["audio"])
        text = Path(config["reference"]["text"])
        for field, path in (("audio", audio), ("text", text)):
            if not path.is_file():
                raise ConfigError(
                    f"config field reference.{field}: {path} does not exist "
                    f"(needed by models.{model}.voice.clone)"
                )
        try:
            check_reference_clip(audio)
        except WavError as exc:
            raise ConfigError(f"config field reference.audio: {exc}") from None
        if not text.read_text(encoding="utf-8", errors="replace").strip():
            raise ConfigError(f"config field reference.text: {text} is empty")
        cannot = [
            (s, api.name)
            for s in config["systems"]
            if model in system_models(config, s)
            if not (api := system_api(config, s)).clones_voices
        ]
        if cannot:  # the embedded server refuses task Base: every request would fail
            raise ConfigError(
                f"config field models.{model}.voice.clone: system {cannot[0][0]!r} speaks the "
                f"{cannot[0][1]} API, whose server cannot clone voices (give voice.speaker)"
            )
    from thetalker.pipeline.settings_checks import check_settings

    check_settings(config, bench_job)  # the settings search (docs/settings.md): one line each
    from thetalker.pipeline.ab_plan import check_ab

    check_ab(config)  # the A/B's pairs (docs/ab.md): arms that measure the same thing
