"""The capacity search of one bench job (`capacity.refine`), on the server the grid ran on.

After the grid, `thetalker.pipeline.serve_and_sweep` hands its session here: bisection
(`thetalker.pipeline.capacity.refine`, at most `capacity.max_steps` points in all) between
the last load that holds the service level (`capacity.slo`) and the first that does not,
on the closed loop, then on the open loop with the steps left. Each probe is a point like
any other, under `search/{point}/`; with `capacity.repeat_boundary` the capacity's load
runs again under `search/{point}/repeat{k}/`. What was run and found becomes the job's
search manifest (`thetalker.data.manifest`). A load is a `Load`: the grid's points are too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from thetalker.data import layout
from thetalker.data.manifest import SearchManifest, SearchPoint
from thetalker.pipeline.job import BenchJob

if TYPE_CHECKING:  # imported lazily at run time (serve_and_sweep's `--help` stays light)
    from thetalker.pipeline.capacity import ServiceLevel

__all__ = ["Load", "PointRunner", "RATE_DIGITS", "search", "service_level", "manifest_of"]

RATE_DIGITS = 4  # significant digits of a bisected request rate (its folder name r{R})


@dataclass(frozen=True)
class Load:
    """One load point: `concurrency` streams (closed loop) or `request_rate` requests/s."""

    concurrency: int | None = None
    request_rate: float | None = None

    @property
    def label(self) -> str:
        return layout.point_label(self.concurrency, self.request_rate)


class PointRunner(Protocol):
    """What the search runs its points on: the bench job's session (serve_and_sweep)."""

    job: BenchJob

    def run_point(
        self, load: Load, dirs: Sequence[Path], search: bool = False
    ) -> dict[str, Any]: ...


def search(
    session: PointRunner, grid: Mapping[Load, dict[str, Any]], search_dir: Path
) -> tuple[list[SearchPoint], dict[str, Any]]:
    """The capacity search (job.capacity): bisection on the closed loop, then on the open
    loop with the steps left. Returns the search points (manifest entries) and the
    capacity found per loop kind."""
    from thetalker.pipeline.capacity import find_capacity, refine

    job = session.job
    spec = dict(job.capacity or {})
    level = service_level(spec)
    steps_left = int(spec["max_steps"])  # every job carries it (checked in BenchJob)
    rounds = layout.round_names(job.repeats)
    points: list[SearchPoint] = []
    capacity: dict[str, Any] = {}
    for kind, closed in (("streams", True), ("requests_per_s", False)):
        on_grid = {
            (load.concurrency if closed else load.request_rate): summary
            for load, summary in grid.items()
            if (load.concurrency is not None) == closed
        }
        if not on_grid:
            continue
        summaries = dict(on_grid)
        passed = {x: _holds(level, s) for x, s in on_grid.items()}

        def probe(x: float, closed: bool = closed, summaries: dict = summaries) -> bool:
            load = Load(concurrency=int(x)) if closed else Load(request_rate=_round_rate(x))
            dirs = [search_dir / load.label / r for r in rounds]
            summary = session.run_point(load, dirs, search=True)
            holds = _holds(level, summary)
            summaries[x] = summary
            points.append(_manifest_entry(load, dirs, holds, summary, level))
            return holds

        results = refine(passed, probe, list(on_grid), steps_left, integer=closed)
        steps_left -= len(results) - len(on_grid)
        found = find_capacity(results)
        unit = "" if closed else " req/s"
        broke = (
            _broken(level, summaries.get(found.first_failing))
            if found.first_failing is not None
            else []
        )
        capacity[kind] = {
            "load": found.load,
            "verdict": found.verdict,
            "first_failing": found.first_failing,
            "label": found.label(unit),
            "broke_first": broke,  # the figures that failed at the first failing load
            "cliff": list(found.passing_above),  # loads above it that held anyway
        }
        repeats = int(spec.get("repeat_boundary", 0))  # older specs have none
        if repeats and found.load is not None:
            capacity[kind]["boundary_repeats"] = [
                p.to_dict()
                for p in _repeat_boundary(
                    session, level, found.load, closed, repeats, search_dir, rounds
                )
            ]
        print(f"capacity ({kind}): {job.system}/{job.model} {capacity[kind]['label']}", flush=True)
    return points, capacity


def service_level(spec: Mapping[str, Any]) -> ServiceLevel:
    """The job's service level: `capacity.slo`, or (older jobs) min_continuity_pct and
    ttfa_slo_s at the top of `capacity`, the level they meant (no other figure)."""
    from thetalker.pipeline.capacity import ServiceLevel

    if "slo" in spec:
        return ServiceLevel.from_spec(spec["slo"] or {})
    return ServiceLevel(
        float(spec.get("min_continuity_pct", 95.0)),
        spec.get("ttfa_slo_s"),
        max_audible_p95_s=None,
        max_failed_pct=None,
    )


def _holds(level: ServiceLevel, summary: dict[str, Any]) -> bool:
    """Live: the search measures no WER; a point that failed its acceptance never holds."""
    return level.holds(summary, live=True) and "failure" not in summary


def _broken(level: ServiceLevel, summary: dict[str, Any] | None) -> list[str]:
    broken = level.broken(summary, live=True)
    return broken + (["acceptance"] if summary and "failure" in summary else [])


def _repeat_boundary(
    session: PointRunner,
    level: ServiceLevel,
    load_value: float,
    closed: bool,
    repeats: int,
    search_dir: Path,
    rounds: Sequence[str],
) -> list[SearchPoint]:
    """The capacity's load run `repeats` times more on the same server (capacity.
    repeat_boundary), under search/{point}/repeat{k}/: whether it held each time. Kept in
    search.json only (a repeat is not another point of the tables; outside the point layout,
    so no reader of records takes it for one)."""
    load = Load(concurrency=int(load_value)) if closed else Load(request_rate=load_value)
    out = []
    for k in range(1, repeats + 1):
        dirs = [search_dir / load.label / f"repeat{k}" / r for r in rounds]
        summary = session.run_point(load, dirs, search=True)
        out.append(_manifest_entry(load, dirs, _holds(level, summary), summary, level))
    return out


def _round_rate(rate: float) -> float:
    """A bisected rate to RATE_DIGITS significant digits: its folder name says it exactly."""
    return float(f"{rate:.{RATE_DIGITS}g}")


def _manifest_entry(
    load: Load, dirs: Sequence[Path], holds: bool, summary: dict[str, Any], level: ServiceLevel
) -> SearchPoint:
    return SearchPoint(
        point=load.label,
        concurrency=load.concurrency,
        request_rate=load.request_rate,
        holds=holds,
        broken=tuple(_broken(level, summary)),
        figures={f.name: f.value for f in level.figures(summary, live=True)},
        continuity_pct=summary.get("continuity_pct"),
        ttfa_s_p90=(summary.get("ttfa_s") or {}).get("p90"),
        failure=summary.get("failure"),
        records=tuple(str(d / "records.jsonl") for d in dirs),
        summaries=tuple(str(d / "summary.json") for d in dirs),
        provenance=tuple(str(d / "provenance.json") for d in dirs),
    )


def manifest_of(
    job: BenchJob, points: Sequence[SearchPoint], capacity: dict[str, Any]
) -> SearchManifest:
    """search.json's content: the job's search points (none when off or nothing to refine)."""
    return SearchManifest(
        system=job.system,
        model=job.model,
        refine=job.capacity is not None,
        capacity_search=dict(job.capacity) if job.capacity else None,
        points=tuple(points),
        capacity=capacity,
    )
