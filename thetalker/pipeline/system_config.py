"""The config's systems: which models each runs, and what its server kind
(thetalker.backends) needs and refuses, one line each. Re-exported by
thetalker.pipeline.config_checks, which the rules import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from thetalker import backends
from thetalker.pipeline.job import ConfigError
from thetalker.pipeline.quality_config import quality_run_config

__all__ = ["system_models", "runs", "quality_runs", "check_system"]


def system_models(config: Mapping[str, Any], system: str) -> list[str]:
    """The models a system runs, in config order: its `models` list, else every model."""
    names = config["systems"][system].get("models")
    return [m for m in config["models"] if names is None or m in names]


def runs(config: Mapping[str, Any], systems: Any = None) -> list[tuple[str, str]]:
    """(model, system) of every run, in config order (models, then systems): each system on
    the models it runs. `systems`: only these (default every system)."""
    names = list(config["systems"]) if systems is None else list(systems)
    return [(m, s) for m in config["models"] for s in names if m in system_models(config, s)]


def quality_runs(config: Mapping[str, Any], systems: Any) -> list[tuple[str, str]]:
    """(model, system) of every quality run: the `runs` of `systems`, less those whose
    server cannot serve the quality checkpoint's task (Nari serves no Base model)."""
    out = []
    for model, system in runs(config, systems):
        spec = config["systems"][system]
        speaks = backends.get(spec.get("server") or spec["launcher"])
        voice = quality_run_config(config, model)["models"][model]["voice"]
        if speaks.task_types is None or _task_type(voice) in speaks.task_types:
            out.append((model, system))
    return out


def _task_type(voice: Mapping[str, Any]) -> str:
    return str(voice.get("task_type") or ("Base" if voice.get("clone") else "CustomVoice"))


def check_system(config: Mapping[str, Any], system: str) -> None:
    """What a system's server kind (thetalker.backends) needs and refuses, one line each."""
    from urllib.parse import urlsplit

    spec = config["systems"][system]
    field = f"config field systems.{system}"
    launcher = backends.get(spec["launcher"])
    for name in spec.get("models") or ():
        if name not in config["models"]:
            raise ConfigError(f"{field}.models: unknown model {name!r}")
    for key, needs in (("base_url", "external"), ("command", "command"), ("ready_path", "command")):
        if key in spec and spec["launcher"] != needs:
            raise ConfigError(f"{field}.{key}: only for launcher {needs}")
    if "server" in spec and launcher.speaks:
        raise ConfigError(f"{field}.server: launcher {launcher.name} speaks its own API")
    speaks = backends.get(spec.get("server") or spec["launcher"])
    profiles = launcher.launch.profiles
    if profiles and spec.get("profile") not in profiles:
        raise ConfigError(
            f"{field}.profile: required for launcher {launcher.name}, one of {', '.join(profiles)}"
        )
    if not profiles and "profile" in spec:
        raise ConfigError(f"{field}.profile: launcher {launcher.name} has no profiles")
    if spec.get("use_deploy_file") and not launcher.launch.deploy_files:
        raise ConfigError(
            f"{field}.use_deploy_file: launcher {launcher.name} takes no deploy file "
            "(the repository's are vllm-omni's)"
        )
    if spec.get("protocol") == "websocket" and speaks.agent is None:
        raise ConfigError(f"{field}.protocol: server {speaks.name} has no agent-mode socket")
    if spec["launcher"] == "external":
        url = spec.get("base_url")
        if not url:
            raise ConfigError(f"{field}.base_url: required for launcher external")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{field}.base_url: {url!r} is no http(s) URL")
        if parts.username or parts.password or parts.query:
            raise ConfigError(
                f"{field}.base_url: no credentials in the URL (user info or a query): name "
                "the key's variable in api_key_env"
            )
    if spec["launcher"] == "command":
        from thetalker.backends.command import TemplateError, expand_template

        template = spec.get("command")
        if not template:
            raise ConfigError(f"{field}.command: required for launcher command")
        try:
            deploy = "deploy.yaml" if spec.get("use_deploy_file") else None
            expand_template(template, 1, "127.0.0.1", "model", deploy)
        except TemplateError as exc:
            raise ConfigError(f"{field}.{exc}") from None
        if "{port}" not in template:
            raise ConfigError(f"{field}.command: needs {{port}} (the port the run chose)")
    for model in system_models(config, system):
        task = _task_type(config["models"][model]["voice"])
        if speaks.task_types is not None and task not in speaks.task_types:
            raise ConfigError(
                f"config field models.{model}.voice: server {speaks.name} of system {system!r} "
                f"serves {', '.join(speaks.task_types)} only (got {task}); list the "
                f"system's models in systems.{system}.models"
            )
