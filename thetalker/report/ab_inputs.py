"""What the A/B table reads of one run (results/ab/{pair}/{model}/round{k}/{a|b}/), checked.

Every arm of every round must have finished each point (its `summary.json` and records); the
arms must have measured the same thing, read from what they wrote: the same prompt set
(sha256), sample rate, model, voice, load and counts, seed (so the same prompt in the same
slot of the arrival schedule). Anything else is refused in one line naming the files and the
field (`AbInputError`): a B/A over two different measurements is no verdict on a server.
What may differ is the server: its versions, deploy file, flags and environment, which
`builds` reports side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thetalker.data.record_reads import RecordError, read_json, read_records

__all__ = [
    "AbInputError",
    "ArmPoint",
    "DNSMOS_KEY",
    "MEASURED",
    "read_arm_point",
    "check_alike",
    "builds",
]

# What the two arms must agree on, from each point's provenance.json (`config` block, the
# prompt set's sha256): what a reader means by "the same measurement".
MEASURED = (
    "model_id",
    "sample_rate",
    "language",
    "voice",
    "ref_audio",
    "concurrency",
    "requests",
    "request_rates",
    "warmup",
    "seed",
    "request_timeout_s",
)


class AbInputError(ValueError):
    """An A/B run that cannot be compared; the message names the file."""


@dataclass(frozen=True)
class ArmPoint:
    """One arm's point over the rounds: each round's records (warm-up included), summary,
    provenance and server metrics, in round order."""

    arm: str
    dirs: tuple[Path, ...]
    records: tuple[list[dict[str, Any]], ...]
    summaries: tuple[dict[str, Any], ...]
    provenance: tuple[dict[str, Any], ...]
    server_metrics: tuple[dict[str, Any] | None, ...]

    def scored(self, k: int) -> list[dict[str, Any]]:
        """Round k's scored requests (0-based), in sending order."""
        rows = [r for r in self.records[k] if not r.get("warmup")]
        return sorted(rows, key=lambda r: int(r["request_index"]))


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise AbInputError(f"{path}: missing (the arm did not finish this point)")
    try:
        data = read_json(path)
    except RecordError as exc:
        raise AbInputError(str(exc)) from None
    if not isinstance(data, dict):
        raise AbInputError(f"{path}: not a JSON object")
    return data


def read_arm_point(run_dir: str | Path, arm: str, point: str, rounds: int) -> ArmPoint:
    """Arm `arm` ("a" or "b") at `point` in every round of the run folder."""
    dirs = tuple(Path(run_dir) / f"round{k}" / arm / point for k in range(1, rounds + 1))
    records, summaries, provenance, metrics = [], [], [], []
    for d in dirs:
        summaries.append(_json(d / "summary.json"))
        provenance.append(_json(d / "provenance.json"))
        try:
            rows = list(read_records(d / "records.jsonl"))
        except (RecordError, OSError) as exc:
            raise AbInputError(str(exc)) from None
        if not any(not r.get("warmup") for r in rows):
            raise AbInputError(f"{d / 'records.jsonl'}: no scored request")
        records.append(_with_dnsmos(rows, d / "dnsmos.json"))
        server = d / "server_metrics.json"
        metrics.append(_json(server) if server.is_file() else None)
    return ArmPoint(arm, dirs, tuple(records), tuple(summaries), tuple(provenance), tuple(metrics))


# A record's DNSMOS OVRL from the point's dnsmos.json (thetalker.quality.dnsmos), where the
# A/B scored its audio (ab.dnsmos): only an utterance the model scored has one.
DNSMOS_KEY = "_dnsmos_ovrl"


def _with_dnsmos(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return rows
    data = _json(path)
    if not data.get("available"):
        return rows
    scored = {
        int(s["request_index"]): float(s["ovrl"])
        for s in data.get("streams") or []
        if s.get("scored") and s.get("ovrl") is not None
    }
    for row in rows:
        if int(row["request_index"]) in scored:
            row[DNSMOS_KEY] = scored[int(row["request_index"])]
    return rows


def _measured(prov: Mapping[str, Any]) -> dict[str, Any]:
    config = prov.get("config") or {}
    facts = {name: config.get(name) for name in MEASURED}
    facts["prompts sha256"] = (prov.get("prompts") or {}).get("sha256")
    facts["model"] = prov.get("model")
    return facts


def _served_rates(arm: ArmPoint) -> set[int]:
    return {int(r["sample_rate"]) for rows in arm.records for r in rows if r.get("ok")}


def check_alike(a: ArmPoint, b: ArmPoint) -> None:
    """AbInputError naming the first thing the two arms (or two rounds of one arm) measured
    differently: the provenance's measured fields and the sample rate actually served."""
    first = _measured(a.provenance[0])
    for arm in (a, b):
        for d, prov in zip(arm.dirs, arm.provenance, strict=True):
            facts = _measured(prov)
            for name, value in facts.items():
                if value != first[name]:
                    raise AbInputError(
                        f"{d / 'provenance.json'}: {name} {value!r}, but "
                        f"{a.dirs[0] / 'provenance.json'} has {first[name]!r}: the arms must "
                        f"measure the same thing"
                    )
    rates_a, rates_b = _served_rates(a), _served_rates(b)
    if rates_a and rates_b and rates_a != rates_b:
        raise AbInputError(
            f"{b.dirs[0] / 'records.jsonl'}: served at {sorted(rates_b)} Hz, but "
            f"{a.dirs[0] / 'records.jsonl'} at {sorted(rates_a)} Hz: not the same audio"
        )


def _packages(prov: Mapping[str, Any]) -> dict[str, Any]:
    env = prov.get("serving_env") or {}
    return dict(env.get("packages") or prov.get("packages") or {})


def builds(arm: ArmPoint) -> dict[str, Any]:
    """What one arm served with, from its first round (and whether its rounds agree): the
    versions of the serving env, the deploy file's sha256, the serving env's folder and the
    machine (host, CPU, GPUs)."""
    prov = arm.provenance[0]
    config = prov.get("config") or {}
    hardware = prov.get("hardware") or {}
    served = {
        "system": prov.get("system"),
        "launcher": config.get("launcher"),
        "packages": _packages(prov),
        "deploy_file": config.get("deploy_file"),
        "deploy_sha256": config.get("deploy_sha256"),
        "serving_env": config.get("serving_env"),
        "env": dict(config.get("env") or {}),
        "machine": {
            "host": prov.get("host"),
            "cpu": hardware.get("cpu_model"),
            "cpus": hardware.get("cpu_count"),
            "gpus": hardware.get("gpus"),
        },
    }
    # The GPUs each round ran on (the job's slot, thetalker.lifecycle.gpu_slots): arms of
    # one pair on different GPUs compare the GPUs too.
    served["gpu_ids"] = sorted(
        {str(g) for p in arm.provenance for g in ((p.get("resources") or {}).get("gpu_ids") or [])}
    )
    drift = [
        str(d)
        for d, p in zip(arm.dirs[1:], arm.provenance[1:], strict=True)
        if _packages(p) != served["packages"]
        or (p.get("config") or {}).get("deploy_sha256") != served["deploy_sha256"]
    ]
    served["changed_between_rounds"] = drift
    return served


def machines_differ(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the arms ran on different machines (host, CPU or GPUs)."""
    return {repr(x["machine"]) for x in a} != {repr(x["machine"]) for x in b}
