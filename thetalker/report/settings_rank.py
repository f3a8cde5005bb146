"""The settings search's verdicts, pure functions over each setting's measured loads:

- `SettingResult.capacity`: `thetalker.pipeline.capacity.find_capacity` under the service
  level, from the records alone (so a change of capacity.slo reruns no server);
- `rank`: the winner holds the most streams; a tie goes to the lower audible first audio
  p95 at that load;
- `compare`: whether the winner is distinguishable from the runner-up, paired by prompt at
  one load both measured: the lowest load above the runner-up's capacity (where the
  winner held and the runner-up did not), on the figure that broke first for the
  runner-up there; at equal capacities, their capacity load, on audible first audio. Per
  prompt (the same prompts, in the same order, for every setting): lost (failed or
  inaudible, 1/0), not continuous under the level's player (1/0) or audible first audio
  (s); `intervals.paired_interval` of winner minus runner-up. Distinguishable only when the
  whole interval favours the winner (below 0): else "not distinguishable", and the table
  says so;
- `envelope`: at each load, the setting with the best audible first audio p95 among those
  holding continuity and failures there (the public report's hand-tuned profile column,
  found by measurement).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from thetalker.metrics import intervals
from thetalker.metrics.players import has_no_stall, passes_stall_gate, player_model
from thetalker.pipeline.capacity import NEVER, NO_POINTS, Capacity, ServiceLevel, find_capacity

__all__ = ["SettingResult", "Comparison", "rank", "compare", "envelope", "p95_at"]


@dataclass
class SettingResult:
    """One searched setting: `loads` concurrency -> the point's summary; `records` the same
    loads -> their scored records (paired by `sample_id`)."""

    label: str
    stock: bool
    loads: dict[float, dict[str, Any]]
    records: dict[float, list[dict[str, Any]]] = field(default_factory=dict)
    # The open-loop points (request rate -> summary), where the config has request_rates.
    rate_loads: dict[float, dict[str, Any]] = field(default_factory=dict)

    def capacity(self, level: ServiceLevel) -> Capacity:
        return find_capacity({x: level.holds(s) for x, s in self.loads.items()})

    def rate_capacity(self, level: ServiceLevel) -> Capacity:
        """Requests per second held (`NO_POINTS` without open-loop points)."""
        return find_capacity({x: level.holds(s) for x, s in self.rate_loads.items()})


def p95_at(result: SettingResult, load: float | None) -> float | None:
    summary = result.loads.get(load) if load is not None else None
    if not summary:
        return None
    value = summary.get("ttfa_audible_s_p95")
    if value is None and isinstance(summary.get("ttfa_audible_s"), Mapping):
        value = summary["ttfa_audible_s"].get("p95")
    return None if value is None else float(value)


def _streams(cap: Capacity) -> float:
    if cap.verdict == NO_POINTS:
        return -1.0
    return 0.0 if cap.verdict == NEVER or cap.load is None else float(cap.load)


def rank(results: Sequence[SettingResult], level: ServiceLevel) -> list[SettingResult]:
    """Best first: most streams held, then the lower audible p95 there."""

    def key(r: SettingResult) -> tuple[float, float]:
        cap = r.capacity(level)
        p95 = p95_at(r, cap.load)
        return (-_streams(cap), p95 if p95 is not None else float("inf"))

    return sorted(results, key=key)


@dataclass(frozen=True)
class Comparison:
    load: float | None  # where they were compared (None: no load both measured)
    figure: str  # what per prompt: "lost", "not continuous", "audible first audio (s)"
    difference: intervals.Interval | None  # winner minus runner-up, paired by prompt
    distinguishable: bool

    def describe(self) -> str:
        if self.load is None or self.difference is None:
            return "not distinguishable (no load both measured)"
        d = self.difference
        verdict = "distinguishable" if self.distinguishable else "not distinguishable"
        if d.low is None or d.high is None:
            span = f"{d.value:+.3g}, no interval (n={d.n})" if d.value is not None else "no pairs"
        else:
            span = f"{d.value:+.3g} [{d.low:+.3g}, {d.high:+.3g}], n={d.n}"
        return f"{verdict}: {self.figure}, winner - runner-up at {self.load:g} streams {span}"


def _continuous(record: Mapping[str, Any], model: str) -> bool:
    if model == "stall_gate":
        return passes_stall_gate(record)
    if model == "no_stall":
        return has_no_stall(record)
    threshold = float(model[len("max_deficit_") : -1])
    playable = bool(record.get("ok")) and record.get("ttfa_s") is not None
    return playable and float(record.get("max_underrun_s") or 0.0) <= threshold + 1e-12


def _per_prompt(records: Sequence[Mapping[str, Any]], figure: str, model: str) -> dict:
    out: dict[str, float | None] = {}
    for r in records:
        key = str(r.get("sample_id"))
        if key in out:
            continue
        if figure == "lost":
            lost = not r.get("ok") or r.get("ttfa_audible_s") is None
            out[key] = 1.0 if lost else 0.0
        elif figure == "not continuous":
            out[key] = 0.0 if _continuous(r, model) else 1.0
        else:
            value = r.get("ttfa_audible_s") if r.get("ok") else None
            out[key] = None if value is None else float(value)
    return out


def _figure_for(broken: Sequence[str]) -> str:
    """The per-prompt figure of the first broken figure's kind."""
    for name in broken:
        if name.startswith("failures"):
            return "lost"
        if name.startswith("continuity"):
            return "not continuous"
    return "audible first audio (s)"


def compare(winner: SettingResult, runner: SettingResult, level: ServiceLevel) -> Comparison:
    cw, cr = winner.capacity(level), runner.capacity(level)
    both = sorted(set(winner.loads) & set(runner.loads) & set(winner.records))
    figure = "audible first audio (s)"
    if _streams(cw) > _streams(cr):
        above = [x for x in both if cr.load is None or x > cr.load]
        load = above[0] if above else None
        if load is not None:
            figure = _figure_for(level.broken(runner.loads[load], live=True))
    else:
        load = cw.load if cw.load in both else (both[-1] if both else None)
    if load is None:
        return Comparison(None, figure, None, False)
    a = _per_prompt(winner.records.get(load, []), figure, level.player_model)
    b = _per_prompt(runner.records.get(load, []), figure, level.player_model)
    keys = sorted(set(a) & set(b))
    diff = intervals.paired_interval([a[k] for k in keys], [b[k] for k in keys])
    ok = diff.high is not None and diff.high < 0
    return Comparison(load, figure, diff, ok)


def envelope(results: Sequence[SettingResult], level: ServiceLevel) -> list[dict[str, Any]]:
    """Per load: the best audible p95 among the settings holding continuity and failures."""
    continuity = ServiceLevel(
        level.min_continuity_pct,
        player_model=level.player_model,
        max_audible_p95_s=None,
        max_failed_pct=level.max_failed_pct,
    )
    column = player_model(level.player_model).column
    rows = []
    for load in sorted({x for r in results for x in r.loads}):
        holding = [r for r in results if continuity.holds(r.loads.get(load), live=True)]
        with_p95 = [(p95_at(r, load), r) for r in holding if p95_at(r, load) is not None]
        best = min(with_p95, key=lambda t: t[0], default=None)
        rows.append(
            {
                "load": load,
                "measured": sum(1 for r in results if load in r.loads),
                "holding": len(holding),
                "best": best[1].label if best else None,
                "audible_p95_s": best[0] if best else None,
                "continuity_pct": best[1].loads[load].get(column) if best else None,
            }
        )
    return rows
