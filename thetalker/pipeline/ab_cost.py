"""What an A/B will cost before it runs (docs/ab.md): per pair and model, 2 x rounds arms,
each a bench job with its own server start (every arm is a fresh server), estimated by
`thetalker.pipeline.plan` like any bench job, one after another (the chain).
`thetalker-plan` prints it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from thetalker.pipeline.ab_plan import ab_runs, arm_job, slot_order
from thetalker.pipeline.plan import hours_text, make_plan

__all__ = ["AbEstimate", "estimate_ab", "format_ab_plan"]


@dataclass(frozen=True)
class AbEstimate:
    pair: str
    model: str
    rounds: int
    arms: int
    hours: float
    gpu: bool  # a GPU server (False: CPU, hours of the server's machine)


def estimate_ab(config: Mapping[str, Any]) -> list[AbEstimate]:
    """Per (pair, model): its arms in chain order, every start counted (the first cold)."""
    out = []
    for run in ab_runs(config):
        jobs = {arm: arm_job(config, run, arm, hash_files=False) for arm in ("a", "b")}
        order = [jobs[arm] for _, arm in slot_order(run.rounds)]
        plan = make_plan(order, config["plan"], 1)
        hours = sum(j.hours for j in plan.jobs)
        out.append(AbEstimate(run.pair, run.model, run.rounds, len(order), hours, plan.jobs[0].gpu))
    return out


def format_ab_plan(estimates: list[AbEstimate]) -> str:
    """The A/B's rows and total."""
    if not estimates:
        return ""
    lines = [
        "",
        "A/B (results/tables/ab.md, docs/ab.md):",
        "",
        "| pair | model | rounds | arms (fresh servers) | estimate |",
        "|---|---|---|---|---|",
    ]
    for e in estimates:
        device = "" if e.gpu else " (CPU)"
        lines.append(
            f"| {e.pair} | {e.model} | {e.rounds} | {e.arms} | {hours_text(e.hours)}{device} |"
        )
    gpu = sum(e.hours for e in estimates if e.gpu)
    lines += ["", f"A/B: {gpu:.2f} GPU-hours (CPU servers' hours in their rows only)."]
    return "\n".join(lines) + "\n"
