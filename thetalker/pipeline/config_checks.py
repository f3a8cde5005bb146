"""The Snakemake workflow's config: the checks a schema cannot make, and one job spec per run.

`rules/common.smk` validates the config against `config/schema.yaml` (types, ranges, and
every default: nothing here repeats one), then calls `check_config`, `check_inputs` and
`check_quality` for what a JSON schema cannot say (every concurrency point has a request
count, the ratio names known systems, the files exist, ...), each error one line naming the
field. The rules write their own paths with `expand()`; this module only answers what a path
cannot: which files a run reads (`bench_inputs`) and the `thetalker.pipeline.job.BenchJob` it runs.
The quality run's settings and checks are thetalker.pipeline.quality_config's (re-exported).

The job spec (`bench_job`) carries every setting a (system, model) run depends on, the
deploy file's sha256 included; its canonical JSON goes into the rule's params, so editing one
model's deploy file reruns exactly the systems that serve that file, and nothing else. Every
function takes the config as `validate()` left it (defaults filled in).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thetalker import backends
from thetalker.data import layout
from thetalker.pipeline.job import BenchJob, BenchJobError, ConfigError, read_as_served
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
from thetalker.util.checks import field_message

__all__ = [
    "ConfigError",
    "BUNDLED_ASR_MODEL",
    "check_config",
    "check_inputs",
    "check_quality",
    "request_counts",
    "deploy_file",
    "file_sha256",
    "bench_inputs",
    "bench_job",
    "audible_onset_spec",
    "quality_settings",
    "quality_run_config",
    "asr_model_arg",
    "wer_pairs",
    "wer_under_load_label",
    "wildcard_pattern",
    "system_models",
    "runs",
    "quality_runs",
]


def request_counts(config: Mapping[str, Any], model: str | None = None) -> dict[int, int]:
    """Scored requests per concurrency point; YAML gives int keys, --config may give str.

    A model's own `requests` map overrides the top-level one point by point, so changing
    one model's count reruns that model's jobs only.
    """
    sources = [("requests", config["requests"])]
    if model is not None and config["models"][model].get("requests"):
        sources.append((f"models.{model}.requests", config["models"][model]["requests"]))
    counts: dict[int, int] = {}
    for field, mapping in sources:
        seen: dict[int, Any] = {}  # a key per point: {1: 2, "01": 5} would silently run 5
        for key, value in mapping.items():
            try:
                point = int(key)
                counts[point] = int(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"config field {field}.{key}: not a concurrency integer"
                ) from None
            if point in seen:
                raise ConfigError(
                    f"config field {field}: keys {seen[point]!r} and {key!r} both mean "
                    f"concurrency {point}"
                )
            seen[point] = key
    return counts


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


def check_point_labels(config: Mapping[str, Any]) -> None:
    """Every point's folder name is its own (no two points share one, or one overwrites the
    other) and says its load exactly as thetalker.report.points reads it back."""
    seen: dict[str, str] = {}
    for i, rate in enumerate(config["request_rates"]):
        label = layout.rate_label(rate)
        field = f"request_rates[{i}]"
        if layout.parse_point_label(label) != (None, float(rate)):
            raise ConfigError(
                f"config field {field}: {rate} would be named {label}, which does not say it "
                "exactly; give at most 6 significant digits, between 0.0001 and 999999"
            )
        if label in seen:
            raise ConfigError(
                f"config field {field}: {rate} and {seen[label]} share the label {label}"
            )
        seen[label] = f"{field} ({rate})"
    for i, c in enumerate(config["concurrency"]):
        label = layout.concurrency_label(c)
        if label in seen:
            raise ConfigError(f"config field concurrency[{i}]: {c} and {seen[label]} share {label}")
        seen[label] = f"concurrency[{i}] ({c})"


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
    _check_audible_onset(config)
    _check_service_level(config)
    _check_plan_rates(config)
    _check_no_secrets(config)
    for system in config["systems"]:
        check_system(config, system)
    _check_jobs(config)


def _check_plan_rates(config: Mapping[str, Any]) -> None:
    """Every plan rate gets the check nan gets (thetalker.pipeline.plan.plan_rate_problem):
    thetalker-plan divides by them, so 0, {} or a string is one line, not a traceback."""
    from thetalker.pipeline.plan import plan_rate_problem

    problem = plan_rate_problem(config.get("plan") or {})
    if problem:
        raise ConfigError(f"config field {problem}")


# A job field said of the config field it comes from (others have the same name).
_CONFIG_FIELD = {
    "launcher": "systems.{system}.launcher",
    "server": "systems.{system}.server",
    "sample_rate": "models.{model}.sample_rate",
    "voice.clone": "models.{model}.voice.clone",
}


def _check_jobs(config: Mapping[str, Any]) -> None:
    """The job's value checks (thetalker.pipeline.job), said of the config's field: each
    (system, model)'s job is built, without reading its files, before anything runs."""
    for model, system in runs(config):
        try:
            bench_job(config, system, model, hash_files=False)
        except BenchJobError as exc:
            if exc.field is None or exc.why is None:
                raise ConfigError(str(exc)) from None
            name = _CONFIG_FIELD.get(exc.field, exc.field).format(system=system, model=model)
            raise ConfigError(field_message("config", name, exc.why)) from None


