"""The config into jobs: the `BenchJob` of one (system, model) run and the files it reads.

`bench_job` carries every setting a run depends on, the deploy file's sha256 included; its
canonical JSON goes into the rule's params, so editing one model's deploy file reruns exactly
the systems that serve that file, and nothing else. `bench_inputs` names the files a run
reads (a change to any reruns it). `check_jobs` builds every run's job without reading its
files, so the job's own value checks (thetalker.pipeline.job) stop the workflow at parse
time, said of the config's field.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thetalker import backends
from thetalker.pipeline.job import SERVER_FIELDS, BenchJob, BenchJobError, ConfigError
from thetalker.pipeline.load_points import capacity_search, request_counts
from thetalker.pipeline.quality_config import quality_settings
from thetalker.pipeline.system_config import runs
from thetalker.util.checks import field_message

__all__ = [
    "agent_settings",
    "agent_systems",
    "audible_onset_spec",
    "bench_inputs",
    "bench_job",
    "check_audible_onset",
    "check_jobs",
    "deploy_file",
    "file_sha256",
    "uses_reference",
]


# A job field said of the config field it comes from (others have the same name).
_CONFIG_FIELD = {
    "launcher": "systems.{system}.launcher",
    "server": "systems.{system}.server",
    "sample_rate": "models.{model}.sample_rate",
    "voice.clone": "models.{model}.voice.clone",
}


def check_jobs(config: Mapping[str, Any]) -> None:
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


def deploy_file(config: Mapping[str, Any], system: str, model: str) -> str | None:
    """The deploy file a (system, model) run serves with, or None (server defaults)."""
    if not config["systems"][system]["use_deploy_file"]:
        return None
    return f"{config['deploy_dir']}/{config['models'][model]['deploy']}.yaml"


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def uses_reference(config: Mapping[str, Any], model: str) -> bool:
    return bool(config["models"][model]["voice"].get("clone"))


def bench_inputs(config: Mapping[str, Any], system: str, model: str) -> dict[str, str]:
    """Files a run reads: a change to any of them reruns it."""
    inputs = {"prompts": str(config["prompts"])}
    deploy = deploy_file(config, system, model)
    if deploy:
        inputs["deploy"] = deploy
    if uses_reference(config, model):
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
        **{key: sys_spec[key] for key in SERVER_FIELDS if sys_spec.get(key) is not None},
        max_in_flight=config["max_in_flight"] if config["request_rates"] else None,
        audible_onset=audible_onset_spec(config),
    )


def check_audible_onset(config: Mapping[str, Any]) -> None:
    """audible_onset: the settings the detector can use, each range and the keys checked by
    thetalker.metrics.OnsetSettings (the schema checks only their types), one line naming
    the field."""
    from thetalker.metrics.onset import OnsetError, OnsetSettings

    try:
        OnsetSettings.from_spec(config.get("audible_onset"))
    except OnsetError as exc:
        raise ConfigError(field_message("config", f"audible_onset.{exc.field}", exc.why)) from None


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


def agent_settings(sys_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """A system's agent mode (`protocol: websocket` and its `agent` pacing), or None."""
    if sys_spec["protocol"] != "websocket":
        return None
    return {"protocol": "websocket", **sys_spec["agent"]}


def agent_systems(config: Mapping[str, Any]) -> list[str]:
    """The systems run in the agent mode, in config order (their table: agent.md)."""
    return [s for s, spec in config["systems"].items() if agent_settings(spec) is not None]
