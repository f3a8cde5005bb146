"""The A/B's plan (docs/ab.md): which pairs run, in which order, and each arm's job.

A pair (config `ab.pairs`) names two arms, A (the base) and B (the new), each a system of
the config, served with its own deploy file where the arm names one. Each of `ab.rounds`
rounds serves A and B once, each on a fresh server, in the order A B, B A, A B, ... (vllm-omni
PR #7781's protocol): drift of the machine over the run falls on both arms alike instead of
posing as a change. The arms run one after the other as a chain of jobs (`slot_order`,
`previous_slot`), so a rerun after a crash resumes at the arm that did not finish.

Both arms measure the same thing: the same prompts, seed, arrival schedule, load points,
sample rate, voice and onset rule. `check_ab` refuses, in one line, a pair whose arms differ in
anything but the server (`SERVED_FIELDS`): that would be a comparison of measurements, not
of servers. Each arm runs the config's grid once (no capacity search: its points would differ
between arms) and keeps every scored utterance (the waveform check, docs/ab.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from thetalker.pipeline.job import BenchJob, ConfigError
from thetalker.pipeline.job_from_config import bench_job, file_sha256
from thetalker.pipeline.system_config import system_models

__all__ = [
    "ARMS",
    "SERVED_FIELDS",
    "AbArm",
    "AbRun",
    "ab_runs",
    "arm_job",
    "check_ab",
    "previous_slot",
    "slot_order",
]

ARMS = ("a", "b")
# What may differ between the arms: the server and how it is started. Anything else in the
# job (prompts, seed, points, counts, sample rate, voice, timeouts) is the measurement.
SERVED_FIELDS = frozenset(
    {
        "system",
        "launcher",
        "deploy_file",
        "deploy_sha256",
        "env",
        "extra_args",
        "mps",
        "profile",
        "server",
        "base_url",
        "api_key_env",
        "secret_env",
        "command",
        "ready_path",
        "serving_env",
    }
)


@dataclass(frozen=True)
class AbArm:
    system: str
    deploy: str | None = None  # None: the system's own deploy file (or none)

    @classmethod
    def from_config(cls, spec: Any) -> AbArm:
        if isinstance(spec, str):
            return cls(spec)
        return cls(str(spec["system"]), spec.get("deploy"))

    def describe(self) -> str:
        return self.system + (f" with {self.deploy}" if self.deploy else "")


@dataclass(frozen=True)
class AbRun:
    """One pair on one model: the unit of the chain and of the table."""

    pair: str
    model: str
    a: AbArm
    b: AbArm
    rounds: int = 2

    def arm(self, name: str) -> AbArm:
        return self.a if name == "a" else self.b

    @property
    def folder(self) -> str:
        return f"results/ab/{self.pair}/{self.model}"


def _pairs(config: Mapping[str, Any]) -> Mapping[str, Any]:
    return (config.get("ab") or {}).get("pairs") or {}


def ab_runs(config: Mapping[str, Any]) -> list[AbRun]:
    """Every (pair, model), pairs in config order: a pair's `models`, else every model both
    of its systems run."""
    out = []
    for pair, spec in _pairs(config).items():
        a, b = AbArm.from_config(spec["a"]), AbArm.from_config(spec["b"])
        both = [m for m in system_models(config, a.system) if m in system_models(config, b.system)]
        models = spec.get("models") or both
        rounds = int(spec.get("rounds") or (config.get("ab") or {}).get("rounds") or 3)
        out += [AbRun(pair, m, a, b, rounds) for m in models]
    return out


def slot_order(rounds: int) -> list[tuple[int, str]]:
    """(round, arm) in the order they run: A B, then B A, alternating (2 rounds: A B B A)."""
    order = []
    for k in range(1, rounds + 1):
        order += [(k, "a"), (k, "b")] if k % 2 else [(k, "b"), (k, "a")]
    return order


def previous_slot(rounds: int, round_k: int, arm: str) -> tuple[int, str] | None:
    """The arm that runs just before (round_k, arm) in the chain; None for the first."""
    order = slot_order(rounds)
    i = order.index((round_k, arm))
    return order[i - 1] if i else None


def arm_job(config: Mapping[str, Any], run: AbRun, arm: str, hash_files: bool = True) -> BenchJob:
    """The bench job of one arm: the system's job on the model, served with the arm's deploy
    file, the config's grid once (no capacity search, no repeats), every utterance kept.
    The same for every round of the arm: the rounds differ in their folders only."""
    spec = run.arm(arm)
    job = bench_job(config, spec.system, run.model, hash_files=hash_files)
    if spec.deploy:
        sha = file_sha256(spec.deploy) if hash_files else None
        job = replace(job, deploy_file=spec.deploy, deploy_sha256=sha)
    return replace(job, capacity=None, repeats=1, save_audio=True)


def _where(pair: str) -> str:
    return f"config field ab.pairs.{pair}"


def _check_arm(config: Mapping[str, Any], pair: str, name: str, arm: AbArm) -> None:
    systems = config["systems"]
    if arm.system not in systems:
        raise ConfigError(
            f"{_where(pair)}.{name}: unknown system {arm.system!r} (systems: {', '.join(systems)})"
        )
    if arm.deploy is None:
        return
    if not systems[arm.system].get("use_deploy_file"):
        raise ConfigError(
            f"{_where(pair)}.{name}.deploy: system {arm.system!r} serves no deploy file "
            f"(use_deploy_file false)"
        )
    if not Path(arm.deploy).is_file():
        raise ConfigError(f"{_where(pair)}.{name}.deploy: no such file {arm.deploy}")


def _differences(job_a: BenchJob, job_b: BenchJob) -> list[str]:
    da, db = job_a.to_dict(), job_b.to_dict()
    names = sorted((set(da) | set(db)) - SERVED_FIELDS)
    return [n for n in names if da.get(n) != db.get(n)]


def check_ab(config: Mapping[str, Any]) -> None:
    """ConfigError, one line naming the pair, for the first pair that cannot run or whose
    arms would measure different things."""
    for pair, spec in _pairs(config).items():
        a, b = AbArm.from_config(spec["a"]), AbArm.from_config(spec["b"])
        _check_arm(config, pair, "a", a)
        _check_arm(config, pair, "b", b)
        served_a, served_b = system_models(config, a.system), system_models(config, b.system)
        for model in spec.get("models") or []:
            if model not in served_a or model not in served_b:
                raise ConfigError(
                    f"{_where(pair)}.models: {model!r} is not run by both {a.system} and {b.system}"
                )
        if not [m for m in served_a if m in served_b]:
            raise ConfigError(f"{_where(pair)}: no model is run by both {a.system} and {b.system}")
    for run in ab_runs(config):
        jobs = [arm_job(config, run, x, hash_files=False) for x in ARMS]
        differ = _differences(*jobs)
        if differ:
            da, db = jobs[0].to_dict(), jobs[1].to_dict()
            shown = "; ".join(f"{n} (A {da.get(n)!r}, B {db.get(n)!r})" for n in differ[:3])
            raise ConfigError(
                f"{_where(run.pair)}: on {run.model} the arms differ in {shown}: an A/B "
                f"compares servers, not measurements"
            )
