"""thetalker.metrics.intervals.rounds: a round's RTFx, and B / A over two runs' rounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tests.support.records import make_record
from thetalker.metrics.intervals import rounds


def test_a_round_of_failures_is_zero_and_a_round_of_nothing_has_no_value():
    assert rounds.round_rtfx([make_record(i, ok=False) for i in range(4)]) == 0.0
    assert rounds.round_rtfx([make_record(0, warmup=True)]) is None
    assert rounds.round_rtfx([make_record(i) for i in range(4)]) > 0


def test_fieller_agrees_with_the_delta_method_when_a_is_far_from_zero():
    # With A's mean many standard errors from 0, Fieller's interval is about the delta
    # method's r +- t * sqrt(vb + r^2 va) / ma.
    xb = np.array([20.0, 20.2, 19.8, 20.1])
    xa = np.array([10.0, 10.1, 9.9, 10.05])
    r = xb.mean() / xa.mean()
    ci = rounds.fieller_welch(xb, xa, r, 0.95)
    vb, va = xb.var(ddof=1) / 4, xa.var(ddof=1) / 4
    df = (vb + r**2 * va) ** 2 / (vb**2 / 3 + r**4 * va**2 / 3)
    half = stats.t.ppf(0.975, df) * math.sqrt(vb + r**2 * va) / xa.mean()
    assert ci.value == pytest.approx(r)
    assert ci.low == pytest.approx(r - half, rel=2e-3)
    assert ci.high == pytest.approx(r + half, rel=2e-3)


def test_fieller_is_open_above_when_a_is_not_told_from_zero_and_none_without_spread():
    xa, xb = np.array([0.0, 20.0, 20.0]), np.array([20.0, 20.1, 19.9])
    ci = rounds.fieller_welch(xb, xa, float(xb.mean() / xa.mean()), 0.95)
    assert (ci.low, ci.high) == (0.0, math.inf)
    same = np.array([5.0, 5.0])
    assert rounds.fieller_welch(same, same, 1.0, 0.95) is None
