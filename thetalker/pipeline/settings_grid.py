"""Server settings as data: a system's `settings:` knobs, the settings they make, and the
bench jobs that serve each one (docs/settings.md).

A knob is one of:

- a dotted path into the deploy file (`workers`, `synthesis.length_scale`,
  `stages.1.max_num_seqs`) on a system served with its deploy file (`use_deploy_file`): each
  setting is written as its own deploy file, the base file with those values;
- a server flag (`--tts_engine.engine.max_running_requests`) or an environment value
  (`env.NAME`) on any other system: each setting is an argument set (flags appended to the
  system's extra_args, variables added to its env).

The stock value is always a setting: the deploy file's own value (added first when the
config's list leaves it out), or, for a flag or variable, `null` (not passed: the server's
default). The settings are every combination of the knobs' values; each has a short
readable label (`stock`, or the knobs it changes: `workers=1+max_active_streams=1`) and the
sha256 of its file, which names the file (`deploy-<sha12>.yaml`, `args-<sha12>.yaml`) and
enters the bench job's spec, so provenance records it like any deploy file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from thetalker.pipeline.job import BenchJob

__all__ = [
    "STOCK",
    "Knob",
    "Setting",
    "SettingsError",
    "knob_kind",
    "base_deploy",
    "settings_of",
    "setting_file_text",
    "settings_systems",
    "screen_job",
    "search_job",
    "lookup",
]

STOCK = "stock"  # the label of the all-stock setting
FLAG, ENV, DEPLOY = "flag", "env", "deploy"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


class SettingsError(ValueError):
    """A knob that cannot make a setting: one line naming the knob."""


@dataclass(frozen=True)
class Knob:
    path: str  # `workers`, `stages.1.max_num_seqs`, `--flag`, `env.NAME`
    values: tuple[Any, ...]  # the stock value first
    stock: Any


@dataclass(frozen=True)
class Setting:
    """One combination of knob values: `values` knob path -> value (every knob)."""

    label: str
    values: Mapping[str, Any]
    text: str  # the file written for it (deploy file or argument set)
    kind: str  # DEPLOY, or "args" (flags and variables)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def stock(self) -> bool:
        return self.label == STOCK

    @property
    def filename(self) -> str:
        return f"{'deploy' if self.kind == DEPLOY else 'args'}-{self.sha256[:12]}.yaml"


def knob_kind(path: str) -> str:
    if path.startswith("--"):
        return FLAG
    if path.startswith("env."):
        return ENV
    return DEPLOY


def lookup(data: Any, path: str) -> Any:
    """The value at a dotted path (list indices as numbers); KeyError naming the missing part."""
    node = data
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(part)
    return node


def _put(data: Any, path: str, value: Any) -> None:
    parts = path.split(".")
    node = lookup(data, ".".join(parts[:-1])) if len(parts) > 1 else data
    node[int(parts[-1]) if isinstance(node, list) else parts[-1]] = value


def base_deploy(config: Mapping[str, Any], system: str, model: str) -> str | None:
    """The deploy file a system's settings start from (None: a flag/env system), where
    config_checks.deploy_file finds it (not imported: config_checks calls these checks)."""
    if not config["systems"][system].get("use_deploy_file"):
        return None
    return f"{config['deploy_dir']}/{config['models'][model]['deploy']}.yaml"


def _same_type(stock: Any, value: Any) -> bool:
    """A knob's value may replace its stock value: same type (an int where a float was)."""
    if stock is None:
        return True
    if isinstance(stock, bool) or isinstance(value, bool):
        return isinstance(stock, bool) and isinstance(value, bool)
    if isinstance(stock, float):
        return isinstance(value, int | float)
    return type(value) is type(stock)


def _knobs(spec: Mapping[str, Any], base: Any, where: str) -> list[Knob]:
    knobs = []
    for path, values in spec.items():
        field = f"{where}.{path}"
        if not isinstance(values, list) or not values:
            raise SettingsError(f"config field {field}: must be a non-empty list of values")
        kind = knob_kind(str(path))
        if kind == DEPLOY:
            if base is None:
                raise SettingsError(
                    f"config field {field}: a deploy-file knob needs use_deploy_file "
                    "(or name a server flag --NAME or env.NAME)"
                )
            try:
                stock = lookup(base, str(path))
            except KeyError as exc:
                raise SettingsError(
                    f"config field {field}: the deploy file has no {exc.args[0]!r} "
                    f"(knob path {path})"
                ) from None
        else:
            stock = None  # not passed: the server's own default
        for value in values:
            bad = isinstance(value, Mapping | list) and not isinstance(stock, list)
            if bad or not _same_type(stock, value):
                raise SettingsError(
                    f"config field {field}: value {value!r} is a {type(value).__name__}, "
                    f"the stock value {stock!r} a {type(stock).__name__}"
                )
        unique = [stock] + [v for v in values if v != stock]
        knobs.append(Knob(str(path), tuple(dict.fromkeys(map(_key, unique)).keys()), stock))
    return [replace(k, values=tuple(json.loads(v) for v in k.values)) for k in knobs]


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _short_names(knobs: Sequence[Knob]) -> list[str]:
    """Each knob's name in a label: its path's last part where no other knob's ends alike
    (`initial_codec_chunk_frames`), else its whole path (`stages.1.max_num_seqs`)."""
    last = [k.path.lstrip("-").split(".")[-1] for k in knobs]
    return [
        name if last.count(name) == 1 else k.path.lstrip("-")
        for k, name in zip(knobs, last, strict=True)
    ]


