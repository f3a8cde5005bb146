"""How many streams one server holds: the largest load that keeps a service level.

Pure functions over load points (a concurrency or a request rate -> its summary), so the
bench job (to plan its next point) and the report (capacity.md) decide alike:

- `ServiceLevel` (`capacity.slo`): several figures at once (failures, continuity under a
  named player model, audible first audio p95, optionally WER and first byte p90);
  `holds(summary)`, and `broken(summary)`: which figures did not hold (at the first failing
  load: the figure that broke first).
- `find_capacity(passed)`: the largest load below the first failing one, every load up to
  it passing. A pass above a failure is not capacity: the answer is the knee, never a
  lucky point past it, and the loads passing above it are kept (`passing_above`, a
  cliff). No failing load: "at least" the top of the grid; the lowest load failing:
  "never".
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

from thetalker.metrics.players import player_model

__all__ = [
    "FOUND",
    "AT_LEAST",
    "NEVER",
    "NO_POINTS",
    "ServiceLevel",
    "Figure",
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


# Defaults of the service level (config/schema.yaml capacity.slo writes the same; where each
# comes from: docs/capacity.md "The service level").
DEFAULT_PLAYER_MODEL = "max_deficit_0.1s"  # vllm-omni's continuity, the headline figure
DEFAULT_MIN_CONTINUITY_PCT = 95.0  # the cost threshold (report.min_continuity_pct)
DEFAULT_MAX_AUDIBLE_P95_S = 1.0  # a voice agent's first audio under about 1 s at p95
DEFAULT_MAX_FAILED_PCT = 1.0  # AIPerf-style goodput: at most 1 request in 100 lost


@dataclass(frozen=True)
class Figure:
    """One figure of the service level at one load: its value, its limit, whether it held
    (`value` None: not measured there, which never holds, except WER: see ServiceLevel)."""

    name: str
    value: float | None
    limit: float
    holds: bool

    def describe(self) -> str:
        shown = "not measured" if self.value is None else f"{self.value:.3g}"
        return f"{self.name} {shown} (limit {self.limit:g})"


def _get(summary: Mapping[str, Any], flat: str, block: str, key: str) -> Any:
    """A figure from a points.csv row (`ttfa_audible_s_p95`) or a summary (`{p95}`)."""
    value = summary.get(flat)
    if value is None and isinstance(summary.get(block), Mapping):
        value = summary[block].get(key)
    return value


@dataclass(frozen=True)
class ServiceLevel:
    """What a load must keep to count, every figure at once (None: that figure is off):

    - failures: failed requests and inaudible streams (a listener got nothing from either)
      at most `max_failed_pct` % of the scored requests;
    - continuity under `player_model` (thetalker.metrics.players) at least
      `min_continuity_pct` % (a failed request counts against it);
    - audible first audio p95 (the onset rule the records name, -45 dBFS by default;
      thetalker.metrics.onset) at most `max_audible_p95_s` seconds;
    - WER at most `max_wer_pct` % on the audio of that load (`wer_pct` in the summary: the
      report takes it from the point's wer.json; the live search cannot measure it, and a
      point without one, a search point, is judged on the other figures);
    - first byte p90 at most `ttfa_slo_s` (the older report.ttfa_slo_s, off by default);
    - what the listener hears (docs/quality.md), measured on a point's saved audio after the
      run like WER, off by default: mean DNSMOS OVRL at least `min_dnsmos_ovrl`
      (`dnsmos_ovrl`, from the point's dnsmos.json), and streams with an audio defect or
      failed at most `max_unhealthy_pct` % (`unhealthy_pct`, from its health.json).
    """

    min_continuity_pct: float = DEFAULT_MIN_CONTINUITY_PCT
    ttfa_slo_s: float | None = None
    player_model: str = DEFAULT_PLAYER_MODEL
    max_audible_p95_s: float | None = DEFAULT_MAX_AUDIBLE_P95_S
    max_failed_pct: float | None = DEFAULT_MAX_FAILED_PCT
    max_wer_pct: float | None = None
    min_dnsmos_ovrl: float | None = None
    max_unhealthy_pct: float | None = None

    def __post_init__(self) -> None:
        player_model(self.player_model)  # a bad name fails here, naming the known ones

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> ServiceLevel:
        """From a job's or a config's `capacity.slo` block (missing keys: the defaults)."""
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ValueError(f"capacity.slo: unknown key(s) {', '.join(unknown)}")
        return cls(
            **{k: v for k, v in spec.items() if not (k == "min_continuity_pct" and v is None)}
        )

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def figures(self, summary: Mapping[str, Any] | None, live: bool = False) -> list[Figure]:
        """Each figure of the level at one point, in the order they are checked. `live`:
        the search's view, without WER (measured after the run)."""
        summary = summary or {}
        out: list[Figure] = []
        if self.max_failed_pct is not None:
            n = summary.get("n_scored")
            lost = (summary.get("n_failed") or 0) + (summary.get("n_inaudible") or 0)
            value = 100.0 * lost / n if n else None
            out.append(
                Figure("failures %", value, self.max_failed_pct, _le(value, self.max_failed_pct))
            )
        model = player_model(self.player_model)
        value = summary.get(model.column)
        out.append(
            Figure(
                f"continuity % ({model.name})",
                value,
                self.min_continuity_pct,
                value is not None and value >= self.min_continuity_pct,
            )
        )
        if self.max_audible_p95_s is not None:
            value = _get(summary, "ttfa_audible_s_p95", "ttfa_audible_s", "p95")
            out.append(
                Figure(
                    "audible first audio p95 (s)",
                    value,
                    self.max_audible_p95_s,
                    _le(value, self.max_audible_p95_s),
                )
            )
        if self.max_wer_pct is not None and not live:
            # Measured at the grid's points only (quality.at_speed_points transcribes c{N});
            # a point without it (a search point) is judged on the other figures.
            value = summary.get("wer_pct")
            held = value is None or value <= self.max_wer_pct
            out.append(Figure("WER %", value, self.max_wer_pct, held))
        if not live:
            out += self._listened(summary)
        if self.ttfa_slo_s is not None:
            value = _get(summary, "ttfa_s_p90", "ttfa_s", "p90")
            out.append(
                Figure("first byte p90 (s)", value, self.ttfa_slo_s, _le(value, self.ttfa_slo_s))
            )
        return out

    def _listened(self, summary: Mapping[str, Any]) -> list[Figure]:
        """DNSMOS OVRL and the unhealthy share, judged where the point's audio was scored
        (a point without them, a search point, is judged on the other figures, as for WER)."""
        out = []
        if self.min_dnsmos_ovrl is not None:
            value = summary.get("dnsmos_ovrl")
            held = value is None or value >= self.min_dnsmos_ovrl
            out.append(Figure("DNSMOS OVRL", value, self.min_dnsmos_ovrl, held))
        if self.max_unhealthy_pct is not None:
            value = summary.get("unhealthy_pct")
            held = value is None or value <= self.max_unhealthy_pct
            out.append(Figure("unhealthy streams %", value, self.max_unhealthy_pct, held))
        return out

    def holds(self, summary: Mapping[str, Any] | None, live: bool = False) -> bool:
        """A point summary (summary.json, or a points.csv row) meets every figure. Missing
        figures never hold; nor does an empty summary."""
        if not summary:
            return False
        return all(f.holds for f in self.figures(summary, live))

    def broken(self, summary: Mapping[str, Any] | None, live: bool = False) -> list[str]:
        """The names of the figures that did not hold (all of them for no summary)."""
        return [f.name for f in self.figures(summary, live) if not f.holds]

    def describe(self) -> str:
        """The level in words, for a table's title."""
        parts = []
        if self.max_failed_pct is not None:
            parts.append(f"failures (and inaudible streams) <= {self.max_failed_pct:g}%")
        parts.append(
            f"continuity >= {self.min_continuity_pct:g}% under "
            f"{player_model(self.player_model).describe}"
        )
        if self.max_audible_p95_s is not None:
            parts.append(f"audible first audio p95 <= {self.max_audible_p95_s:g} s")
        if self.max_wer_pct is not None:
            parts.append(f"WER <= {self.max_wer_pct:g}%")
        if self.min_dnsmos_ovrl is not None:
            parts.append(f"DNSMOS OVRL >= {self.min_dnsmos_ovrl:g}")
        if self.max_unhealthy_pct is not None:
            parts.append(f"streams with an audio defect <= {self.max_unhealthy_pct:g}%")
        if self.ttfa_slo_s is not None:
            parts.append(f"first byte p90 <= {self.ttfa_slo_s:g} s")
        return "; ".join(parts)


def _le(value: float | None, limit: float) -> bool:
    return value is not None and value <= limit


@dataclass(frozen=True)
class Capacity:
    """load: the largest load that holds (None when none does); verdict: one of FOUND,
    AT_LEAST, NEVER, NO_POINTS; first_failing: the lowest failing load (None when none);
    passing_above: loads above the first failing one that held anyway (a cliff: the
    level is not monotone in load there, so the capacity is the knee below, and a reader
    should look)."""

    load: float | None
    verdict: str
    first_failing: float | None = None
    passing_above: tuple[float, ...] = ()

    @property
    def cliff(self) -> bool:
        return bool(self.passing_above)

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
    above = tuple(load for load in loads if load > first_failing and passed[load])
    if not below:
        return Capacity(None, NEVER, first_failing, above)
    return Capacity(below[-1], FOUND, first_failing, above)


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
