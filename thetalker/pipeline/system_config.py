"""The config's systems: which models each runs, the API each speaks, and what its launcher
and API (thetalker.backends) need and refuse, one line each. Re-exported by
thetalker.pipeline.config_checks, which the rules import."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from thetalker import backends
from thetalker.pipeline.job import ConfigError
from thetalker.pipeline.quality_config import quality_run_config

__all__ = ["system_models", "runs", "quality_runs", "system_api", "check_system"]


def system_models(config: Mapping[str, Any], system: str) -> list[str]:
    """The models a system runs, in config order: its `models` list, else every model."""
    names = config["systems"][system].get("models")
    return [m for m in config["models"] if names is None or m in names]


def system_api(config: Mapping[str, Any], system: str) -> backends.ServerApi:
    """The API a system's server speaks: its `server`, else its launcher's (vllm-omni's for
    external and command, as config/README.md says)."""
    spec = config["systems"][system]
    return backends.api(spec.get("server") or backends.launcher(spec["launcher"]).api)


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
        speaks = system_api(config, system)
        voice = quality_run_config(config, model)["models"][model]["voice"]
        if speaks.task_types is None or _task_type(voice) in speaks.task_types:
            out.append((model, system))
    return out


def _task_type(voice: Mapping[str, Any]) -> str:
    return str(voice.get("task_type") or ("Base" if voice.get("clone") else "CustomVoice"))


def _check_base_url(url: str, field: str) -> None:
    """A server's URL: http(s) with a host, no credentials in it (the key has its variable)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{field}: {url!r} is no http(s) URL")
    if parts.username or parts.password or parts.query:
        raise ConfigError(
            f"{field}: no credentials in the URL (user info or a query): name "
            "the key's variable in api_key_env"
        )


def check_system(config: Mapping[str, Any], system: str) -> None:
    """What a system's launcher and API (thetalker.backends) need and refuse, one line each."""
    spec = config["systems"][system]
    field = f"config field systems.{system}"
    launcher = backends.launcher(spec["launcher"])
    for name in spec.get("models") or ():
        if name not in config["models"]:
            raise ConfigError(f"{field}.models: unknown model {name!r}")
    takers: dict[str, list[str]] = {}  # system key -> the launchers that take it
    for name in backends.launcher_names():
        for key in backends.launcher(name).system_keys:
            takers.setdefault(key, []).append(name)
    for key, names in takers.items():
        if key in spec and key not in launcher.system_keys:
            raise ConfigError(f"{field}.{key}: only for launcher {', '.join(names)}")
    for key, required in launcher.system_keys.items():
        if required and not spec.get(key):
            raise ConfigError(f"{field}.{key}: required for launcher {launcher.name}")
    if "server" in spec and not launcher.any_api:
        raise ConfigError(f"{field}.server: launcher {launcher.name} speaks its own API")
    speaks = system_api(config, system)
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
    if "base_url" in spec:
        _check_base_url(spec["base_url"], f"{field}.base_url")
    if "command" in spec:
        from thetalker.backends.command import TemplateError, expand_template

        template = spec["command"]
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
