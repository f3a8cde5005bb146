"""What each arm of an A/B served with.

- `build_rows`: per arm, the serving env's vllm, vllm-omni and torch versions, the deploy
  file and its sha256, the machine, the deploy keys the build does not read
  (thetalker.lifecycle.deploy_reads, asked of the build's own code) and the server figures
  it does not serve (`served_figures_missing`): a cell a build cannot fill says so, never
  empty or 0.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thetalker.lifecycle.deploy_reads import deploy_reads, unserved_figures
from thetalker.report.ab_inputs import ArmPoint, builds, machines_differ

__all__ = ["served_figures_missing", "build_rows"]


def served_figures_missing(arm: ArmPoint) -> dict[str, str] | None:
    """The stream figures (thetalker.lifecycle.deploy_reads.SPEECH_FIGURES) that no round
    of the arm served while its requests were answered, each with why (from the round that
    says most: not exported, never observed, nothing in the point); None where no round's
    server metrics can say (none exposed, or a figure reset over the point)."""
    said = []
    for records, metrics in zip(arm.records, arm.server_metrics, strict=True):
        answered = any(r.get("ok") for r in records if not r.get("warmup"))
        found = unserved_figures(metrics) if metrics and answered else None
        if found is not None:
            said.append(found)
    if not said:
        return None
    stems = set.intersection(*(set(found) for found in said))
    return {stem: said[0][stem] for stem in sorted(stems)}


def _unread_keys(served: Mapping[str, Any]) -> tuple[list[str] | None, str | None]:
    """(keys the build does not read, why not known): asked of the build's own code."""
    deploy, env = served.get("deploy_file"), served.get("serving_env")
    if not deploy:
        return [], None
    if served.get("launcher") == "local":  # it refuses a key it does not know, at start
        return [], None
    if served.get("launcher") != "vllm-omni":
        return None, f"not known for a {served.get('launcher')} server"
    if not Path(deploy).is_file():
        return None, f"{deploy} is gone"
    if not env:
        return None, "no serving_env: the server on PATH was not asked"
    found = _probe(str(env), str(deploy), tuple(sorted((served.get("env") or {}).items())))
    return found["unread"], found["reason"]


@functools.lru_cache(maxsize=64)
def _probe(env: str, deploy: str, variables: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """deploy_reads, once per build and file for the table (it imports vllm: ~15 s)."""
    return deploy_reads(env, deploy, dict(variables))  # never raises: says why


def build_rows(a: Sequence[ArmPoint], b: Sequence[ArmPoint]) -> dict[str, Any]:
    """Both arms' builds (from their first point) and the warnings a reader must see: arms
    on different machines, an arm whose build changed between rounds."""
    out: dict[str, Any] = {}
    served = {}
    for name, points in (("A", a), ("B", b)):
        served[name] = [builds(p) for p in points]
        first = dict(served[name][0])
        keys, why = _unread_keys(first)
        missing = [m for p in points if (m := served_figures_missing(p)) is not None]
        first["unread_deploy_keys"] = keys
        first["unread_deploy_keys_why"] = why
        first["unserved_figures"] = (
            {k: v for m in missing for k, v in m.items() if all(k in x for x in missing)}
            if missing
            else None
        )
        first["changed_between_rounds"] = [
            d for s in served[name] for d in s["changed_between_rounds"]
        ]
        out[name] = first
    warnings = []
    if machines_differ(served["A"], served["B"]):
        warnings.append("the arms ran on different machines: a change may be the machine's")
    gpus = {name: sorted({g for s in served[name] for g in s["gpu_ids"]}) for name in ("A", "B")}
    if gpus["A"] != gpus["B"]:
        warnings.append(
            f"the arms ran on different GPUs (A: {', '.join(gpus['A']) or 'none'}; B: "
            f"{', '.join(gpus['B']) or 'none'}): a change may be the GPU's"
        )
    for name in ("A", "B"):
        if out[name]["changed_between_rounds"]:
            warnings.append(
                f"{name}'s build changed between rounds: "
                + ", ".join(out[name]["changed_between_rounds"][:3])
            )
    out["warnings"] = warnings
    return out
