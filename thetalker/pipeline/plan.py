"""What a configuration will cost before it runs: jobs, requests per point, GPU-hours, wall time.

For every bench job of the config (one per (system, model), each holding one GPU for its
life) the estimate adds a server start, the warm-up and scored requests of every point and
round, and the capacity search's extra points (at most `capacity.max_steps`, each at about
the largest grid load's size). A point of N requests at concurrency c takes
`N * mean audio s per request / RTFx(c)` seconds; a request-rate point takes its requests
divided by the rate. Wall time: the jobs laid greedily, longest first, on the GPUs that run
at once (`--gpus`, Snakemake's `--resources gpu=N`). Every rate is an assumption the config
can state under `plan:` (config/schema.yaml); the defaults are the original benchmark's
published figures (RTFx at 32 streams on one H100, its README's table) and a speech rate of
15 characters a second; a model without one uses `plan.default`. After a run, `actual_hours`
sets beside each job what its provenance says it took (first point's start to last point's
end).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thetalker.data import layout
from thetalker.data.prompts import load_prompts
from thetalker.lifecycle.gpu_slots import GPU_LAUNCHERS
from thetalker.pipeline.job import BenchJob

__all__ = [
    "PUBLISHED_RTFX_C32",
    "RATE_KEYS",
    "plan_rate_problem",
    "JobEstimate",
    "Plan",
    "estimate_job",
    "make_plan",
    "rtfx_at",
    "actual_hours",
    "hours_text",
    "format_plan",
]

# RTFx at 32 streams, H100 80GB, vllm-omni 0.30.0 (the original benchmark's README): the
# default rate of each published model, stock and thestage.
PUBLISHED_RTFX_C32: dict[str, dict[str, float]] = {
    "qwen3tts17b": {"vllm-omni": 143.1, "thestage-vllm-omni": 175.7},
    "qwen3tts06b": {"vllm-omni": 159.8, "thestage-vllm-omni": 184.5},
    "voxcpm2": {"vllm-omni": 78.2, "thestage-vllm-omni": 102.5},
    "omnivoice": {"vllm-omni": 92.7, "thestage-vllm-omni": 119.4},
    "moss": {"vllm-omni": 35.1, "thestage-vllm-omni": 65.6},
}
REFERENCE_CONCURRENCY = 32
# The rates a model's plan may state (config/schema.yaml's plan.default).
RATE_KEYS = ("first_start_s", "warm_start_s", "audio_s_per_char", "rtfx")


def _positive(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def _rates_problem(rates: Any, where: str) -> str | None:
    if not isinstance(rates, Mapping):
        return f"{where}: must be a mapping of rates (got {rates!r})"
    for key, value in rates.items():
        if key not in RATE_KEYS:
            return f"{where}.{key}: unknown rate (known: {', '.join(RATE_KEYS)})"
        if key != "rtfx" and not _positive(value):
            return f"{where}.{key}: must be a positive finite number (got {value!r})"
    curve = rates.get("rtfx")
    if curve is None:
        return None
    if not isinstance(curve, Mapping) or not curve:
        return f"{where}.rtfx: must be a non-empty mapping {{concurrency: RTFx}} (got {curve!r})"
    seen: dict[int, Any] = {}
    for key, value in curve.items():
        text = str(key).strip()
        if isinstance(key, bool) or not text.isdigit() or int(text) < 1:
            return f"{where}.rtfx: key {key!r} is no concurrency (an integer >= 1)"
        if int(text) in seen:
            return f"{where}.rtfx: keys {seen[int(text)]!r} and {key!r} both mean {int(text)}"
        seen[int(text)] = key
        if not _positive(value):
            return f"{where}.rtfx.{key}: must be a positive finite number (got {value!r})"
    return None


def plan_rate_problem(plan_cfg: Mapping[str, Any]) -> str | None:
    """`field: why` for the first plan rate that cannot be estimated from (None: all can):
    every rate a positive finite number, every RTFx curve non-empty with integer
    concurrency keys >= 1 (the estimate divides by them, and interpolates between them)."""
    problem = _rates_problem(plan_cfg.get("default") or {}, "plan.default")
    if problem:
        return problem
    models = plan_cfg.get("models") or {}
    if not isinstance(models, Mapping):
        return f"plan.models: must be a mapping of models (got {models!r})"
    for model, rates in models.items():
        problem = _rates_problem(rates, f"plan.models.{model}")
        if problem:
            return problem
    return None


@dataclass(frozen=True)
class JobEstimate:
    system: str
    model: str
    points: tuple[tuple[str, int], ...]  # (point label, requests incl. warm-up) in run order
    start_s: float
    requests_s: float
    search_s: float
    rate_source: str  # where the RTFx came from: "plan", "published", "default"
    gpu: bool = True  # holds a GPU (False: a CPU server, counted in wall time only)
    kind: str = "runs"  # its results folder: "runs" (speed) or "quality"

    @property
    def hours(self) -> float:
        return (self.start_s + self.requests_s + self.search_s) / 3600.0


@dataclass
class Plan:
    gpus: int
    jobs: list[JobEstimate] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return sum(j.hours for j in self.jobs if j.gpu)

    @property
    def wall_hours(self) -> float:
        """Longest-first onto `gpus` GPUs that each run one job at a time."""
        loads = [0.0] * max(1, min(self.gpus, len(self.jobs) or 1))
        heapq.heapify(loads)
        for job in sorted(self.jobs, key=lambda j: j.hours, reverse=True):
            heapq.heappush(loads, heapq.heappop(loads) + job.hours)
        return max(loads) if self.jobs else 0.0


def rtfx_at(curve: Mapping[Any, Any], c: float) -> float:
    """RTFx at concurrency c from a {concurrency: RTFx} curve: linear between the points it
    states, proportional to c below the first (one stream's pace times c), flat above the
    last (the server is saturated)."""
    points = sorted((float(k), float(v)) for k, v in curve.items())
    if c <= points[0][0]:
        return points[0][1] * c / points[0][0]
    for (c0, r0), (c1, r1) in zip(points, points[1:], strict=False):
        if c <= c1:
            return r0 + (r1 - r0) * (c - c0) / (c1 - c0)
    return points[-1][1]


def _rates(plan_cfg: Mapping[str, Any], job: BenchJob) -> tuple[dict[str, Any], str]:
    default = dict(plan_cfg.get("default") or {})
    stated = (plan_cfg.get("models") or {}).get(job.model)
    if stated:
        return {**default, **stated}, "plan"
    published = PUBLISHED_RTFX_C32.get(job.model, {}).get(job.system)
    if published is not None:
        return {**default, "rtfx": {REFERENCE_CONCURRENCY: published}}, "published"
    return default, "default"


def estimate_job(
    job: BenchJob, plan_cfg: Mapping[str, Any], mean_chars: float, first_on_gpu: bool
) -> JobEstimate:
    """One (system, model) job's seconds: start, every point's requests, the search."""
    rates, source = _rates(plan_cfg, job)
    audio_per_request = mean_chars * float(rates["audio_s_per_char"])
    points: list[tuple[str, int]] = []
    requests_s = 0.0
    for c in job.concurrency:
        n = job.requests[c] + job.warmup
        points.append((layout.concurrency_label(c), n * job.repeats))
        requests_s += job.repeats * n * audio_per_request / rtfx_at(rates["rtfx"], c)
    for rate in job.request_rates:
        n = (job.rate_requests or 0) + job.warmup
        points.append((layout.rate_label(rate), n * job.repeats))
        requests_s += job.repeats * n / rate
    search_s = 0.0
    if job.capacity and job.concurrency:
        top = max(job.concurrency)
        steps = int(job.capacity["max_steps"])  # the job carries every key (BenchJob)
        n = job.requests[top] + job.warmup
        search_s = steps * n * audio_per_request / rtfx_at(rates["rtfx"], top)
    start_s = float(rates["first_start_s"] if first_on_gpu else rates["warm_start_s"])
    gpu = job.launcher in GPU_LAUNCHERS
    return JobEstimate(
        job.system, job.model, tuple(points), start_s, requests_s, search_s, source, gpu
    )


def make_plan(
    jobs: Sequence[BenchJob],
    plan_cfg: Mapping[str, Any],
    gpus: int | None = None,
    kinds: Sequence[str] | None = None,
) -> Plan:
    """Every job's estimate; the first `gpus` jobs start cold (a first start on its GPU)."""
    gpus = int(gpus or plan_cfg.get("gpus") or 1)
    chars: dict[str, float] = {}
    out = Plan(gpus)
    for i, job in enumerate(jobs):
        if job.prompts not in chars:
            prompts = load_prompts(job.prompts)
            chars[job.prompts] = sum(len(p.text) for p in prompts) / max(1, len(prompts))
        est = estimate_job(job, plan_cfg, chars[job.prompts], first_on_gpu=i < gpus)
        out.jobs.append(dataclasses.replace(est, kind=kinds[i]) if kinds else est)
    return out


def actual_hours(results: Path, system: str, model: str, kind: str = "runs") -> float | None:
    """What the job took by its provenance (earliest start to latest end over its points),
    None when it has not run."""
    from datetime import datetime

    starts, ends = [], []
    for path in (results / kind / system / model).rglob("provenance.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            starts.append(datetime.fromisoformat(data["started_at"]))
            ends.append(datetime.fromisoformat(data["ended_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    if not starts:
        return None
    return (max(ends) - min(starts)).total_seconds() / 3600.0


def hours_text(h: float | None) -> str:
    """`1.25 h`, or minutes under a tenth of an hour (`4.5 min`); `n/a` for None."""
    if h is None:
        return "n/a"
    return f"{h:.2f} h" if h >= 0.1 else f"{h * 60:.1f} min"


def format_plan(plan: Plan, results: Path | None = None) -> str:
    """The plan as Markdown: one row per job, then the totals."""
    head = "| system | model | points (requests) | start | requests | search | estimate |"
    rule = "|---|---|---|---|---|---|---|"
    if results is not None:
        head, rule = head + " took |", rule + "---|"
    lines = [head, rule]
    took_total = 0.0
    for j in plan.jobs:
        points = ", ".join(f"{label} ({n})" for label, n in j.points)
        row = (
            f"| {j.system} | {j.model} | {points} | {hours_text(j.start_s / 3600)} | "
            f"{hours_text(j.requests_s / 3600)} | {hours_text(j.search_s / 3600)} | "
            f"{hours_text(j.hours)} ({j.rate_source}{'' if j.gpu else ', CPU'}) |"
        )
        if results is not None:
            took = actual_hours(results, j.system, j.model, j.kind)
            took_total += (took or 0.0) if j.gpu else 0.0
            row += f" {hours_text(took)} |"
        lines.append(row)
    jobs_per_gpu = math.ceil(len(plan.jobs) / max(1, plan.gpus)) if plan.jobs else 0
    lines += [
        "",
        f"{len(plan.jobs)} bench jobs on {plan.gpus} GPU slot(s) at once (about {jobs_per_gpu} "
        f"per slot): {plan.gpu_hours:.2f} GPU-hours, about {hours_text(plan.wall_hours)} of wall "
        "time (CPU jobs count in the wall time only).",
        "Rates: 'plan' = stated in the config's plan block, 'published' = the original "
        "benchmark's RTFx at 32 streams (H100), 'default' = plan.default.",
    ]
    if results is not None:
        lines.append(f"Took (provenance, {results}): {took_total:.2f} GPU-hours in all.")
    return "\n".join(lines) + "\n"
