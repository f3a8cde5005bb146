"""The Interval every table prints beside a figure, its settings and its methods' names.

Serves every interval cell of every table: points.csv's `*_low`, `*_high` and `*_method`
columns (the throughput, continuity and TTFA tables), wer.csv, naturalness.csv, the health
and agent tables, and thetalker-compare's changes. `method` names how an interval was made
(the METHOD_* names, as the CSVs print them); `at_bound` is the one test for an interval
with no width to show (`proportions`' note: no spread is no certainty).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CONFIDENCE",
    "N_RESAMPLES",
    "SEED",
    "METHOD_BOOTSTRAP",
    "METHOD_WILSON",
    "METHOD_NEWCOMBE",
    "METHOD_REPEATS",
    "METHOD_PAIRED",
    "METHOD_PAIRED_BOOTSTRAP",
    "METHOD_WELCH",
    "METHOD_NONE",
    "METHOD_ORDER_STATISTIC",
    "METHOD_NORMAL",
    "Interval",
    "none_interval",
    "at_bound",
]

CONFIDENCE = 0.95
N_RESAMPLES = 10_000
SEED = 0

# How each interval was made, as the tables' `*_method` columns print it.
METHOD_BOOTSTRAP = "bootstrap"  # percentile bootstrap over requests
METHOD_WILSON = "wilson"  # Wilson score interval of a proportion
METHOD_NEWCOMBE = "newcombe"  # Newcombe's hybrid score interval of a difference of proportions
METHOD_REPEATS = "repeats-t"  # Student t over the N rounds of a point
METHOD_PAIRED = "paired-t"  # Student t over the per-round differences (or log ratios)
# stratified by round, the same request positions drawn for both arms (intervals.paired)
METHOD_PAIRED_BOOTSTRAP = "paired-bootstrap"
METHOD_WELCH = "welch-t"  # Welch t over the rounds of two independent runs
METHOD_NONE = "none"  # too little data for an interval: value only
METHOD_ORDER_STATISTIC = "order-statistic"  # a percentile's binomial order-statistic interval
METHOD_NORMAL = "normal"  # a sum's normal interval (its standard error from the sample)


@dataclass(frozen=True)
class Interval:
    """A figure and its two-sided interval at `confidence`.

    value: the estimate (None when there is no data). low/high: the bounds (None when the
    data cannot give an interval: no data, or a single observation). method: one of the
    METHOD_* names. n: the observations behind it (requests, or rounds for repeats).
    """

    value: float | None
    low: float | None
    high: float | None
    method: str
    n: int
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2.0

    def excludes(self, reference: float) -> bool:
        """True when the interval lies wholly on one side of `reference` (0 for a
        difference, 1 for a ratio): the change is distinguishable from noise."""
        if self.low is None or self.high is None:
            return False
        return self.low > reference or self.high < reference


def none_interval(method: str, n: int = 0, value: float | None = None) -> Interval:
    return Interval(value, None, None, method if value is not None else METHOD_NONE, n)


def at_bound(ci: Interval) -> bool:
    """True when an interval with a value has no width to show: too few units to resample,
    or every resample the same (every observation at a bound, or all alike)."""
    return ci.value is not None and (ci.low is None or ci.high is None or ci.low == ci.high)
