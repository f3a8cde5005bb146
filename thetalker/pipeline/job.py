"""The job spec of one (system, model) run: what the workflow hands to `serve_and_sweep`.

`BenchJob` is the typed contract between `thetalker.pipeline.job_from_config` (which builds one
from the checked config) and `thetalker.pipeline.serve_and_sweep` (which serves the model and runs
every concurrency point from it). It travels through Snakemake's `params` as canonical JSON
(`to_json`: sorted keys, no spaces), so any change to any field reruns exactly that job.
`to_json` writes the shape the workflow has always written (lists, string keys in
`requests`): a job whose settings did not change keeps its params and is not rerun.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from thetalker import backends
from thetalker.data import layout
from thetalker.util.checks import (
    at_least,
    field_message,
    finite_seconds,
    fraction,
    json_object,
    positive_int_or_none,
    positive_rate,
)

if TYPE_CHECKING:
    from thetalker.metrics.onset import OnsetSettings

__all__ = [
    "BenchJob",
    "BenchJobError",
    "ConfigError",
    "JOB_FIELDS",
    "SERVER_FIELDS",
    "check_job_inputs",
    "read_as_served",
]


class ConfigError(ValueError):
    """A config that passes the schema but cannot run; the message names the field (raised by
    thetalker.pipeline.config_checks and quality_config, of the config a job is built from)."""


class BenchJobError(ValueError):
    """A job spec that cannot run; one line naming the field. A bad value also carries
    the field and the reason, so the config's checks can say them of the config's field."""

    def __init__(self, message: str, field: str | None = None, why: str | None = None) -> None:
        super().__init__(message)
        self.field, self.why = field, why


def _bad_field(name: str, why: str) -> BenchJobError:
    return BenchJobError(field_message("job", name, why), name, why)


@dataclass(frozen=True)
class BenchJob:
    """Every setting one (system, model) run depends on (a value, not a config pointer)."""

    system: str
    model: str
    launcher: str  # a launcher of thetalker.backends: local, vllm-omni, nari, external, ...
    model_id: str  # served model id: given to the launcher, sent as "model"
    deploy_file: str | None  # None: the server's own defaults
    deploy_sha256: str | None  # the deploy file's content, so an edit changes the spec
    env: Mapping[str, str]  # variables set for the server
    extra_args: tuple[str, ...]  # extra server flags (model's, then system's)
    mps: bool  # start an NVIDIA MPS daemon before the server
    sample_rate: int | None  # expected native rate; None: take what the server sends
    language: str
    voice: Mapping[str, Any]  # speaker, or clone (registered / inline), task_type, name
    ref_audio: str | None  # the reference clip of cloning models
    ref_text: str | None  # its transcript file
    prompts: str  # the prompt set, JSONL
    concurrency: tuple[int, ...]  # the points, in the order they run
    requests: Mapping[int, int]  # scored requests per point
    warmup: int  # requests sent and discarded before each point
    seed: int  # prompt order and open-loop arrivals
    request_timeout_s: float
    health_timeout_s: float
    max_error_rate: float  # a point above it fails the job
    save_audio: bool  # keep every scored utterance beside the point's records
    # The agent mode (thetalker.client.websocket): protocol "websocket" and the text's pace
    # (text_pace, text_pace_unit, text_pace_jitter, split_granularity). None: whole-text
    # requests. Optional, and left out of the JSON when None, so older specs keep their params.
    agent: Mapping[str, Any] | None = None
    # Names of variables passed from the job's environment to the server (never their values).
    # Optional, and left out of the JSON when empty, so older specs keep their params.
    secret_env: tuple[str, ...] = ()
    # Optional too, each left out of the JSON at its default (older specs keep their params):
    repeats: int = 1  # rounds of each point, back to back on the server (round1..roundN)
    request_rates: tuple[float, ...] = ()  # open-loop points (requests/s), after the closed
    rate_requests: int | None = None  # scored requests at each request-rate point
    # The bisection of thetalker.pipeline.capacity in the same server session, None: off. Keys:
    # max_steps, repeat_boundary, slo (the service level, capacity.slo; older specs:
    # min_continuity_pct, ttfa_slo_s).
    capacity: Mapping[str, Any] | None = None
    # The server (thetalker.backends), each left out of the JSON at None:
    profile: str | None = None  # its engine profile (Nari: ttfa, balanced, throughput)
    server: str | None = None  # the API it speaks (external, command); None: the launcher's
    base_url: str | None = None  # launcher external: the running server's URL
    api_key_env: str | None = None  # the variable holding its API key (the name only)
    command: str | None = None  # launcher command: the template ({port}, {model}, {deploy})
    ready_path: str | None = None  # launcher command: GET answering 200 once ready
    # launcher vllm-omni: the venv or prefix whose bin/vllm-omni serves (None: the one on PATH)
    serving_env: str | None = None
    # Open-loop points: arrivals finding this many requests in flight are dropped (None: no cap).
    max_in_flight: int | None = None
    # The audible onset's settings (thetalker.metrics.onset: threshold_dbfs, frame_s, hop_s,
    # run_frames), None: the default rule, and then left out of the JSON (older specs keep
    # their params).
    audible_onset: Mapping[str, Any] | None = None

    @property
    def onset(self) -> OnsetSettings:
        """The job's `thetalker.metrics.OnsetSettings` (the default rule when it states none)."""
        from thetalker.metrics.onset import OnsetSettings

        return OnsetSettings.from_spec(self.audible_onset)

    @property
    def speaks(self) -> str:
        """The API the client speaks (thetalker.backends.api): `server`, else the one the
        launcher's server speaks (vllm-omni's for external and command)."""
        return self.server or backends.launcher(self.launcher).api

    def __post_init__(self) -> None:
        # One normal form, whichever side built it (YAML ints, JSON lists, string keys).
        coerce = {
            "env": dict(self.env),
            "extra_args": tuple(str(a) for a in self.extra_args),
            "mps": bool(self.mps),
            "voice": dict(self.voice),
            "concurrency": tuple(int(c) for c in self.concurrency),
            "requests": {int(c): int(n) for c, n in self.requests.items()},
            "warmup": int(self.warmup),
            "seed": int(self.seed),
            "request_timeout_s": float(self.request_timeout_s),
            "health_timeout_s": float(self.health_timeout_s),
            "max_error_rate": float(self.max_error_rate),
            "save_audio": bool(self.save_audio),
            "agent": None if self.agent is None else dict(self.agent),
            "secret_env": tuple(str(n) for n in self.secret_env),
            "repeats": int(self.repeats),
            "request_rates": tuple(float(r) for r in self.request_rates),
            "rate_requests": None if self.rate_requests is None else int(self.rate_requests),
            "capacity": None if self.capacity is None else dict(self.capacity),
            "max_in_flight": None if self.max_in_flight is None else int(self.max_in_flight),
            "audible_onset": None if self.audible_onset is None else dict(self.audible_onset),
        }
        for name, value in coerce.items():
            object.__setattr__(self, name, value)
        missing = [c for c in self.concurrency if c not in self.requests]
        if missing:
            raise _bad_field("requests", f"no count for concurrency {', '.join(map(str, missing))}")
        _check_values(self)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: lists for sequences, the points' counts keyed by string."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["extra_args"] = list(self.extra_args)
        data["concurrency"] = list(self.concurrency)
        data["requests"] = {str(c): self.requests[c] for c in self.concurrency}
        if data["agent"] is None:
            del data["agent"]
        data["secret_env"] = list(self.secret_env)
        if not data["secret_env"]:
            del data["secret_env"]
        data["request_rates"] = list(self.request_rates)
        for name, default in _OMITTED_AT.items():
            if data[name] == default:
                del data[name]
        return data

    def point_labels(self) -> list[str]:
        """The grid's points in the order they run: `c{N}` (closed loop), then `r{R}`."""
        return layout.point_labels(self.concurrency, self.request_rates)

    def registered_voice(self) -> str | None:
        """The name of the voice registered once (voice.clone registered; `ref` where the
        config names none), None without one."""
        if self.voice.get("clone") != "registered":
            return None
        return str(self.voice.get("name", "ref"))

    def to_json(self) -> str:
        """Canonical JSON: equal jobs give equal strings (Snakemake compares params)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchJob:
        missing = [name for name in JOB_FIELDS if name not in data]
        if missing:
            raise BenchJobError(f"job spec: missing field(s) {', '.join(missing)}")
        unknown = sorted(set(data) - set(JOB_FIELDS) - set(OPTIONAL_JOB_FIELDS))
        if unknown:
            raise BenchJobError(f"job spec: unknown field(s) {', '.join(unknown)}")
        try:
            known = (*JOB_FIELDS, *OPTIONAL_JOB_FIELDS)
            return cls(**{name: data[name] for name in known if name in data})
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, BenchJobError):
                raise
            raise BenchJobError(f"job spec: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> BenchJob:
        return cls.from_dict(json_object(text, "job spec", BenchJobError))


def _check_values(job: BenchJob) -> None:
    """Values a job cannot run with, refused before any server starts (one line each)."""

    def bad(name: str, why: str | None) -> None:
        if why is not None:
            raise _bad_field(name, why)

    if job.launcher not in backends.launcher_names():
        bad("launcher", f"{job.launcher!r} is not one of {', '.join(backends.launcher_names())}")
    launcher = backends.launcher(job.launcher)
    if job.server is not None and not launcher.any_api:
        bad("server", f"launcher {job.launcher} speaks its own API ({launcher.api})")
    if job.speaks not in backends.api_names():
        known = ", ".join(backends.api_names())
        bad("server", f"{job.speaks!r} is no API the client speaks (one of {known})")
    for k, c in enumerate(job.concurrency):
        bad(f"concurrency[{k}]", at_least(c, 1))
    for point, n in job.requests.items():
        bad(f"requests.{point}", at_least(n, 1))
    bad("warmup", at_least(job.warmup, 0))
    bad("request_timeout_s", finite_seconds(job.request_timeout_s))
    bad("health_timeout_s", finite_seconds(job.health_timeout_s))
    bad("max_error_rate", fraction(job.max_error_rate))
    bad("sample_rate", positive_int_or_none(job.sample_rate))
    bad("repeats", at_least(job.repeats, 1))
    for k, rate in enumerate(job.request_rates):
        bad(f"request_rates[{k}]", positive_rate(rate))
    if job.request_rates and (job.rate_requests is None or job.rate_requests < 1):
        bad("rate_requests", f"must be at least 1 with request_rates (got {job.rate_requests})")
    if job.capacity is not None:
        known = {"max_steps", "min_continuity_pct", "ttfa_slo_s", "slo", "repeat_boundary"}
        unknown = sorted(set(job.capacity) - known)
        if unknown:
            bad("capacity", f"unknown key(s) {', '.join(unknown)}")
        if "max_steps" not in job.capacity:  # read by the search and the plan
            bad("capacity", "missing key(s) max_steps")
        if job.capacity.get("slo") is not None:
            from thetalker.pipeline.capacity import ServiceLevel

            try:
                ServiceLevel.from_spec(job.capacity["slo"])
            except (TypeError, ValueError) as exc:
                bad("capacity.slo", str(exc))
        if int(job.capacity["max_steps"]) < 0:
            bad("capacity.max_steps", f"must be 0 or more (got {job.capacity['max_steps']})")
    if job.audible_onset is not None:
        from thetalker.metrics.onset import OnsetError, OnsetSettings

        try:
            OnsetSettings.from_spec(job.audible_onset)
        except OnsetError as exc:
            bad(f"audible_onset.{exc.field}", exc.why)
    if job.voice.get("clone") and not backends.api(job.speaks).clones_voices:
        bad("voice.clone", f"the {job.speaks} server cannot clone voices (give a speaker)")


def read_as_served(launcher: backends.Launcher, path: str) -> None:
    """Read a deploy file as the launcher's server will (`Launcher.deploy_check`, e.g. the
    embedded server's keys); ValueError (its one line) when it would refuse it. A launcher
    without a check: nothing beyond the YAML read its caller already made."""
    if launcher.deploy_check is None:
        return
    import importlib

    module, _, function = launcher.deploy_check.partition(":")
    getattr(importlib.import_module(module), function)(path)


def check_job_inputs(job: BenchJob) -> None:
    """The files a job reads, checked before its server starts: the prompts parse, the
    deploy file is readable YAML (for the local server: its keys as it checks them), and a
    cloning job's reference clip (1 to 30 s) and transcript exist. BenchJobError, one line."""
    from pathlib import Path

    from thetalker.data.prompts import PromptError, load_prompts
    from thetalker.data.wavio import WavError, check_reference_clip
    from thetalker.data.yaml_files import YamlFileError, load_yaml_mapping

    try:
        load_prompts(job.prompts)
    except PromptError as exc:
        raise BenchJobError(f"job field prompts: {exc}") from None
    if job.deploy_file is not None:
        try:
            load_yaml_mapping(job.deploy_file, "deploy file")
            read_as_served(backends.launcher(job.launcher), job.deploy_file)
        except (YamlFileError, ValueError) as exc:
            raise BenchJobError(f"job field deploy_file: {exc}") from None
    if job.voice.get("clone"):
        for name, path in (("ref_audio", job.ref_audio), ("ref_text", job.ref_text)):
            if not path or not Path(path).is_file():
                raise BenchJobError(f"job field {name}: {path} does not exist (voice.clone)")
        try:
            check_reference_clip(str(job.ref_audio))
        except WavError as exc:
            raise BenchJobError(f"job field ref_audio: {exc}") from None


# The job's fields a system's keys of the same names give as they are (each absent from
# older configs: thetalker.pipeline.job_from_config).
SERVER_FIELDS: tuple[str, ...] = (
    "profile",
    "server",
    "base_url",
    "api_key_env",
    "command",
    "ready_path",
    "serving_env",
)
# The 23 fields, in declaration order: what to_json writes and from_json requires.
# Fields with a default may be left out (to_json leaves them out at their default).
OPTIONAL_JOB_FIELDS: tuple[str, ...] = (
    "secret_env",
    "agent",
    "repeats",
    "request_rates",
    "rate_requests",
    "capacity",
    *SERVER_FIELDS,
    "max_in_flight",
    "audible_onset",
)
# The optional fields to_dict leaves out at these values (secret_env: when empty).
_OMITTED_AT: dict[str, Any] = {
    "repeats": 1,
    "request_rates": [],
    "rate_requests": None,
    "capacity": None,
    "profile": None,
    "server": None,
    "base_url": None,
    "api_key_env": None,
    "command": None,
    "ready_path": None,
    "serving_env": None,
    "max_in_flight": None,
    "audible_onset": None,
}
JOB_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(BenchJob) if f.name not in OPTIONAL_JOB_FIELDS
)