def _label(knobs: Sequence[Knob], combo: Sequence[Any]) -> str:
    changed = [
        f"{name}={_key(v).strip(chr(34))}"
        for k, name, v in zip(knobs, _short_names(knobs), combo, strict=True)
        if _key(v) != _key(k.stock)
    ]
    return _UNSAFE.sub("-", "+".join(changed)) if changed else STOCK


def setting_file_text(base: Any, base_path: str | None, values: Mapping[str, Any]) -> str:
    """The file a setting is served with: the base deploy file with its knobs' values (a
    header naming the base and each change), or the flags and variables of an argument set."""
    if base_path is not None:
        data = json.loads(json.dumps(base))  # a deep copy
        for path, value in values.items():
            _put(data, path, value)
        head = [f"# A setting of {base_path} (thetalker settings search):"]
        changed = [
            (p, lookup(base, p), v) for p, v in values.items() if _key(lookup(base, p)) != _key(v)
        ]
        head += [f"#   {p}: {json.dumps(old)} -> {json.dumps(new)}" for p, old, new in changed]
        head += [] if changed else ["#   (the base file's own values: the stock setting)"]
        return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False)
    args: list[str] = []
    env: dict[str, str] = {}
    for path, value in values.items():
        if value is None:
            continue
        if knob_kind(path) == FLAG:
            args += [path, _arg(value)]
        else:
            env[path[len("env.") :]] = _arg(value)
    text = "# An argument set (thetalker settings search): flags and variables added\n"
    return text + yaml.safe_dump({"extra_args": args, "env": env}, sort_keys=False)


def _arg(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def settings_of(config: Mapping[str, Any], system: str, model: str) -> list[Setting]:
    """Every setting of a (system, model), the stock one first; identical ones (the same
    file) once. SettingsError (one line naming the knob) for a knob that cannot be served."""
    from thetalker.data.yaml_files import load_yaml_mapping

    spec = config["systems"][system].get("settings") or {}
    path = base_deploy(config, system, model)
    base = load_yaml_mapping(path, "deploy file") if path else None
    knobs = _knobs(spec, base, f"systems.{system}.settings")
    out: dict[str, Setting] = {}
    for combo in itertools.product(*(k.values for k in knobs)):
        values = {k.path: v for k, v in zip(knobs, combo, strict=True)}
        text = setting_file_text(base, path, values)
        setting = Setting(_label(knobs, combo), values, text, DEPLOY if path else "args")
        out.setdefault(setting.sha256, setting)
    return list(out.values())


def settings_systems(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(system, model) of every run with `settings:` knobs, in config order
    (`settings_search.models`: those models only)."""
    from thetalker.pipeline.system_config import system_models

    only = (config.get("settings_search") or {}).get("models")
    return [
        (s, m)
        for s, spec in config["systems"].items()
        if spec.get("settings")
        for m in system_models(config, s)
        if only is None or m in only
    ]


def _with_setting(job: BenchJob, setting: Setting, file: str) -> BenchJob:
    if setting.kind == DEPLOY:
        return replace(job, deploy_file=file, deploy_sha256=setting.sha256)
    added = yaml.safe_load(setting.text)
    return replace(
        job,
        extra_args=(*job.extra_args, *added["extra_args"]),
        env={**job.env, **added["env"]},
    )


def screen_job(base: BenchJob, config: Mapping[str, Any], setting: Setting, file: str) -> BenchJob:
    """The screening job: one point at settings_search.screen's load, no search. `base`:
    the (system, model)'s bench job (config_checks.bench_job)."""
    screen = config["settings_search"]["screen"]
    c, n = int(screen["concurrency"]), int(screen["requests"])
    job = replace(base, concurrency=(c,), requests={c: n}, request_rates=(), rate_requests=None)
    job = replace(job, capacity=None, max_in_flight=None, repeats=1)
    return _with_setting(job, setting, file)


def search_job(base: BenchJob, config: Mapping[str, Any], setting: Setting, file: str) -> BenchJob:
    """The full search: the config's grid, then bisection (capacity.max_steps). The service
    level is not in the spec (`slo` None): it is given at run time (serve_and_sweep --slo),
    so a change of capacity.slo reruns no bench job; the table recomputes every capacity
    from the records. `base`: as screen_job's."""
    capacity = config["capacity"]
    search = {
        "max_steps": int(capacity["max_steps"]),
        "repeat_boundary": int(capacity["repeat_boundary"]),
        "slo": None,
    }
    job = replace(base, capacity=search, repeats=1)
    return _with_setting(job, setting, file)
