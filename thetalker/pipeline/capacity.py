"""How many streams one server holds: the largest load that keeps a service level.

Pure functions over load points (a concurrency or a request rate -> its summary), so the
bench job (to plan its next point) and the report (capacity.md) decide alike:

- `ServiceLevel.holds(summary)`: continuity at or above `min_continuity_pct` and, when set,
  TTFA p90 at or below `ttfa_slo_s` (`report.min_continuity_pct`, `report.ttfa_slo_s`).
- `find_capacity(passed)`: the largest load below the first failing one, every load up to
  it passing. A pass above a failure is read as noise, not capacity: the answer is the
  knee, never a lucky point past it. No failing load: "at least" the top of the grid;
  the lowest load failing: "never".
- `next_load(passed, grid, max_steps)`: bisection between the last passing and the first
  failing load, for integer concurrency (stops when they are adjacent) or real-valued
  request rates (stops when the bracket is within `rel_tol` of the failing load), and
  after `max_steps` loads off the grid (`capacity.max_steps`).
- `refine(passed, probe, grid, max_steps)`: runs that plan, `probe(load) -> bool` running
  one point (in the bench job: one more point on the same server).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FOUND",
    "AT_LEAST",
    "NEVER",
    "NO_POINTS",
    "ServiceLevel",
    "Capacity",
    "passes",
    "find_capacity",
    "next_load",
    "refine",
]

FOUND = "found"  # a passing load with a failing one above it
AT_LEAST = "at_least"  # every load passed: capacity is the top of the grid or more
NEVER = "never"  # the lowest load already fails
NO_POINTS = "no_points"  # nothing was run


@dataclass(frozen=True)
class ServiceLevel:
    """What a load must keep to count: continuity (percent, a failed request counts
    against it) and optionally TTFA p90 (seconds)."""

    min_continuity_pct: float = 95.0
    ttfa_slo_s: float | None = None

    def holds(self, summary: Mapping[str, Any] | None) -> bool:
        """A point summary (summary.json, or a points.csv row: `ttfa_s_p90` or
        `ttfa_s: {p90}`) meets the level. Missing figures never hold."""
        if not summary:
            return False
        continuity = summary.get("continuity_pct")
        if continuity is None or continuity < self.min_continuity_pct:
            return False
        if self.ttfa_slo_s is None:
            return True
        p90 = summary.get("ttfa_s_p90")
        if p90 is None and isinstance(summary.get("ttfa_s"), Mapping):
            p90 = summary["ttfa_s"].get("p90")
        return p90 is not None and p90 <= self.ttfa_slo_s


@dataclass(frozen=True)
class Capacity:
    """load: the largest load that holds (None when none does); verdict: one of FOUND,
    AT_LEAST, NEVER, NO_POINTS; first_failing: the lowest failing load (None when none)."""

    load: float | None
    verdict: str
    first_failing: float | None = None

    def label(self, unit: str = "") -> str:
        """`48`, `at least 64`, `never (fails at 1)`, or `n/a`."""
        if self.verdict == NO_POINTS:
            return "n/a"
        if self.verdict == NEVER:
            return f"never (fails at {self.first_failing:g}{unit})"
        text = f"{self.load:g}{unit}"
        return f"at least {text}" if self.verdict == AT_LEAST else text


def passes(points: Mapping[float, Mapping[str, Any]], level: ServiceLevel) -> dict[float, bool]:
    """load -> whether its summary holds the level."""
    return {load: level.holds(summary) for load, summary in points.items()}


def find_capacity(passed: Mapping[float, bool]) -> Capacity:
    loads = sorted(passed)
    if not loads:
        return Capacity(None, NO_POINTS)
    failing = [load for load in loads if not passed[load]]
    if not failing:
        return Capacity(loads[-1], AT_LEAST)
    first_failing = failing[0]
    below = [load for load in loads if load < first_failing]
    if not below:
        return Capacity(None, NEVER, first_failing)
    return Capacity(below[-1], FOUND, first_failing)


def next_load(
    passed: Mapping[float, bool],
    grid: Sequence[float] | None = None,
    max_steps: int = 4,
    integer: bool = True,
    rel_tol: float = 0.05,
) -> float | None:
    """The next load to run, halfway between the capacity and the first failing load,
    or None when the search is done: no bracket (at least / never), the bracket cannot
    be split (adjacent integers, or narrower than `rel_tol` of the failing load), or
    `max_steps` loads off `grid` were already run."""
    capacity = find_capacity(passed)
    if capacity.verdict != FOUND:
        return None
    on_grid = set(grid) if grid is not None else set(passed)
    if sum(1 for load in passed if load not in on_grid) >= max_steps:
        return None
    low, high = capacity.load, capacity.first_failing
    if integer:
        if high - low <= 1:
            return None
        return (int(low) + int(high)) // 2
    if high - low <= rel_tol * high:
        return None
    return (low + high) / 2.0


def refine(
    passed: Mapping[float, bool],
    probe: Callable[[float], bool],
    grid: Sequence[float] | None = None,
    max_steps: int = 4,
    integer: bool = True,
    rel_tol: float = 0.05,
) -> dict[float, bool]:
    """The grid's results plus every load bisection ran (`probe(load)` -> it held)."""
    results = dict(passed)
    grid = list(grid) if grid is not None else list(passed)
    while (load := next_load(results, grid, max_steps, integer, rel_tol)) is not None:
        results[load] = bool(probe(load))
    return results
