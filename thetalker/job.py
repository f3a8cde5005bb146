"""The job spec of one (system, model) run: what the workflow hands to `serve_and_sweep`.

`BenchJob` is the typed contract between `thetalker.workflow_config` (which builds one from
the checked config) and `thetalker.serve_and_sweep` (which serves the model and runs every
concurrency point from it). It travels through Snakemake's `params` as canonical JSON
(`to_json`: sorted keys, no spaces), so any change to any field reruns exactly that job.
`to_json` writes the shape the workflow has always written (lists, string keys in
`requests`): a job whose settings did not change keeps its params and is not rerun.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["BenchJob", "BenchJobError", "JOB_FIELDS"]


class BenchJobError(ValueError):
    """A job spec that cannot run; one line naming the field."""


@dataclass(frozen=True)
class BenchJob:
    """Every setting one (system, model) run depends on (a value, not a config pointer)."""

    system: str
    model: str
    launcher: str  # "local" or "vllm-omni" (thetalker.launch.LAUNCHERS)
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
        }
        for name, value in coerce.items():
            object.__setattr__(self, name, value)
        missing = [c for c in self.concurrency if c not in self.requests]
        if missing:
            raise BenchJobError(
                f"job field requests: no count for concurrency {', '.join(map(str, missing))}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: lists for sequences, the points' counts keyed by string."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["extra_args"] = list(self.extra_args)
        data["concurrency"] = list(self.concurrency)
        data["requests"] = {str(c): self.requests[c] for c in self.concurrency}
        return data

    def to_json(self) -> str:
        """Canonical JSON: equal jobs give equal strings (Snakemake compares params)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchJob:
        missing = [name for name in JOB_FIELDS if name not in data]
        if missing:
            raise BenchJobError(f"job spec: missing field(s) {', '.join(missing)}")
        unknown = sorted(set(data) - set(JOB_FIELDS))
        if unknown:
            raise BenchJobError(f"job spec: unknown field(s) {', '.join(unknown)}")
        try:
            return cls(**{name: data[name] for name in JOB_FIELDS})
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, BenchJobError):
                raise
            raise BenchJobError(f"job spec: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> BenchJob:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BenchJobError(f"job spec: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise BenchJobError("job spec: expected a JSON object")
        return cls.from_dict(data)


# The 23 fields, in declaration order: what to_json writes and from_json requires.
JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(BenchJob))