def _check_audible_onset(config: Mapping[str, Any]) -> None:
    """audible_onset: the settings the detector can use, each range and the keys checked by
    thetalker.metrics.OnsetSettings (the schema checks only their types), one line naming
    the field."""
    from thetalker.metrics.onset import OnsetError, OnsetSettings

    try:
        OnsetSettings.from_spec(config.get("audible_onset"))
    except OnsetError as exc:
        raise ConfigError(field_message("config", f"audible_onset.{exc.field}", exc.why)) from None


def _check_service_level(config: Mapping[str, Any]) -> None:
    """capacity.slo: a known player model; WER only where it is measured at each point."""
    from thetalker.pipeline.capacity import ServiceLevel

    try:
        ServiceLevel.from_spec(service_level_spec(config))
    except (TypeError, ValueError) as exc:
        raise ConfigError(field_message("config", "capacity.slo", str(exc))) from None
    if (
        config["capacity"]["slo"]["max_wer_pct"] is not None
        and not quality_settings(config)["at_speed_points"]
    ):
        raise ConfigError(
            field_message(
                "config",
                "capacity.slo.max_wer_pct",
                "needs quality.at_speed_points true (the WER of each load's audio)",
            )
        )
    slo = config["capacity"]["slo"]
    saved = config["save_audio"] or quality_settings(config)["at_speed_points"]
    for key in LISTENED_SLO_KEYS:
        if slo.get(key) is not None and not saved:
            raise ConfigError(
                field_message(
                    "config",
                    f"capacity.slo.{key}",
                    "needs each load's audio: save_audio true (or quality.at_speed_points)",
                )
            )


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


def deploy_file(config: Mapping[str, Any], system: str, model: str) -> str | None:
    """The deploy file a (system, model) run serves with, or None (server defaults)."""
    if not config["systems"][system]["use_deploy_file"]:
        return None
    return f"{config['deploy_dir']}/{config['models'][model]['deploy']}.yaml"


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _uses_reference(config: Mapping[str, Any], model: str) -> bool:
    return bool(config["models"][model]["voice"].get("clone"))


def bench_inputs(config: Mapping[str, Any], system: str, model: str) -> dict[str, str]:
    """Files a run reads: a change to any of them reruns it."""
    inputs = {"prompts": str(config["prompts"])}
    deploy = deploy_file(config, system, model)
    if deploy:
        inputs["deploy"] = deploy
    if _uses_reference(config, model):
        inputs["ref_audio"] = config["reference"]["audio"]
        inputs["ref_text"] = config["reference"]["text"]
    return inputs


