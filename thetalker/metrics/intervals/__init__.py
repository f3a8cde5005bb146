"""Every interval the tables print, by job; everything is re-exported here
(`from thetalker.metrics import intervals`, `intervals.bootstrap`), and on to
`thetalker.metrics`.

- `core`: the Interval, its settings (95%, 10,000 resamples, seed 0) and methods' names, and
  `at_bound` (an interval with no width to show);
- `resampling`: the engine, scipy's percentile bootstrap and the shared draws that give its
  Intervals for a point's (or a change's) statistics at once;
- `closed_forms`: percentiles and RTFx (a sum over the window), the statistics a point
  bootstraps, with their closed forms from `LARGE_SAMPLE_N` requests on (order statistic,
  normal);
- `proportions`: Wilson and Newcombe, pooled rates (WER's `rate_pct`) and the rule for a
  sample with no spread (never zero-wide);
- `rounds`: Student t over a point's rounds, paired and Welch t, and RTFx over rounds and
  B / A over two runs' rounds (Fieller; thetalker-compare);
- `changes`: B against A between two runs (RTFx ratio, percentile and share differences),
  for thetalker-compare, the ratio column and the A/B;
- `headline`: a point's headline figures with their intervals (points.csv's row);
- `paired`: the interleaved A/B's changes, B against A paired by prompt and slot within
  each round (a stratified paired bootstrap; results/tables/ab.md).

Imports run down that list (no module imports one after it). scipy is imported where an
interval is computed: the client computes none and need not load it.
"""

from thetalker.metrics.intervals import (
    changes,
    closed_forms,
    core,
    headline,
    paired,
    proportions,
    resampling,
    rounds,
)
from thetalker.metrics.intervals.changes import *  # noqa: F403
from thetalker.metrics.intervals.closed_forms import *  # noqa: F403
from thetalker.metrics.intervals.core import *  # noqa: F403
from thetalker.metrics.intervals.headline import *  # noqa: F403
from thetalker.metrics.intervals.paired import *  # noqa: F403
from thetalker.metrics.intervals.proportions import *  # noqa: F403
from thetalker.metrics.intervals.resampling import *  # noqa: F403
from thetalker.metrics.intervals.rounds import *  # noqa: F403

__all__ = [
    *core.__all__,
    *resampling.__all__,
    *closed_forms.__all__,
    *proportions.__all__,
    *rounds.__all__,
    *changes.__all__,
    *headline.__all__,
    *paired.__all__,
]