def bench_job(
    config: Mapping[str, Any], system: str, model: str, hash_files: bool = True
) -> BenchJob:
    """Everything one (system, model) run depends on; input files with their sha256, so the
    params change when their content does (`hash_files` False: not read, for the checks)."""
    sys_spec = config["systems"][system]
    model_spec = config["models"][model]
    inputs = bench_inputs(config, system, model)
    return BenchJob(
        system=system,
        model=model,
        launcher=sys_spec["launcher"],
        model_id=model_spec["model_id"],
        deploy_file=inputs.get("deploy"),
        deploy_sha256=file_sha256(inputs["deploy"]) if "deploy" in inputs and hash_files else None,
        env=sys_spec["env"],
        secret_env=sys_spec["secret_env"],
        extra_args=[*model_spec["extra_args"], *sys_spec["extra_args"]],
        # MPS where the server kind can use it (Nari is one process: never).
        mps=model_spec["mps"] and backends.launcher(sys_spec["launcher"]).launch.mps,
        sample_rate=model_spec.get("sample_rate"),
        language=model_spec["language"],
        voice=model_spec["voice"],
        ref_audio=inputs.get("ref_audio"),
        ref_text=inputs.get("ref_text"),
        prompts=inputs["prompts"],
        concurrency=config["concurrency"],
        requests=request_counts(config, model),
        warmup=config["warmup"],
        seed=config["seed"],
        request_timeout_s=config["request_timeout_s"],
        health_timeout_s=config["health_timeout_s"],
        max_error_rate=config["max_error_rate"],
        # WER at each speed point (quality.at_speed_points) needs every utterance saved.
        save_audio=config["save_audio"] or quality_settings(config)["at_speed_points"],
        agent=agent_settings(sys_spec),
        repeats=config["repeats"],
        request_rates=config["request_rates"],
        rate_requests=config["rate_requests"] if config["request_rates"] else None,
        capacity=capacity_search(config),
        **{key: sys_spec[key] for key in _SERVER_KEYS if sys_spec.get(key) is not None},
        max_in_flight=config["max_in_flight"] if config["request_rates"] else None,
        audible_onset=audible_onset_spec(config),
    )


# A system's server keys that go into its job as they are (each absent from older configs).
_SERVER_KEYS = (
    "profile",
    "server",
    "base_url",
    "api_key_env",
    "command",
    "ready_path",
    "serving_env",
)


def audible_onset_spec(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The config's `audible_onset` (the schema fills each setting it leaves out) as the job
    carries it: None for the default rule, so a config that states the default, or none,
    keeps the params older specs had; a bad value is passed on as given, for the job's
    check to name its field."""
    from thetalker.metrics.onset import DEFAULT_ONSET, OnsetError, OnsetSettings

    spec = config.get("audible_onset") or {}
    try:
        settings = OnsetSettings.from_spec(spec)
    except (OnsetError, TypeError):
        return dict(spec) if isinstance(spec, Mapping) else spec
    return None if settings == DEFAULT_ONSET else settings.spec()


def capacity_search(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The bench job's bisection (`capacity.refine`): its step limit, the boundary repeats and
    the service level it searches for (`service_level_spec`), or None when off."""
    capacity = config["capacity"]
    if not capacity["refine"]:
        return None
    slo = service_level_spec(config)
    for key in LISTENED_SLO_KEYS:  # judged by the report on the saved audio, never live
        slo.pop(key, None)
    return {
        "max_steps": int(capacity["max_steps"]),
        "repeat_boundary": int(capacity["repeat_boundary"]),
        "slo": slo,
    }


# capacity.slo figures of what the listener hears (docs/quality.md), off by default: left
# out of the level when off, so stating none changes no job's params.
LISTENED_SLO_KEYS = ("min_dnsmos_ovrl", "max_unhealthy_pct")


def service_level_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """`capacity.slo` with its gaps filled from report.*: continuity defaults to
    report.min_continuity_pct, and report.ttfa_slo_s (first byte p90) joins the level."""
    report = config["report"]
    slo = dict(config["capacity"]["slo"])
    if slo.get("min_continuity_pct") is None:
        slo["min_continuity_pct"] = float(report["min_continuity_pct"])
    slo["ttfa_slo_s"] = report["ttfa_slo_s"]
    for key in LISTENED_SLO_KEYS:
        if slo.get(key) is None:
            slo.pop(key, None)
    return slo


def point_labels(config: Mapping[str, Any]) -> list[str]:
    """The grid's points, in the order a bench job runs them: `c{N}`, then `r{R}`."""
    return layout.point_labels(config["concurrency"], config["request_rates"])


def round_dirs(config: Mapping[str, Any]) -> list[str]:
    """The part of a point's files' path below the point: "" for one run, else
    `round1/` .. `roundN/` (`repeats`)."""
    return layout.round_dirs(config["repeats"])


def agent_settings(sys_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """A system's agent mode (`protocol: websocket` and its `agent` pacing), or None."""
    if sys_spec["protocol"] != "websocket":
        return None
    return {"protocol": "websocket", **sys_spec["agent"]}


def agent_systems(config: Mapping[str, Any]) -> list[str]:
    """The systems run in the agent mode, in config order (their table: agent.md)."""
    return [s for s, spec in config["systems"].items() if agent_settings(spec) is not None]


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
        if not _uses_reference(config, model):
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
